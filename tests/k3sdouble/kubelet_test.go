package main

import (
	"context"
	"log/slog"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestTheKubeletRegistersItsNodeWithItsOwnLabelsAndK3sNodeLabelsAndPostsItReady(t *testing.T) {
	kube := fake.NewClientset()
	k := &kubeletRole{c: kube, node: "v1", log: slog.New(slog.DiscardHandler), labels: []string{"rack=r1", "gpu"}}
	k.tick(context.Background())

	n, err := kube.CoreV1().Nodes().Get(context.Background(), "v1", metav1.GetOptions{})
	require.NoError(t, err, "the first start registers the Node")
	assert.Equal(t, map[string]string{"kubernetes.io/hostname": "v1", "kubernetes.io/os": runtime.GOOS,
		"kubernetes.io/arch": runtime.GOARCH, "rack": "r1", "gpu": ""}, n.Labels)
	ready := condition(n, corev1.NodeReady)
	require.NotNil(t, ready)
	assert.Equal(t, corev1.ConditionTrue, ready.Status)
}

func TestAKubeletsLaterStartKeepsTheNodesOwnLabelsAndPutsK3sNodeLabelsBack(t *testing.T) {
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "s1",
		Labels: map[string]string{"fleet-role.io/role": "voter", "rack": "r9", "kubernetes.io/hostname": "s1"}}})
	k := &kubeletRole{c: kube, node: "s1", log: slog.New(slog.DiscardHandler), labels: []string{"rack=r1"}}
	k.tick(context.Background())

	n, err := kube.CoreV1().Nodes().Get(context.Background(), "s1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"fleet-role.io/role": "voter", "rack": "r1", "kubernetes.io/hostname": "s1"}, n.Labels,
		"a label not among k3s's node-labels stays; one among them is put back")
}

func TestAKubeletWhoseServerDoesNotServeRegistersNothing(t *testing.T) {
	kube := fake.NewClientset()
	k := &kubeletRole{c: kube, node: "v2", log: slog.New(slog.DiscardHandler), serves: func() bool { return false }}
	k.tick(context.Background())
	nodes, err := kube.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, nodes.Items, "a server's kubelet reaches the API through its own apiserver")
}
