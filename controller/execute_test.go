package controller

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// The executor's tests run each action against a fake clientset and
// assert every request it sent: verb, resource, name, patch type and
// body, and the preconditions (the version read, the holder), and that
// nothing else was sent. What the API server makes of those requests is
// tests/controller's part (requests_test.go), on a real one.

const testNS = api.Namespace

var (
	execNow      = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	execSwap     = api.SwapRecord{ID: "20261201-095000-v1", Out: "v1", In: "s1", Origin: api.OriginManual, StartedAt: execNow.Add(-10 * time.Minute)}
	recJSON      = `{"v":1,"id":"20261201-095000-v1","out":"v1","in":"s1","origin":"manual","startedAt":"2026-12-01T09:50:00Z"}`
	etcdTaint    = corev1.Taint{Key: api.TaintEtcdOnly, Effect: corev1.TaintEffectNoSchedule}
	foreignTaint = corev1.Taint{Key: "example.com/dedicated", Value: "ci", Effect: corev1.TaintEffectNoExecute}
)

// fixture is an executor over a fake clientset holding objs, with a cache
// holding them as the informers deliver them; the fake records every
// request the executor sends.
type fixture struct {
	client *k8sfake.Clientset
	exec   *executor
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	client := k8sfake.NewClientset(objs...)
	c := newCache(client, testNS, labels.Everything(), slog.New(slog.DiscardHandler), func() {})
	for _, obj := range objs {
		switch o := obj.(type) {
		case *corev1.Node:
			c.nodeChanged(o)
		case *coordinationv1.Lease:
			c.setLease(o)
		case *corev1.ConfigMap:
			c.setStatus(o)
		}
	}
	// Note: the fake answers a JSON patch that does not apply with the
	// patch library's error; the API server answers it 422 Invalid, with
	// a message that says no more (tests/controller checks it on a real
	// one).
	react := k8stesting.ObjectReaction(client.Tracker())
	client.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.PatchAction).GetPatchType() != types.JSONPatchType {
			return false, nil, nil
		}
		_, obj, err := react(a)
		var status apierrors.APIStatus
		if err != nil && !errors.As(err, &status) {
			err = &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: http.StatusUnprocessableEntity,
				Reason: metav1.StatusReasonInvalid, Message: "the server rejected our request due to an error in our request", Details: &metav1.StatusDetails{}}}
		}
		return true, obj, err
	})
	// Note: the fake keeps the resourceVersion an object is written with;
	// the API server gives each write a new one, which the next update of
	// the object must carry.
	version := 100
	for _, verb := range []string{"create", "update"} {
		for _, res := range []string{"leases", "configmaps"} {
			client.PrependReactor(verb, res, func(a k8stesting.Action) (bool, runtime.Object, error) {
				obj := a.(interface{ GetObject() runtime.Object }).GetObject().DeepCopyObject()
				m, err := meta.Accessor(obj)
				if err != nil {
					return true, nil, err
				}
				version++
				m.SetResourceVersion(strconv.Itoa(version))
				if verb == "create" {
					return true, obj, client.Tracker().Create(a.GetResource(), obj, a.GetNamespace())
				}
				return true, obj, client.Tracker().Update(a.GetResource(), obj, a.GetNamespace())
			})
		}
	}
	return &fixture{client: client, exec: &executor{client: client, ns: testNS, cache: c,
		leaseDuration: time.Minute, drainTimeout: 5 * time.Second, now: func() time.Time { return execNow }}}
}

// do carries out the plan; the pass's own status says "the pass's".
func (f *fixture) do(plan swapplan.Plan) error {
	return f.exec.do(context.Background(), plan, func(st *api.Status, _ error) { st.Reason = "the pass's" })
}

func (f *fixture) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := f.client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(t, err)
	return n
}

// request is one request sent, as these tests read it. body is canonical
// JSON, so that two bodies compare as JSON values: a patch's body; of a
// Lease written, the version it was read at (the update's precondition),
// its annotations (the record as the JSON it holds) and its spec; of a
// ConfigMap, its version and its data (each value as the JSON it holds);
// of an eviction, its delete options.
type request struct {
	verb, resource, subresource, ns, name string
	fieldSelector                         string
	patchType                             types.PatchType
	body                                  string
}

