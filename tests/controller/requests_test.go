package controller_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/controller"
	"github.com/fleet-role/fleet-role/swapplan"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
)

// The patches the executor sends, as controller.NodePatch builds them,
// applied once each to a real API server: it must accept them and leave
// the Node as meant, and refuse those whose precondition no longer holds.
// The executor's own tests (controller/execute_test.go) check that these
// are the requests it sends, and nothing else.

const swapID = "20261201-095000-v1"

// requestsFixture creates Nodes on one API server and applies patches.
type requestsFixture struct {
	t *testing.T
	c kubernetes.Interface
}

// create makes a Node as a k3s voter of the fleet looks, changed by mod.
func (f requestsFixture) create(name string, mod func(*corev1.Node)) *corev1.Node {
	f.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name,
		Labels: map[string]string{api.LabelRole: api.RoleVoter, api.LabelLevel: "etcd-only", "kubernetes.io/hostname": name,
			api.LabelEtcd: "true", api.LabelControlPlane: "true", api.LabelMaster: "true"},
		Annotations: map[string]string{api.AnnotationEtcdNodeName: name + "-0a1b2c3d", api.AnnotationProbe: "{}"}}}
	if mod != nil {
		mod(n)
	}
	// Note: the API server taints a Node created without a Ready
	// condition node.kubernetes.io/not-ready (TaintNodesByCondition); an
	// update then gives it the taints meant.
	taints := n.Spec.Taints
	ctx := context.Background()
	n, err := f.c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	require.NoError(f.t, err)
	n.Spec.Taints = taints
	n, err = f.c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	require.NoError(f.t, err)
	require.Equal(f.t, keys(taints), keys(n.Spec.Taints))
	return n
}

// apply sends the Node, as read, the patch the executor sends for the
// action.
func (f requestsFixture) apply(read *corev1.Node, a swapplan.Action) (*corev1.Node, error) {
	f.t.Helper()
	typ, b, err := controller.NodePatch(a, swapID, read.Spec.Taints, read.ResourceVersion)
	require.NoError(f.t, err)
	return f.c.CoreV1().Nodes().Patch(context.Background(), read.Name, typ, b, metav1.PatchOptions{})
}

func (f requestsFixture) get(name string) *corev1.Node {
	f.t.Helper()
	n, err := f.c.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(f.t, err)
	return n
}

