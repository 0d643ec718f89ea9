package controller

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/controller/adapt"
	"github.com/fleet-role/fleet-role/swapplan"
)

func lease(rv, holder, swap string) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: api.LeaseName, ResourceVersion: rv,
		Annotations: map[string]string{api.AnnotationSwap: swap}}}
	if holder != "" {
		l.Spec.HolderIdentity = ptr.To(holder)
	}
	return l
}

func TestTheControllersOwnWriteIsKeptUntilTheWatchBringsANewerOne(t *testing.T) {
	pokes := 0
	c := &cache{changed: func() { pokes++ }}
	c.setLease(lease("10", "", ""))
	assert.Equal(t, 1, pokes, "the first Lease seen wakes a pass")

	// The controller takes the Lease; its write is kept at once and wakes
	// the next pass.
	c.setLease(lease("12", api.ControllerHolder, `{"id":"a"}`))
	assert.Equal(t, "12", c.leaseObject().ResourceVersion)
	assert.Equal(t, 2, pokes)

	// The watch delivers a copy older than that write: it is dropped.
	c.setLease(lease("11", "", ""))
	assert.Equal(t, "12", c.leaseObject().ResourceVersion)
	// The watch's echo of the write changes nothing and wakes nothing.
	c.setLease(lease("12", api.ControllerHolder, `{"id":"a"}`))
	assert.Equal(t, 2, pokes)
	// Someone else's later write replaces it, and wakes a pass.
	c.setLease(lease("15", "regrade", ""))
	assert.Equal(t, "15", c.leaseObject().ResourceVersion)
	assert.Equal(t, 3, pokes)

	// Versions that do not compare, as a fake API's, are taken as they come.
	c.setLease(lease("", "", ""))
	assert.Empty(t, c.leaseObject().ResourceVersion)
}

func TestTheStatusKeptWakesAPassOnlyWhenTheManualRequestChanged(t *testing.T) {
	pokes := 0
	c := &cache{changed: func() { pokes++ }}
	cm := func(rv, req string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv},
			Data: map[string]string{api.StatusKey: rv, api.RequestKey: req}}
	}
	c.setStatus(cm("5", ""))
	c.setStatus(cm("7", ""))
	assert.Equal(t, 1, pokes, "the controller's own status write is no reason for a pass")
	c.setStatus(cm("6", `{"out":"v1"}`))
	assert.Equal(t, "7", c.statusObject().ResourceVersion, "an older copy is dropped")
	c.setStatus(cm("8", `{"out":"v1"}`))
	assert.Equal(t, 2, pokes, "a new manual request wakes a pass")
}

func TestAStatusThatDoesNotReadKeepsTheLastOneRead(t *testing.T) {
	c := &cache{changed: func() {}, log: slog.New(slog.DiscardHandler)}
	cm := func(rv, status, req string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: api.Namespace, Name: api.StatusConfigMap, ResourceVersion: rv},
			Data: map[string]string{api.StatusKey: status, api.RequestKey: req}}
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	c.setStatus(cm("5", `{"v":1,"cooldownUntil":"2026-11-30T13:00:00Z","updatedAt":"2026-11-30T11:59:00Z"}`, ""))
	c.setStatus(cm("6", `{"v":1,"cooldownUntil":"2026-11-30T13:00:00Z",`, `{"out":"v1","in":"s1","at":"2026-11-30T11:59:30Z"}`))

	assert.Equal(t, "6", c.statusObject().ResourceVersion, "the new copy is kept, its other keys with it")
	s, problems := c.snapshot(swapplan.Config{}, nil, now)
	assert.Empty(t, problems)
	require.NotNil(t, s.Status.CooldownUntil, "the cooldown is not forgotten")
	assert.Equal(t, now.Add(time.Hour), *s.Status.CooldownUntil)
	require.NotNil(t, s.Request)
	assert.Equal(t, "s1", s.Request.In)

	// A status taken away is absent, not malformed.
	c.setStatus(cm("7", "", ""))
	s, _ = c.snapshot(swapplan.Config{}, nil, now)
	assert.Nil(t, s.Status.CooldownUntil)
	// With no status read before, a malformed one is read as absent and named.
	c.setStatus(cm("8", "{", ""))
	s, problems = c.snapshot(swapplan.Config{}, nil, now)
	assert.Nil(t, s.Status.CooldownUntil)
	assert.Len(t, problems, 1)
}

