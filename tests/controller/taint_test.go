package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
)

var (
	etcdOnly = corev1.Taint{Key: api.TaintEtcdOnly, Effect: corev1.TaintEffectNoSchedule}
	foreign  = corev1.Taint{Key: "example.com/dedicated", Value: "ci", Effect: corev1.TaintEffectNoExecute}
)

// taint sets the Node's taints and, for the etcd-only one, its level, as
// regrade leaves an etcd-only server.
func taint(t *testing.T, c kubernetes.Interface, name string, taints ...corev1.Taint) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		n.Spec.Taints = taints
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[api.LabelLevel] = "etcd-only"
		_, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		return err == nil // a conflict with the fleet's own writes is tried again
	}, 10*time.Second, 50*time.Millisecond)
}

func keys(taints []corev1.Taint) []string {
	var out []string
	for _, t := range taints {
		out = append(out, t.Key+"="+t.Value+":"+string(t.Effect))
	}
	return out
}

func TestTheCleanUpOfAnOutgoingVoterWithTheEtcdOnlyTaintRemovesItAndKeepsAForeignTaint(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	taint(t, e.api.Client, "v1", foreign, etcdOnly)
	e.start()
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	res := e.waitEnd(2 * time.Minute)
	require.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assertCompleted(t, e, "v1", "s1")
	v1 := e.node("v1")
	assert.Equal(t, []string{"example.com/dedicated=ci:NoExecute"}, keys(v1.Spec.Taints), "ours gone, the foreign kept")
	assert.NotContains(t, v1.Labels, api.LabelLevel)
}

func TestTheRealAPIServerRefusesADeleteDirectiveInsideTheAtomicTaintList(t *testing.T) {
	kube := kubeapi.Start(t)
	c := kube.Client
	ctx := context.Background()
	n, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "v1"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{foreign, etcdOnly}}}, metav1.CreateOptions{})
	require.NoError(t, err)

	// The patch the clean-up used to send: NodeSpec.Taints has no patch
	// strategy, so the list is replaced by one taint of the key alone.
	old := `{"spec":{"taints":[{"key":"` + api.TaintEtcdOnly + `","$patch":"delete"}]}}`
	_, err = c.CoreV1().Nodes().Patch(ctx, "v1", types.StrategicMergePatchType, []byte(old), metav1.PatchOptions{})
	require.Error(t, err)
	assert.True(t, apierrors.IsInvalid(err), "%v", err)
	assert.ErrorContains(t, err, "taints[0].effect: Required value")

	// The list written whole, on condition of the version it was read at:
	// a stale version is a conflict, nothing is overwritten.
	whole := func(rv string) []byte {
		return []byte(`{"metadata":{"resourceVersion":"` + rv + `"},"spec":{"taints":[{"key":"example.com/dedicated","value":"ci","effect":"NoExecute"}]}}`)
	}
	stale := n.ResourceVersion
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule})
	n, err = c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)
	_, err = c.CoreV1().Nodes().Patch(ctx, "v1", types.StrategicMergePatchType, whole(stale), metav1.PatchOptions{})
	assert.True(t, apierrors.IsConflict(err), "%v", err)
	got, err := c.CoreV1().Nodes().Get(ctx, "v1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, keys(n.Spec.Taints), keys(got.Spec.Taints), "the concurrent change is not overwritten")
	assert.Contains(t, keys(got.Spec.Taints), "example.com/maintenance=:NoSchedule")

	got, err = c.CoreV1().Nodes().Patch(ctx, "v1", types.StrategicMergePatchType, whole(n.ResourceVersion), metav1.PatchOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"example.com/dedicated=ci:NoExecute"}, keys(got.Spec.Taints))
}