func (f *fixture) sent(t *testing.T) []request {
	t.Helper()
	var out []request
	for _, a := range f.client.Actions() {
		r := request{verb: a.GetVerb(), resource: a.GetResource().Resource, subresource: a.GetSubresource(), ns: a.GetNamespace()}
		switch a := a.(type) {
		case k8stesting.PatchActionImpl:
			r.name, r.patchType, r.body = a.Name, a.PatchType, canonical(t, string(a.Patch))
		case k8stesting.CreateActionImpl:
			r.name, r.body = objectBody(t, a.Object)
		case k8stesting.UpdateActionImpl:
			r.name, r.body = objectBody(t, a.Object)
		case k8stesting.GetActionImpl:
			r.name = a.Name
		case k8stesting.DeleteActionImpl:
			r.name = a.Name
		case k8stesting.ListActionImpl:
			r.fieldSelector = a.ListOptions.FieldSelector
		}
		out = append(out, r)
	}
	return out
}

// assertSent asserts the requests sent, and that nothing else was.
func (f *fixture) assertSent(t *testing.T, want ...request) {
	t.Helper()
	for i := range want {
		want[i].body = canonical(t, want[i].body)
	}
	assert.Equal(t, want, f.sent(t))
}

func objectBody(t *testing.T, obj runtime.Object) (name, body string) {
	t.Helper()
	var v any
	switch o := obj.(type) {
	case *coordinationv1.Lease:
		name = o.Name
		m := map[string]any{"resourceVersion": o.ResourceVersion, "spec": o.Spec}
		if len(o.Annotations) > 0 {
			ann := map[string]any{}
			for k, s := range o.Annotations {
				ann[k] = s
			}
			if s, ok := o.Annotations[api.AnnotationSwap]; ok {
				ann[api.AnnotationSwap] = json.RawMessage(s)
			}
			m["annotations"] = ann
		}
		v = m
	case *corev1.ConfigMap:
		name = o.Name
		data := map[string]json.RawMessage{}
		for k, s := range o.Data {
			data[k] = json.RawMessage(s)
		}
		v = map[string]any{"resourceVersion": o.ResourceVersion, "data": data}
	case *policyv1.Eviction:
		name, v = o.Name, o.DeleteOptions
	default:
		t.Fatalf("a request with an unexpected object %T", obj)
	}
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return name, canonical(t, string(b))
}

func canonical(t *testing.T, s string) string {
	t.Helper()
	if s == "" {
		return ""
	}
	var v any
	require.NoError(t, json.Unmarshal([]byte(s), &v), s)
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// quote is s as a JSON string: an annotation that holds a document.
func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func node(name, rv string, mod func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: rv, Labels: map[string]string{}, Annotations: map[string]string{}}}
	if mod != nil {
		mod(n)
	}
	return n
}

// heldLease is the regrade Lease held by the controller with the record,
// at version rv.
func heldLease(rv string, rec *api.SwapRecord) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: api.LeaseName, ResourceVersion: rv},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(api.ControllerHolder), LeaseDurationSeconds: ptr.To(int32(60)),
			AcquireTime: ptr.To(metav1.NewMicroTime(execSwap.StartedAt)), RenewTime: ptr.To(metav1.NewMicroTime(execNow.Add(-5 * time.Second)))}}
	if rec != nil {
		b, _ := json.Marshal(rec)
		l.Annotations = map[string]string{api.AnnotationSwap: string(b)}
	}
	return l
}

// renewal is the Lease's renewal read at version rv, with the record as
// JSON.
func renewal(rv, record string) request {
	return request{verb: "update", resource: "leases", ns: testNS, name: api.LeaseName,
		body: `{"resourceVersion":"` + rv + `","annotations":{"fleet-role.io/swap":` + record + `},
			"spec":{"holderIdentity":"fleet-role-controller","leaseDurationSeconds":60,
				"acquireTime":"2026-12-01T09:50:00.000000Z","renewTime":"2026-12-01T10:00:00.000000Z"}}`}
}

func nodePatch(name string, typ types.PatchType, body string) request {
	return request{verb: "patch", resource: "nodes", name: name, patchType: typ, body: body}
}