// promoteRequest is the annotation of a promote request of execSwap.
func promoteRequest(n *corev1.Node) {
	n.Annotations[api.AnnotationRequest] = `{"swap":"` + execSwap.ID + `","action":"promote","at":"2026-12-01T10:00:00Z"}`
}

func TestANodeTheControllerWroteIsPlannedOnAtOnceAndTheWatchsOlderCopyIsDropped(t *testing.T) {
	f := newFixture(t, node("s1", "10", nil))
	c := f.exec.cache
	requested := func() bool {
		snap, _ := c.snapshot(swapplan.Config{}, nil, execNow)
		return snap.Nodes[0].Request != nil
	}
	q := &api.Request{Swap: execSwap.ID, Action: api.RequestPromote, At: execNow}
	require.NoError(t, f.do(swapplan.Plan{Action: swapplan.Action{Type: api.ActionPromote, Node: "s1", Request: q}, Swap: &execSwap}))
	assert.True(t, requested(), "the Node the patch returned is planned on before the watch brings it")
	c.nodeChanged(node("s1", "10", nil))

	c.wrote(node("s1", "12", promoteRequest))
	assert.True(t, requested(), "the write is planned on before the watch brings it")
	c.nodeChanged(node("s1", "11", nil))
	assert.True(t, requested(), "a copy older than the write is dropped")
	c.nodeChanged(node("s1", "13", nil))
	assert.False(t, requested(), "a newer one replaces it")
}

func TestANodeWhoseWriteFailedIsReadBackBeforeAPassPlansSoAWriteThatLandedIsNotMadeAgain(t *testing.T) {
	f := newFixture(t, node("s1", "10", nil))
	c := f.exec.cache
	// The patch lands, and the API server goes before it answers.
	apply := k8stesting.ObjectReaction(f.client.Tracker())
	f.client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		_, _, _ = apply(a)
		return true, nil, apierrors.NewServiceUnavailable("the API server went away")
	})
	reads := 0
	f.client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if reads++; reads == 1 {
			return true, nil, apierrors.NewServiceUnavailable("still away")
		}
		return false, nil, nil
	})
	q := &api.Request{Swap: execSwap.ID, Action: api.RequestPromote, At: execNow}
	err := f.do(swapplan.Plan{Action: swapplan.Action{Type: api.ActionPromote, Node: "s1", Request: q}, Swap: &execSwap})
	require.Error(t, err)
	snap, _ := c.snapshot(swapplan.Config{}, nil, execNow)
	require.Nil(t, snap.Nodes[0].Request, "the cache has not seen the write")

	assert.False(t, c.settle(context.Background()), "no pass plans while the Node cannot be read back")
	require.True(t, c.settle(context.Background()))
	snap, _ = c.snapshot(swapplan.Config{}, nil, execNow)
	require.NotNil(t, snap.Nodes[0].Request, "the write that landed is planned on")
	assert.True(t, snap.Nodes[0].Request.At.Equal(execNow))
	assert.True(t, c.settle(context.Background()))
	assert.Equal(t, 2, reads, "a Node read back is settled")
}

// The cache's slim copy of a Node keeps what the planner reads of it: its
// InternalIP among the rest, by which a learner that never started is
// known as its host's.
func TestTheSlimNodeKeepsTheInternalIPThePlannerKnowsAnUnstartedLearnerBy(t *testing.T) {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "s1", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "10.0.0.21"}, {Type: corev1.NodeHostName, Address: "s1"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.21"},
		}, Images: []corev1.ContainerImage{{Names: []string{"fleet-role:1"}}}}}
	obj, err := slimNode(n)
	require.NoError(t, err)
	slim := obj.(*corev1.Node)
	assert.Empty(t, slim.ManagedFields)
	assert.Empty(t, slim.Status.Images)
	got, err := adapt.Node(slim)
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.21"}, got.Addresses)
}