func TestEveryNodePatchTheExecutorSendsIsAcceptedByTheRealAPIServer(t *testing.T) {
	f := requestsFixture{t: t, c: kubeapi.Start(t).Client}
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

	t.Run("the cordon sets unschedulable and names the swap", func(t *testing.T) {
		for _, typ := range []string{api.ActionCordonIn, api.ActionCordonOut} {
			n, err := f.apply(f.create("cordon-"+typ, nil), swapplan.Action{Type: typ})
			require.NoError(t, err)
			assert.True(t, n.Spec.Unschedulable)
			assert.Equal(t, swapID, n.Annotations[api.AnnotationCordonedBy])
			assert.Equal(t, "{}", n.Annotations[api.AnnotationProbe], "the other annotations are kept")
		}
	})

	t.Run("each request is written as the agent reads it", func(t *testing.T) {
		for _, tc := range []struct {
			action string
			req    api.Request
		}{
			{api.ActionSnapshot, api.Request{Swap: swapID, Action: api.RequestSnapshot, At: at}},
			{api.ActionPromote, api.Request{Swap: swapID, Action: api.RequestPromote, At: at, Voters: []string{"v2", "v3"}}},
			{api.ActionStepDown, api.Request{Swap: swapID, Action: api.RequestStepDown, At: at, Leader: "s1"}},
			{api.ActionRemoveByVoter, api.Request{Swap: swapID, Action: api.RequestRemoveMember, At: at, Member: "v1-0a1b2c3d", MemberID: "8e9e05c52164694d"}},
		} {
			n := f.create("request-"+tc.action, func(n *corev1.Node) {
				n.Annotations[api.AnnotationRequest] = `{"v":1,"swap":"20261130-080000-v2","action":"snapshot","at":"2026-11-30T08:00:00Z"}`
			})
			n, err := f.apply(n, swapplan.Action{Type: tc.action, Request: &tc.req})
			require.NoError(t, err, tc.action)
			var got api.Request
			require.NoError(t, json.Unmarshal([]byte(n.Annotations[api.AnnotationRequest]), &got), tc.action)
			want := tc.req
			want.V = api.Version
			assert.Equal(t, want, got, "the last request replaces the one before")
		}
	})

	t.Run("the removal of the member and the member gone are annotations", func(t *testing.T) {
		n, err := f.apply(f.create("remove-member", nil), swapplan.Action{Type: api.ActionRemoveMember})
		require.NoError(t, err)
		assert.Equal(t, "true", n.Annotations[api.AnnotationEtcdRemove])
		n, err = f.apply(n, swapplan.Action{Type: api.ActionMemberGone})
		require.NoError(t, err)
		assert.Equal(t, swapID, n.Annotations[api.AnnotationMemberGone])
		assert.Equal(t, "true", n.Annotations[api.AnnotationEtcdRemove])
	})

	t.Run("the clean-up of a voter sets its role and leaves the rest", func(t *testing.T) {
		read := f.create("clean-voter", func(n *corev1.Node) {
			n.Labels[api.LabelRole] = api.RoleStandby
			n.Spec.Taints = []corev1.Taint{etcdOnly}
		})
		n, err := f.apply(read, swapplan.Action{Type: api.ActionCleanUp, Role: api.RoleVoter})
		require.NoError(t, err)
		assert.Equal(t, api.RoleVoter, n.Labels[api.LabelRole])
		assert.Equal(t, "etcd-only", n.Labels[api.LabelLevel])
		assert.Equal(t, keys(read.Spec.Taints), keys(n.Spec.Taints))
	})

	standby := swapplan.Action{Type: api.ActionCleanUp, Role: api.RoleStandby}
	for _, tc := range []struct {
		name, node  string
		taints, out []corev1.Taint
	}{
		{"the clean-up of a standby with the etcd-only taint alone removes it", "etcd-only", []corev1.Taint{etcdOnly}, nil},
		{"the clean-up of a standby with the etcd-only taint and a foreign one keeps the foreign one", "both",
			[]corev1.Taint{foreign, etcdOnly}, []corev1.Taint{foreign}},
		{"the clean-up of a standby without the etcd-only taint leaves its taints", "foreign", []corev1.Taint{foreign}, []corev1.Taint{foreign}},
		{"the clean-up of a standby without taints sets none", "untainted", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := f.create("clean-standby-"+tc.node, func(n *corev1.Node) {
				n.Spec.Taints = tc.taints
				n.Annotations[api.AnnotationEtcdRemove] = "true"
				n.Annotations[api.AnnotationEtcdRemovedNodeName] = "v9-0a1b2c3d"
			})
			n, err := f.apply(read, standby)
			require.NoError(t, err)
			assert.Equal(t, keys(tc.out), keys(n.Spec.Taints))
			assert.Equal(t, map[string]string{api.LabelRole: api.RoleStandby, "kubernetes.io/hostname": read.Name}, n.Labels,
				"no level nor server role left")
			assert.Equal(t, map[string]string{api.AnnotationProbe: "{}"}, n.Annotations, "no etcd annotation left")
		})
	}

	t.Run("the clean-up of a standby whose taints changed since they were read is a conflict", func(t *testing.T) {
		read := f.create("clean-standby-stale", func(n *corev1.Node) { n.Spec.Taints = []corev1.Taint{foreign, etcdOnly} })
		changed := read.DeepCopy()
		maintenance := corev1.Taint{Key: "example.com/maintenance", Effect: corev1.TaintEffectNoSchedule}
		changed.Spec.Taints = append(changed.Spec.Taints, maintenance)
		changed, err := f.c.CoreV1().Nodes().Update(context.Background(), changed, metav1.UpdateOptions{})
		require.NoError(t, err)

		_, err = f.apply(read, standby)
		require.True(t, apierrors.IsConflict(err), "%v", err)
		assert.Equal(t, keys(changed.Spec.Taints), keys(f.get(read.Name).Spec.Taints), "the new taint is not overwritten")
		assert.Equal(t, api.RoleVoter, f.get(read.Name).Labels[api.LabelRole], "nothing of the patch is applied")

		// The next pass reads the new list and makes the patch again.
		n, err := f.apply(f.get(read.Name), standby)
		require.NoError(t, err)
		assert.Equal(t, keys([]corev1.Taint{foreign, maintenance}), keys(n.Spec.Taints))
	})

	t.Run("the end clears the swap's annotations and leaves the others", func(t *testing.T) {
		n := f.create("end", func(n *corev1.Node) {
			n.Spec.Unschedulable = true
			n.Annotations[api.AnnotationCordonedBy] = swapID
			n.Annotations[api.AnnotationMemberGone] = swapID
			n.Annotations[api.AnnotationRequest] = "{}"
		})
		n, err := f.apply(n, swapplan.Action{Type: api.ActionEnd})
		require.NoError(t, err)
		assert.Equal(t, map[string]string{api.AnnotationEtcdNodeName: "end-0a1b2c3d", api.AnnotationProbe: "{}"}, n.Annotations)
		assert.True(t, n.Spec.Unschedulable, "the end clears annotations alone")
	})

	t.Run("the clear of a finished demotion is the end's clear, after the swap's uncordon", func(t *testing.T) {
		n := f.create("clear-finished", func(n *corev1.Node) {
			n.Spec.Unschedulable = true
			n.Annotations[api.AnnotationCordonedBy] = swapID
			n.Annotations[api.AnnotationMemberGone] = swapID
			n.Annotations[api.AnnotationRequest] = `{"v":1,"swap":"` + swapID + `","action":"step-down","at":"2026-12-01T09:55:00Z"}`
		})
		n, err := f.apply(n, swapplan.Action{Type: api.ActionUncordon})
		require.NoError(t, err)
		assert.False(t, n.Spec.Unschedulable)
		n, err = f.apply(n, swapplan.Action{Type: api.ActionClearFinished, Swap: swapID})
		require.NoError(t, err)
		assert.Equal(t, map[string]string{api.AnnotationEtcdNodeName: "clear-finished-0a1b2c3d", api.AnnotationProbe: "{}"}, n.Annotations)
	})
}