func TestEachNodeActionRenewsTheLeaseAndSendsExactlyItsPatch(t *testing.T) {
	req := func(action string) *api.Request {
		return &api.Request{Swap: execSwap.ID, Action: action, At: execNow}
	}
	reqAnn := func(doc string) string {
		return `{"metadata":{"annotations":{"fleet-role.io/request":` + quote(doc) + `}}}`
	}
	cordon := `{"metadata":{"annotations":{"fleet-role.io/cordoned-by":"20261201-095000-v1"}},"spec":{"unschedulable":true}}`
	// standby is the clean-up of a standby but for its taints and version.
	standby := `"labels":{"fleet-role.io/role":"standby","fleet-role.io/level":null,"node-role.kubernetes.io/etcd":null,
		"node-role.kubernetes.io/control-plane":null,"node-role.kubernetes.io/master":null},
		"annotations":{"etcd.k3s.cattle.io/node-address":null,"etcd.k3s.cattle.io/node-name":null,"etcd.k3s.cattle.io/removed-node-name":null,"etcd.k3s.cattle.io/remove":null}`
	for _, tc := range []struct {
		name   string
		action swapplan.Action
		taints []corev1.Taint
		want   string // the strategic merge patch's body
	}{
		{"a snapshot request is written on the voter asked",
			swapplan.Action{Type: api.ActionSnapshot, Node: "v2", Request: req(api.RequestSnapshot)}, nil,
			reqAnn(`{"v":1,"swap":"20261201-095000-v1","action":"snapshot","at":"2026-12-01T10:00:00Z"}`)},
		{"a promote request carries the voters the candidate joins through",
			swapplan.Action{Type: api.ActionPromote, Node: "s1", Request: &api.Request{Swap: execSwap.ID, Action: api.RequestPromote, At: execNow, Voters: []string{"v2", "v3"}}}, nil,
			reqAnn(`{"v":1,"swap":"20261201-095000-v1","action":"promote","at":"2026-12-01T10:00:00Z","voters":["v2","v3"]}`)},
		{"a step-down request names the leader to hand over to",
			swapplan.Action{Type: api.ActionStepDown, Node: "v1", Request: &api.Request{Swap: execSwap.ID, Action: api.RequestStepDown, At: execNow, Leader: "s1"}}, nil,
			reqAnn(`{"v":1,"swap":"20261201-095000-v1","action":"step-down","at":"2026-12-01T10:00:00Z","leader":"s1"}`)},
		{"a remove-member request names the member and its ID",
			swapplan.Action{Type: api.ActionRemoveByVoter, Node: "v2", Request: &api.Request{Swap: execSwap.ID, Action: api.RequestRemoveMember, At: execNow, Member: "v1-0a1b2c3d", MemberID: "8e9e05c52164694d"}}, nil,
			reqAnn(`{"v":1,"swap":"20261201-095000-v1","action":"remove-member","at":"2026-12-01T10:00:00Z","member":"v1-0a1b2c3d","memberID":"8e9e05c52164694d"}`)},
		{"the cordon of the candidate names the swap", swapplan.Action{Type: api.ActionCordonIn, Node: "s1"}, nil, cordon},
		{"the cordon of the outgoing voter names the swap", swapplan.Action{Type: api.ActionCordonOut, Node: "v1"}, nil,
			strings.Replace(cordon, "s1", "v1", 1)},
		{"the removal of the member asks k3s", swapplan.Action{Type: api.ActionRemoveMember, Node: "v1"}, nil,
			`{"metadata":{"annotations":{"etcd.k3s.cattle.io/remove":"true"}}}`},
		{"the member gone names the swap", swapplan.Action{Type: api.ActionMemberGone, Node: "v1"}, nil,
			`{"metadata":{"annotations":{"fleet-role.io/member-gone":"20261201-095000-v1"}}}`},
		{"a voter's clean-up sets its role and nothing else, whatever its taints",
			swapplan.Action{Type: api.ActionCleanUp, Node: "s1", Role: api.RoleVoter}, []corev1.Taint{etcdTaint},
			`{"metadata":{"labels":{"fleet-role.io/role":"voter"}}}`},
		{"a standby's clean-up without the etcd-only taint leaves the taints alone and sets no precondition",
			swapplan.Action{Type: api.ActionCleanUp, Node: "v1", Role: api.RoleStandby}, []corev1.Taint{foreignTaint},
			`{"metadata":{` + standby + `}}`},
		{"a standby's clean-up with no taints at all sets no precondition",
			swapplan.Action{Type: api.ActionCleanUp, Node: "v1", Role: api.RoleStandby}, nil,
			`{"metadata":{` + standby + `}}`},
		{"a standby's clean-up with the etcd-only taint alone removes the list, on condition of the version read",
			swapplan.Action{Type: api.ActionCleanUp, Node: "v1", Role: api.RoleStandby}, []corev1.Taint{etcdTaint},
			`{"metadata":{"resourceVersion":"17",` + standby + `},"spec":{"taints":null}}`},
		{"a standby's clean-up with the etcd-only taint and a foreign one writes the foreign one back, on condition of the version read",
			swapplan.Action{Type: api.ActionCleanUp, Node: "v1", Role: api.RoleStandby}, []corev1.Taint{foreignTaint, etcdTaint},
			`{"metadata":{"resourceVersion":"17",` + standby + `},"spec":{"taints":[{"key":"example.com/dedicated","value":"ci","effect":"NoExecute"}]}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := node(tc.action.Node, "17", func(n *corev1.Node) { n.Spec.Taints = tc.taints })
			f := newFixture(t, heldLease("41", &execSwap), n)
			require.NoError(t, f.do(swapplan.Plan{Action: tc.action, Swap: &execSwap, RenewLease: true}))
			f.assertSent(t, renewal("41", recJSON), nodePatch(tc.action.Node, types.StrategicMergePatchType, tc.want))

			// The patch is the one NodePatch builds, which tests/controller
			// applies to a real API server.
			typ, b, err := NodePatch(tc.action, execSwap.ID, tc.taints, "17")
			require.NoError(t, err)
			assert.Equal(t, types.StrategicMergePatchType, typ)
			assert.JSONEq(t, tc.want, string(b))
		})
	}
}

func TestTheUncordonRemovesTheCordonOnlyWhileCordonedByNamesTheSwap(t *testing.T) {
	test := `[{"op":"test","path":"/metadata/annotations/fleet-role.io~1cordoned-by","value":"20261201-095000-v1"},
		{"op":"remove","path":"/metadata/annotations/fleet-role.io~1cordoned-by"},
		{"op":"add","path":"/spec/unschedulable","value":false}]`
	cordoned := func(by string, unschedulable bool) *corev1.Node {
		return node("s1", "17", func(n *corev1.Node) {
			n.Spec.Unschedulable = unschedulable
			if by != "" {
				n.Annotations[api.AnnotationCordonedBy] = by
			}
		})
	}
	plan := swapplan.Plan{Action: swapplan.Action{Type: api.ActionUncordon, Node: "s1"}, Swap: &execSwap, RenewLease: true}
	get := request{verb: "get", resource: "nodes", name: "s1"}
	for _, tc := range []struct {
		name        string
		node        *corev1.Node
		err         bool // the action fails, as a conflict
		reread      bool // the Node is read again after the patch failed
		after       string
		unscheduled bool
	}{
		{"the swap's cordon is lifted and its annotation dropped", cordoned(execSwap.ID, true), false, false, "", false},
		{"a Node another hand uncordoned meanwhile has its annotation dropped all the same", cordoned(execSwap.ID, false), false, false, "", false},
		{"a Node cordoned meanwhile by another swap is left cordoned, and the action fails as a conflict",
			cordoned("20261201-090000-v3", true), true, true, "20261201-090000-v3", true},
		{"a Node cordoned meanwhile by another hand, our annotation dropped, is left cordoned", cordoned("", true), true, true, "", true},
		{"a Node this uncordon already left uncordoned is done, on a pass planned on an older copy", cordoned("", false), false, true, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, heldLease("41", &execSwap), tc.node)
			err := f.do(plan)
			want := []request{renewal("41", recJSON), nodePatch("s1", types.JSONPatchType, test)}
			if tc.reread {
				want = append(want, get)
			}
			f.assertSent(t, want...)
			if tc.err {
				require.ErrorIs(t, err, errNotOurCordon)
				assert.True(t, apierrors.IsInvalid(err), "%v", err)
				assert.Equal(t, kindConflict, failureKind(err))
			} else {
				require.NoError(t, err)
			}
			n := f.node(t, "s1")
			assert.Equal(t, tc.unscheduled, n.Spec.Unschedulable)
			assert.Equal(t, tc.after, n.Annotations[api.AnnotationCordonedBy])
		})
	}

	typ, b, err := NodePatch(plan.Action, execSwap.ID, nil, "")
	require.NoError(t, err)
	assert.Equal(t, types.JSONPatchType, typ)
	assert.JSONEq(t, test, string(b))
}

func TestTheRenewalIsAnUpdateOfTheLeaseReadAndRefusedWhenTheLeaseIsNotTheControllers(t *testing.T) {
	plan := swapplan.Plan{Action: swapplan.Action{Type: api.ActionNone}, Swap: &execSwap, RenewLease: true}
	t.Run("the Lease held is renewed with the record, on condition of the version read", func(t *testing.T) {
		f := newFixture(t, heldLease("41", &execSwap))
		require.NoError(t, f.do(plan))
		f.assertSent(t, renewal("41", recJSON))
	})
	for _, tc := range []struct {
		name  string
		lease *coordinationv1.Lease
	}{
		{"a Lease regrade holds is not renewed", func() *coordinationv1.Lease {
			l := heldLease("41", nil)
			l.Spec.HolderIdentity = ptr.To("regrade")
			return l
		}()},
		{"a Lease released is not renewed", func() *coordinationv1.Lease {
			l := heldLease("41", &execSwap)
			l.Spec.HolderIdentity = nil
			return l
		}()},
		{"no Lease is not created by a renewal", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.lease != nil {
				objs = append(objs, tc.lease)
			}
			f := newFixture(t, append(objs, node("s1", "17", nil))...)
			// Not even the action after the renewal is carried out.
			err := f.do(swapplan.Plan{Action: swapplan.Action{Type: api.ActionCordonIn, Node: "s1"}, Swap: &execSwap, RenewLease: true})
			assert.ErrorContains(t, err, "it is no longer held by "+api.ControllerHolder)
			f.assertSent(t)
		})
	}
}

func TestTheActionsThatOnlyMarkTheRecordSendTheRenewalAlone(t *testing.T) {
	for _, tc := range []struct {
		action, phase string
	}{
		{api.ActionNone, ""},
		{api.ActionRollback, api.PhaseRollback},
		{api.ActionAbandon, api.PhaseAbandon},
		{api.ActionStuck, api.PhaseStuck},
	} {
		t.Run(tc.action, func(t *testing.T) {
			rec := execSwap
			if tc.phase != "" {
				rec.Phase, rec.Reason = tc.phase, "the candidate s1 is not a voter within 10m0s"
			}
			f := newFixture(t, heldLease("41", &execSwap), node("s1", "17", nil))
			require.NoError(t, f.do(swapplan.Plan{Action: swapplan.Action{Type: tc.action}, Swap: &rec, RenewLease: true}))
			record := recJSON
			if tc.phase != "" {
				record = strings.TrimSuffix(recJSON, "}") + `,"phase":"` + tc.phase + `","reason":"the candidate s1 is not a voter within 10m0s"}`
			}
			f.assertSent(t, renewal("41", record))
		})
	}
	t.Run("no swap under way and no action sends nothing", func(t *testing.T) {
		f := newFixture(t, node("s1", "17", nil))
		require.NoError(t, f.do(swapplan.Plan{Action: swapplan.Action{Type: api.ActionNone}}))
		f.assertSent(t)
	})
}

func TestTheStartTakesTheLeaseWithTheRecord(t *testing.T) {
	start := swapplan.Plan{Action: swapplan.Action{Type: api.ActionStart}, Swap: &execSwap, RenewLease: true}
	spec := `"spec":{"holderIdentity":"fleet-role-controller","leaseDurationSeconds":60,
		"acquireTime":"2026-12-01T10:00:00.000000Z","renewTime":"2026-12-01T10:00:00.000000Z"}`
	t.Run("the Lease is created when there is none, and not renewed first", func(t *testing.T) {
		f := newFixture(t)
		require.NoError(t, f.do(start))
		f.assertSent(t, request{verb: "create", resource: "leases", ns: testNS, name: api.LeaseName,
			body: `{"resourceVersion":"","annotations":{"fleet-role.io/swap":` + recJSON + `},` + spec + `}`})
	})
	t.Run("a Lease released is taken on condition of the version read", func(t *testing.T) {
		l := heldLease("41", nil)
		l.Spec.HolderIdentity, l.Spec.AcquireTime = nil, nil
		f := newFixture(t, l)
		require.NoError(t, f.do(start))
		f.assertSent(t, request{verb: "update", resource: "leases", ns: testNS, name: api.LeaseName,
			body: `{"resourceVersion":"41","annotations":{"fleet-role.io/swap":` + recJSON + `},` + spec + `}`})
	})
}

func TestTheDrainEvictsThePodsButTheDaemonSetsAndMirrorPods(t *testing.T) {
	owned := func(kind, name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: kind, Name: name, UID: types.UID(name), Controller: ptr.To(true)}}
	}
	pod := func(ns, name string, mod func(*corev1.Pod)) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(name)},
			Spec: corev1.PodSpec{NodeName: "s1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if mod != nil {
			mod(p)
		}
		return p
	}
	f := newFixture(t, heldLease("41", &execSwap), node("s1", "17", nil),
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "svclb"}},
		pod("apps", "web-7d9f", func(p *corev1.Pod) { p.OwnerReferences = owned("ReplicaSet", "web") }),
		pod("apps", "cache-5c2b", func(p *corev1.Pod) {
			p.OwnerReferences = owned("ReplicaSet", "cache")
			p.Spec.Volumes = []corev1.Volume{{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
		}),
		pod("default", "bare", nil),
		pod("kube-system", "svclb-x2k4", func(p *corev1.Pod) { p.OwnerReferences = owned("DaemonSet", "svclb") }),
		pod("kube-system", "kube-vip-s1", func(p *corev1.Pod) { p.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: "a1b2"} }),
	)
	// The API server's eviction API, which the fake's discovery does not
	// list unless told; and an eviction no budget holds back deletes the
	// Pod at once, where the fake only records it.
	f.client.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "pods/eviction", Kind: "Eviction", Group: "policy", Version: "v1", Namespaced: true},
	}}}
	f.client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		return true, nil, f.client.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), ev.Namespace, ev.Name)
	})

	require.NoError(t, f.do(swapplan.Plan{Action: swapplan.Action{Type: api.ActionDrainIn, Node: "s1"}, Swap: &execSwap, RenewLease: true}))

	// The helper reads (discovery, the Pods, the DaemonSet, each Pod until
	// it is gone) and evicts concurrently: its writes are compared in the
	// order of their names, after the renewal.
	var writes []request
	var list *request
	for _, r := range f.sent(t) {
		switch r.verb {
		case "get":
		case "list":
			list = &r
		default:
			writes = append(writes, r)
		}
	}
	require.NotNil(t, list, "the Pods are listed")
	assert.Equal(t, request{verb: "list", resource: "pods", fieldSelector: "spec.nodeName=s1"}, *list)
	require.NotEmpty(t, writes)
	evictions := writes[1:]
	slices.SortFunc(evictions, func(a, b request) int { return strings.Compare(a.ns+"/"+a.name, b.ns+"/"+b.name) })
	evict := func(ns, name string) request {
		return request{verb: "create", resource: "pods", subresource: "eviction", ns: ns, name: name, body: "{}"}
	}
	want := []request{renewal("41", recJSON), evict("apps", "cache-5c2b"), evict("apps", "web-7d9f"), evict("default", "bare")}
	for i := range want {
		want[i].body = canonical(t, want[i].body)
	}
	assert.Equal(t, want, append(writes[:1:1], evictions...), "the DaemonSet's and the mirror Pod are left, nothing is deleted")
	pods, err := f.client.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var left []string
	for _, p := range pods.Items {
		left = append(left, p.Name)
	}
	assert.ElementsMatch(t, []string{"svclb-x2k4", "kube-vip-s1"}, left)
}

func TestTheEndClearsTheNodesRecordsTheResultAndReleasesTheLease(t *testing.T) {
	requestAt := execNow.Add(-15 * time.Minute)
	rec := execSwap
	rec.RequestAt = &requestAt
	ended := rec
	ended.Phase, ended.Result, ended.EndedAt = api.PhaseEnd, api.ResultCompleted, &execNow
	cooldown := execNow.Add(time.Hour)
	plan := swapplan.Plan{Action: swapplan.Action{Type: api.ActionEnd, Result: api.ResultCompleted, Clear: []string{"v1", "gone"}, CooldownUntil: &cooldown},
		Swap: &ended, RenewLease: true}
	recordAt := `{"v":1,"id":"20261201-095000-v1","out":"v1","in":"s1","origin":"manual","startedAt":"2026-12-01T09:50:00Z","requestAt":"2026-12-01T09:45:00Z"`
	endedJSON := recordAt + `,"phase":"end","result":"completed","endedAt":"2026-12-01T10:00:00Z"}`
	clear := `{"metadata":{"annotations":{"fleet-role.io/request":null,"fleet-role.io/member-gone":null,"fleet-role.io/cordoned-by":null}}}`
	result := `{"id":"20261201-095000-v1","out":"v1","in":"s1","origin":"manual","result":"completed",
		"startedAt":"2026-12-01T09:50:00Z","endedAt":"2026-12-01T10:00:00Z","requestAt":"2026-12-01T09:45:00Z"}`
	// The result is the history's first too.
	last := `"last":` + result + `,"history":[` + result + `],
		"cooldownUntil":"2026-12-01T11:00:00Z","updatedAt":"2026-12-01T10:00:00Z"`
	// The release is an update of the Lease the renewal returned.
	release := request{verb: "update", resource: "leases", ns: testNS, name: api.LeaseName,
		body: `{"resourceVersion":"101","spec":{"leaseDurationSeconds":60,"renewTime":"2026-12-01T10:00:00.000000Z"}}`}
	status := func(data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: api.StatusConfigMap, ResourceVersion: "7"}, Data: data}
	}
	manual := func(at time.Time) string {
		b, _ := json.Marshal(api.ManualRequest{Out: "v1", In: "s1", At: at})
		return string(b)
	}
	v1 := node("v1", "17", func(n *corev1.Node) { n.Annotations[api.AnnotationCordonedBy] = execSwap.ID })

	t.Run("the manual request carried out is removed with the result written", func(t *testing.T) {
		b, _ := json.Marshal(api.Status{Swap: &rec, Step: api.StepUncordon, Request: &api.ManualRequest{Out: "v1", In: "s1", At: requestAt}})
		f := newFixture(t, heldLease("41", &rec), v1, status(map[string]string{api.StatusKey: string(b), api.RequestKey: manual(requestAt)}))
		require.NoError(t, f.do(plan), "a Node gone is cleared already")
		f.assertSent(t,
			renewal("41", endedJSON),
			nodePatch("v1", types.StrategicMergePatchType, clear),
			nodePatch("gone", types.StrategicMergePatchType, clear),
			request{verb: "update", resource: "configmaps", ns: testNS, name: api.StatusConfigMap,
				body: `{"resourceVersion":"7","data":{"status.json":{"v":1,"swap":null,"step":"uncordon","reason":"the pass's",` + last + `}}}`},
			release)
		assert.Empty(t, f.node(t, "v1").Annotations)
		l, err := f.client.CoordinationV1().Leases(testNS).Get(context.Background(), api.LeaseName, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Nil(t, l.Spec.HolderIdentity)
		assert.NotContains(t, l.Annotations, api.AnnotationSwap)
	})
	t.Run("a manual request made since is kept", func(t *testing.T) {
		later := manual(execNow.Add(-time.Minute))
		f := newFixture(t, heldLease("41", &rec), v1, status(map[string]string{api.RequestKey: later}))
		require.NoError(t, f.do(plan))
		f.assertSent(t,
			renewal("41", endedJSON),
			nodePatch("v1", types.StrategicMergePatchType, clear),
			nodePatch("gone", types.StrategicMergePatchType, clear),
			request{verb: "update", resource: "configmaps", ns: testNS, name: api.StatusConfigMap,
				body: `{"resourceVersion":"7","data":{"request.json":` + later + `,"status.json":{"v":1,"swap":null,"reason":"the pass's",` + last + `}}}`},
			release)
	})
	t.Run("a cancel of the swap is removed, a pause and a cancel of another swap kept", func(t *testing.T) {
		cancel := func(id string) string {
			b, _ := json.Marshal(api.Cancel{Swap: id, By: "carol", At: requestAt})
			return string(b)
		}
		pause := `{"v":1,"by":"alice","reason":"freeze","at":"2026-12-01T09:00:00Z"}`
		for _, tc := range []struct{ cancel, kept string }{
			{cancel(rec.ID), ""},
			{cancel("20261201-080000-v2"), `"cancel.json":` + cancel("20261201-080000-v2") + `,`},
		} {
			f := newFixture(t, heldLease("41", &rec), v1, status(map[string]string{api.CancelKey: tc.cancel, api.PauseKey: pause}))
			require.NoError(t, f.do(plan))
			f.assertSent(t,
				renewal("41", endedJSON),
				nodePatch("v1", types.StrategicMergePatchType, clear),
				nodePatch("gone", types.StrategicMergePatchType, clear),
				request{verb: "update", resource: "configmaps", ns: testNS, name: api.StatusConfigMap,
					body: `{"resourceVersion":"7","data":{` + tc.kept + `"pause.json":` + pause + `,"status.json":{"v":1,"swap":null,"reason":"the pass's",` + last + `}}}`},
				release)
		}
	})
	t.Run("the status ConfigMap is created when there is none", func(t *testing.T) {
		f := newFixture(t, heldLease("41", &rec))
		plan := plan
		plan.Action.Clear = nil
		require.NoError(t, f.do(plan))
		f.assertSent(t,
			renewal("41", endedJSON),
			request{verb: "create", resource: "configmaps", ns: testNS, name: api.StatusConfigMap,
				body: `{"resourceVersion":"","data":{"status.json":{"v":1,"swap":null,"reason":"the pass's",` + last + `}}}`},
			release)
	})
	t.Run("an end resumed after the release releases nothing", func(t *testing.T) {
		l := heldLease("41", nil)
		l.Spec.HolderIdentity = nil
		f := newFixture(t, l, status(nil))
		plan := plan
		plan.Action.Clear, plan.RenewLease = nil, false
		require.NoError(t, f.do(plan))
		f.assertSent(t, request{verb: "update", resource: "configmaps", ns: testNS, name: api.StatusConfigMap,
			body: `{"resourceVersion":"7","data":{"status.json":{"v":1,"swap":null,"reason":"the pass's",` + last + `}}}`})
	})
}

func TestTheClearOfAFinishedDemotionSendsTheEndsClearAloneOrAfterTheUncordonOfTheSwapItNamesAndRenewsNoLease(t *testing.T) {
	const ended = "20261201-080000-v3"
	clear := `{"metadata":{"annotations":{"fleet-role.io/request":null,"fleet-role.io/member-gone":null,"fleet-role.io/cordoned-by":null}}}`
	uncordon := `[{"op":"test","path":"/metadata/annotations/fleet-role.io~1cordoned-by","value":"` + ended + `"},
		{"op":"remove","path":"/metadata/annotations/fleet-role.io~1cordoned-by"},
		{"op":"add","path":"/spec/unschedulable","value":false}]`
	kept := func(cordonedBy string) *corev1.Node {
		return node("v3", "17", func(n *corev1.Node) {
			n.Annotations[api.AnnotationRequest] = `{"v":1,"swap":"` + ended + `","action":"step-down","at":"2026-12-01T08:20:00Z"}`
			n.Annotations[api.AnnotationMemberGone] = ended
			if cordonedBy != "" {
				n.Annotations[api.AnnotationCordonedBy] = cordonedBy
				n.Spec.Unschedulable = true
			}
		})
	}
	plan := func(uncordon bool) swapplan.Plan {
		return swapplan.Plan{Action: swapplan.Action{Type: api.ActionClearFinished, Node: "v3", Swap: ended, Uncordon: uncordon}}
	}
	for _, tc := range []struct {
		name        string
		node        *corev1.Node
		uncordon    bool
		want        []request
		err         error
		unscheduled bool
		after       map[string]string
	}{
		{"a Node not cordoned has the swap's annotations cleared", kept(""), false,
			[]request{nodePatch("v3", types.StrategicMergePatchType, clear)}, nil, false, map[string]string{}},
		{"a Node the swap cordoned is uncordoned, then cleared", kept(ended), true,
			[]request{nodePatch("v3", types.JSONPatchType, uncordon), nodePatch("v3", types.StrategicMergePatchType, clear)}, nil, false, map[string]string{}},
		{"a Node cordoned since by another swap is left as it is, and the action fails as a conflict", kept("20261201-095000-v1"), true,
			[]request{nodePatch("v3", types.JSONPatchType, uncordon), {verb: "get", resource: "nodes", name: "v3"}}, errNotOurCordon, true,
			map[string]string{api.AnnotationCordonedBy: "20261201-095000-v1", api.AnnotationMemberGone: ended}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.node)
			err := f.do(plan(tc.uncordon))
			f.assertSent(t, tc.want...)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
			} else {
				require.NoError(t, err)
			}
			n := f.node(t, "v3")
			assert.Equal(t, tc.unscheduled, n.Spec.Unschedulable)
			for k, v := range tc.after {
				assert.Equal(t, v, n.Annotations[k], k)
			}
			if len(tc.after) == 0 {
				assert.Empty(t, n.Annotations)
			}
		})
	}
	t.Run("a Node gone is cleared already", func(t *testing.T) {
		f := newFixture(t)
		require.NoError(t, f.do(plan(true)))
		f.assertSent(t, nodePatch("v3", types.JSONPatchType, uncordon))
	})

	typ, b, err := NodePatch(plan(false).Action, ended, nil, "")
	require.NoError(t, err)
	assert.Equal(t, types.StrategicMergePatchType, typ)
	assert.JSONEq(t, clear, string(b), "the end's clear of a Node")
}

func TestAnUnknownActionSendsNothing(t *testing.T) {
	f := newFixture(t, heldLease("41", &execSwap), node("s1", "17", nil))
	err := f.do(swapplan.Plan{Action: swapplan.Action{Type: "reboot", Node: "s1"}, Swap: &execSwap})
	assert.EqualError(t, err, `unknown action "reboot"`)
	f.assertSent(t)

	_, _, err = NodePatch(swapplan.Action{Type: api.ActionDrainIn, Node: "s1"}, execSwap.ID, nil, "")
	assert.Error(t, err, "a drain patches no Node")
}
