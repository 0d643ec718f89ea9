package e2e

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleet-role/fleet-role/tests/kubeapi"
)

// The check that the harness wrote no Node, tried on the real API server:
// it names each write to a Node the test process made, and none a kubelet
// (another user agent) made.
func TestTheNodeCheckNamesTheWritesToNodesTheTestProcessMadeAndNoOthers(t *testing.T) {
	kube := kubeapi.Start(t)
	ctx := context.Background()
	cfg := rest.CopyConfig(kube.Config)
	cfg.UserAgent = "k3s/v1.36.3+k3s1 (linux/amd64) kubernetes/abcdef"
	kubelet, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)

	for _, n := range []string{"v1", "v2"} {
		_, err := kubelet.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	writes, err := kube.NodeWrites()
	require.NoError(t, err)
	assert.Len(t, writes, 2, "the kubelet's")
	assert.Empty(t, writtenBy(writes, harnessAgent()), "Nodes the kubelet registered")

	_, err = kube.Client.CoreV1().Nodes().Patch(ctx, "v2", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"fleet-role.io/role":"voter"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	_, err = kube.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "s1"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	writes, err = kube.NodeWrites()
	require.NoError(t, err)
	assert.Equal(t, []string{"patch v2 (200)", "create s1 (201)"}, writtenBy(writes, harnessAgent()))
}