func TestTheRealAPIServerUncordonsOnlyANodeWhoseCordonedByNamesTheSwap(t *testing.T) {
	f := requestsFixture{t: t, c: kubeapi.Start(t).Client}
	uncordon := swapplan.Action{Type: api.ActionUncordon}
	cordoned := func(name, by string, unschedulable bool) *corev1.Node {
		return f.create(name, func(n *corev1.Node) {
			n.Spec.Unschedulable = unschedulable
			if by != "" {
				n.Annotations[api.AnnotationCordonedBy] = by
			}
		})
	}

	t.Run("the swap's cordon is lifted and its annotation dropped", func(t *testing.T) {
		n, err := f.apply(cordoned("ours", swapID, true), uncordon)
		require.NoError(t, err)
		assert.False(t, n.Spec.Unschedulable)
		assert.NotContains(t, n.Annotations, api.AnnotationCordonedBy)
		assert.Equal(t, "{}", n.Annotations[api.AnnotationProbe], "the other annotations are kept")
	})
	t.Run("a Node another hand uncordoned meanwhile has the annotation dropped all the same", func(t *testing.T) {
		n, err := f.apply(cordoned("uncordoned", swapID, false), uncordon)
		require.NoError(t, err)
		assert.False(t, n.Spec.Unschedulable)
		assert.NotContains(t, n.Annotations, api.AnnotationCordonedBy)
	})

	// What the executor reads of a refusal: 422, reason Invalid, and
	// nothing more (no cause names the failed test); the fake of its own
	// tests answers so too.
	refused := func(t *testing.T, err error) {
		t.Helper()
		require.Error(t, err)
		var status apierrors.APIStatus
		require.True(t, errors.As(err, &status), "%T %v", err, err)
		s := status.Status()
		assert.Equal(t, metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity, Reason: metav1.StatusReasonInvalid,
			Message: "the server rejected our request due to an error in our request"},
			metav1.Status{Status: s.Status, Code: s.Code, Reason: s.Reason, Message: s.Message})
		assert.True(t, apierrors.IsInvalid(err))
	}
	for _, tc := range []struct {
		name, node, by string
		unschedulable  bool
	}{
		{"a Node another swap cordoned is not uncordoned", "theirs", "20261201-090000-v3", true},
		{"a Node cordoned by another hand, the annotation gone, is not uncordoned", "by-hand", "", true},
		{"a Node uncordoned already, the annotation gone, is refused too: the executor reads it again", "done", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read := cordoned(tc.node, tc.by, tc.unschedulable)
			_, err := f.apply(read, uncordon)
			refused(t, err)
			n := f.get(tc.node)
			assert.Equal(t, tc.unschedulable, n.Spec.Unschedulable)
			assert.Equal(t, tc.by, n.Annotations[api.AnnotationCordonedBy])
			assert.Equal(t, read.ResourceVersion, n.ResourceVersion, "nothing is written")
		})
	}
}
