package controller_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
)

// deleteNode deletes the Node as kubectl delete node does (again, when
// it is being deleted already), and waits for it to go: k3s's finalizer
// holds it until its member is removed.
func (e *env) deleteNode(name string) {
	e.t.Helper()
	ctx := context.Background()
	err := e.api.Client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	require.True(e.t, err == nil || apierrors.IsNotFound(err), "delete %s: %v", name, err)
	require.Eventually(e.t, func() bool {
		_, err := e.api.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 30*time.Second, 50*time.Millisecond, "the Node %s goes once k3s removed its member", name)
}

// members are the Nodes of etcd's members, sorted.
func (e *env) members() []string {
	var names []string
	e.d.With(func(d *fleetsim.Driver) {
		for _, m := range d.Members {
			names = append(names, m.Node)
		}
	})
	slices.Sort(names)
	return names
}

func (e *env) assertNothingCordoned() {
	e.t.Helper()
	list, err := e.api.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	require.NoError(e.t, err)
	for _, n := range list.Items {
		assert.False(e.t, n.Spec.Unschedulable, "%s is left cordoned", n.Name)
		for _, a := range api.SwapAnnotations {
			assert.NotContains(e.t, n.Annotations, a, "%s on %s", a, n.Name)
		}
	}
}

func TestANodeDeletedMidSwapRollsTheSwapBackOrFinishesItWithoutTheNodeAndQuorumIsKept(t *testing.T) {
	e := newEnv(t, 3, 2, 0)
	e.start()
	waitStep := func(out string, steps ...string) {
		t.Helper()
		var st api.Status
		require.Eventually(t, func() bool {
			st, _ = e.status()
			return st.Swap != nil && st.Swap.Out == out && slices.Contains(steps, st.Step)
		}, 2*time.Minute, 20*time.Millisecond, "swap of %s at %v: %+v", out, steps, st)
	}

	t.Run("the candidate's Node deleted before the outgoing voter steps down", func(t *testing.T) {
		// v3 unhealthy holds the gates: the candidate votes, the
		// outgoing voter is not asked to step down.
		e.d.With(func(d *fleetsim.Driver) { d.Hosts["v3"].UnhealthyUntil = time.Now().Add(time.Hour) })
		_, stderr, code := e.cli("swap", "v1", "s1")
		require.Equal(t, 0, code, stderr)
		waitStep("v1", api.StepGates)
		require.Equal(t, []string{"s1", "v1", "v2", "v3"}, e.members(), "the candidate votes")
		// k3s's finalizer holds the Node, being deleted, while its member
		// is not removed; the controller takes it as there.
		e.d.With(func(d *fleetsim.Driver) { d.K3sPaused = true })
		require.NoError(t, e.api.Client.CoreV1().Nodes().Delete(context.Background(), "s1", metav1.DeleteOptions{}))
		time.Sleep(3 * time.Second)
		s1 := e.node("s1")
		assert.NotNil(t, s1.DeletionTimestamp)
		assert.Contains(t, s1.Finalizers, fleetsim.Finalizer)
		assert.Contains(t, e.members(), "s1")
		st, _ := e.status()
		require.NotNil(t, st.Swap)
		assert.Empty(t, st.Swap.Phase, "the swap goes forward while the Node is there: %s", st.Reason)
		e.d.With(func(d *fleetsim.Driver) { d.K3sPaused = false })
		e.deleteNode("s1")
		e.d.With(func(d *fleetsim.Driver) { d.Hosts["v3"].UnhealthyUntil = time.Time{} })
		res := e.waitEnd(2 * time.Minute)
		assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
		assert.Equal(t, []string{"s1"}, res.Pending)
		assert.Equal(t, []string{"v1", "v2", "v3"}, e.members(), "k3s removed the candidate's member")
		assert.Equal(t, api.RoleVoter, e.node("v1").Labels[api.LabelRole])
		e.assertNothingCordoned()
	})

	t.Run("the outgoing voter's Node deleted while the candidate joins", func(t *testing.T) {
		_, stderr, code := e.cli("swap", "v2", "s2")
		require.Equal(t, 0, code, stderr)
		waitStep("v2", api.StepPromote, api.StepJoin)
		e.deleteNode("v2")
		res := e.waitEnd(2 * time.Minute)
		assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
		assert.Equal(t, []string{"v2"}, res.Pending)
		assert.Equal(t, []string{"s2", "v1", "v3"}, e.members(), "k3s removed the outgoing voter's member")
		assert.Equal(t, api.RoleVoter, e.node("s2").Labels[api.LabelRole])
		e.assertNothingCordoned()
	})
}
