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
// it names a Node the test process created or labelled, and none a
// kubelet (another user agent) wrote.
func TestTheNodeCheckNamesTheNodesTheTestProcessWroteAndNoOthers(t *testing.T) {
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
	list := func() []corev1.Node {
		nodes, err := kube.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		require.NoError(t, err)
		return nodes.Items
	}
	assert.Empty(t, writtenBy(list(), harnessManager()), "Nodes the kubelet registered")

	_, err = kube.Client.CoreV1().Nodes().Patch(ctx, "v2", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"fleet-role.io/role":"voter"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	_, err = kube.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "s1"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	written := writtenBy(list(), harnessManager())
	require.Len(t, written, 2, "%q", written)
	assert.Contains(t, written[0], `v2: Update {"f:metadata":{"f:labels":{"f:fleet-role.io/role":{}}}}`)
	assert.Contains(t, written[1], "s1: Update")
}
