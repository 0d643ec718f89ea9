package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/kubectl/pkg/drain"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// Failure kinds, for the metrics.
const (
	kindConflict = "conflict"
	kindNotFound = "not-found"
	kindDenied   = "denied"
	kindTimeout  = "timeout"
	kindAPI      = "api"
)

// failureKind sorts an action's error for the failures metric.
func failureKind(err error) string {
	switch {
	case errors.Is(err, errNotOurCordon), apierrors.IsConflict(err):
		return kindConflict
	case apierrors.IsNotFound(err):
		return kindNotFound
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return kindDenied
	case errors.Is(err, context.DeadlineExceeded), apierrors.IsTimeout(err), apierrors.IsServerTimeout(err):
		return kindTimeout
	}
	return kindAPI
}

// executor carries out exactly the action a plan returns, and the Lease's
// renewal the plan asks for.
type executor struct {
	client        kubernetes.Interface
	ns            string
	cache         *cache
	leaseDuration time.Duration
	drainTimeout  time.Duration
	now           func() time.Time
	// writeCost is what the swap cost the cluster's writes, for its end.
	writeCost func(swap string) *api.WriteCost
	// statusMu makes the pass's writes of the status ConfigMap and the
	// notifier's one at a time, each from the copy the last one left.
	statusMu sync.Mutex
	// ended is the result the last end wrote in the history, for the
	// pass's metrics: the cache may not hold that write yet.
	ended *api.SwapResult
}

// renew writes the plan's swap record to the regrade Lease and renews it,
// unless the Lease is no longer ours.
func (e *executor) renew(ctx context.Context, rec *api.SwapRecord) error {
	l := e.cache.leaseObject()
	if l == nil || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != api.ControllerHolder {
		return fmt.Errorf("renew the Lease %s/%s: it is no longer held by %s", e.ns, api.LeaseName, api.ControllerHolder)
	}
	if err := setRecord(l, rec); err != nil {
		return err
	}
	now := metav1.NewMicroTime(e.now())
	l.Spec.RenewTime = &now
	l.Spec.LeaseDurationSeconds = seconds(e.leaseDuration)
	out, err := e.client.CoordinationV1().Leases(e.ns).Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("renew the Lease %s/%s: %w", e.ns, api.LeaseName, err)
	}
	e.cache.setLease(out)
	return nil
}

func setRecord(l *coordinationv1.Lease, rec *api.SwapRecord) error {
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	if rec == nil {
		delete(l.Annotations, api.AnnotationSwap)
		return nil
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	l.Annotations[api.AnnotationSwap] = string(b)
	return nil
}

func seconds(d time.Duration) *int32 {
	s := int32(d / time.Second)
	return &s
}

// do carries out the action. The Lease's renewal, where the plan asks for
// it, comes first: a pass that cannot renew acts on nothing.
// The status a pass publishes is written by the end's own update, which
// records the result before the Lease is released.
func (e *executor) do(ctx context.Context, plan swapplan.Plan, status func(*api.Status, error)) error {
	if plan.RenewLease && plan.Action.Type != api.ActionStart {
		if err := e.renew(ctx, plan.Swap); err != nil {
			return err
		}
	}
	a := plan.Action
	switch a.Type {
	case api.ActionNone, api.ActionRollback, api.ActionAbandon, api.ActionStuck:
		return nil // the record the renewal wrote is the whole of them
	case api.ActionStart:
		return e.acquire(ctx, plan.Swap)
	case api.ActionSnapshot, api.ActionPromote, api.ActionStepDown, api.ActionRemoveByVoter,
		api.ActionCordonIn, api.ActionCordonOut, api.ActionRemoveMember, api.ActionMemberGone, api.ActionCleanUp:
		t, _ := e.cache.nodeTaints(a.Node)
		return e.patchNode(ctx, a.Node, a, plan.Swap.ID, t)
	case api.ActionUncordon:
		return e.uncordon(ctx, a, plan.Swap.ID)
	case api.ActionDrainIn, api.ActionDrainOut:
		return e.drain(ctx, a.Node)
	case api.ActionEnd:
		return e.end(ctx, plan, status)
	case api.ActionClearFinished:
		return e.clearFinished(ctx, a)
	}
	return fmt.Errorf("unknown action %q", a.Type)
}

// NodePatch is the patch the executor sends for an action to the Node it
// acts on (for the end, to each Node it clears; for a clear-finished, the
// clear, after the uncordon's patch where it lifts a cordon): its type
// and body. swap is the swap's ID; taints and resourceVersion are the Node's as last
// read, of which only the clean-up makes use. It is exported so that
// tests/controller applies these very bytes to a real API server.
func NodePatch(a swapplan.Action, swap string, taints []corev1.Taint, resourceVersion string) (types.PatchType, []byte, error) {
	var patch map[string]any
	switch a.Type {
	case api.ActionSnapshot, api.ActionPromote, api.ActionStepDown, api.ActionRemoveByVoter:
		b, err := json.Marshal(a.Request)
		if err != nil {
			return "", nil, err
		}
		patch = annotations(map[string]any{api.AnnotationRequest: string(b)})
	case api.ActionCordonIn, api.ActionCordonOut:
		patch = map[string]any{
			"spec":     map[string]any{"unschedulable": true},
			"metadata": map[string]any{"annotations": map[string]any{api.AnnotationCordonedBy: swap}},
		}
	case api.ActionUncordon:
		b, err := json.Marshal(uncordon(swap))
		return types.JSONPatchType, b, err
	case api.ActionRemoveMember:
		patch = annotations(map[string]any{api.AnnotationEtcdRemove: "true"})
	case api.ActionMemberGone:
		patch = annotations(map[string]any{api.AnnotationMemberGone: swap})
	case api.ActionCleanUp:
		patch = cleanUp(a.Role, nodeTaints{resourceVersion: resourceVersion, taints: taints})
	case api.ActionEnd, api.ActionClearFinished:
		clear := map[string]any{}
		for _, a := range api.SwapAnnotations {
			clear[a] = nil
		}
		patch = annotations(clear)
	default:
		return "", nil, fmt.Errorf("the action %q patches no Node", a.Type)
	}
	b, err := json.Marshal(patch)
	return types.StrategicMergePatchType, b, err
}

func annotations(a map[string]any) map[string]any {
	return map[string]any{"metadata": map[string]any{"annotations": a}}
}

// jsonPatchOp is one operation of a JSON patch (RFC 6902).
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// uncordon is the patch that lifts the swap's cordon: a JSON patch, so
// that it can test first that cordoned-by still names the swap. Note: a
// merge patch cannot carry that condition, and the Node's resourceVersion
// would be too strict a one (the agent writes its probe sample on the Node
// every probe period). A failed test fails the whole patch, so a Node
// cordoned again meanwhile (another swap, another hand) is left as it is.
// unschedulable is added as false rather than removed: a Node another hand
// uncordoned meanwhile has no field to remove, and is uncordoned all the
// same.
func uncordon(swap string) []jsonPatchOp {
	by := "/metadata/annotations/" + escapeJSONPointer(api.AnnotationCordonedBy)
	return []jsonPatchOp{
		{Op: "test", Path: by, Value: swap},
		{Op: "remove", Path: by},
		{Op: "add", Path: "/spec/unschedulable", Value: false},
	}
}

// escapeJSONPointer escapes a key as one token of a JSON pointer (RFC
// 6901): an annotation's key holds a "/".
func escapeJSONPointer(key string) string {
	return strings.ReplaceAll(strings.ReplaceAll(key, "~", "~0"), "/", "~1")
}

// errNotOurCordon says the Node's cordon is no longer the swap's.
var errNotOurCordon = errors.New("its cordoned-by no longer names the swap")

// uncordon lifts the swap's cordon from the Node, and only the swap's. The
// API server answers a failed test as an invalid request (422); the Node
// is then read once more. Found uncordoned and without cordoned-by, it is
// done: this uncordon landed before, and the pass was planned on a copy
// older than it. Found otherwise, the action fails (as a conflict: the
// Node changed since it was read) and the next pass plans from what the
// Node says then, which is no uncordon of a Node the swap did not cordon.
func (e *executor) uncordon(ctx context.Context, a swapplan.Action, swap string) error {
	err := e.patchNode(ctx, a.Node, a, swap, nodeTaints{})
	if err == nil || !apierrors.IsInvalid(err) {
		return err
	}
	n, gerr := e.client.CoreV1().Nodes().Get(ctx, a.Node, metav1.GetOptions{})
	if gerr == nil && !n.Spec.Unschedulable && n.Annotations[api.AnnotationCordonedBy] == "" {
		return nil
	}
	return fmt.Errorf("%w: %w", err, errNotOurCordon)
}

// cleanUp is the patch of a Node's clean-up: its role, and for a standby
// no server state left. Note: NodeSpec.Taints has no patch strategy (an
// atomic list, k8s.io/api/core/v1 types.go), so a strategic merge patch
// replaces it whole; a "$patch: delete" inside it is kept as a taint of
// the key alone, which the API server refuses ("taints[0].effect: Required
// value"). The patch therefore carries the Node's taints less the etcd-only
// one, with the resourceVersion they were read at as a precondition, so
// that a taint changed meanwhile makes the patch fail with a conflict (and
// be made again next pass from the new list) rather than be overwritten.
func cleanUp(role string, t nodeTaints) map[string]any {
	labels := map[string]any{api.LabelRole: role}
	if role != api.RoleStandby {
		return map[string]any{"metadata": map[string]any{"labels": labels}}
	}
	labels[api.LabelLevel] = nil
	for _, l := range api.ServerLabels {
		labels[l] = nil
	}
	ann := map[string]any{}
	for _, a := range api.EtcdAnnotations {
		ann[a] = nil
	}
	meta := map[string]any{"labels": labels, "annotations": ann}
	patch := map[string]any{"metadata": meta}
	keep := slices.DeleteFunc(slices.Clone(t.taints), func(x corev1.Taint) bool { return x.Key == api.TaintEtcdOnly })
	if len(keep) < len(t.taints) {
		var taints any // null removes the list
		if len(keep) > 0 {
			taints = keep
		}
		patch["spec"] = map[string]any{"taints": taints}
		meta["resourceVersion"] = t.resourceVersion
	}
	return patch
}

// patchNode sends the Node the action's patch. The Node the API server
// returns goes into the cache at once, so that the next pass plans on the
// write, not on a copy the informer has not replaced yet; a patch that
// failed may have landed all the same (the API server gone after it
// wrote), and the Node is read back before the next pass plans (settle).
// Note: a request is new for each pass that asks for it (its time), so a
// pass planned on a Node without the one just written would ask again,
// and the agent carry it out twice.
func (e *executor) patchNode(ctx context.Context, node string, a swapplan.Action, swap string, t nodeTaints) error {
	typ, b, err := NodePatch(a, swap, t.taints, t.resourceVersion)
	if err != nil {
		return err
	}
	out, err := e.client.CoreV1().Nodes().Patch(ctx, node, typ, b, metav1.PatchOptions{})
	if err != nil {
		e.cache.unsure(node)
		return fmt.Errorf("patch node %s: %w", node, err)
	}
	e.cache.wrote(out)
	return nil
}

// acquire takes the regrade Lease with the swap record, creating it if
// there is none; the update carries the cached version, so a Lease taken
// by someone else meanwhile fails with a conflict.
func (e *executor) acquire(ctx context.Context, rec *api.SwapRecord) error {
	now := metav1.NewMicroTime(e.now())
	holder := api.ControllerHolder
	l := e.cache.leaseObject()
	if l == nil {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: api.LeaseName}}
	}
	l.Spec.HolderIdentity = &holder
	l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
	l.Spec.LeaseDurationSeconds = seconds(e.leaseDuration)
	if err := setRecord(l, rec); err != nil {
		return err
	}
	var out *coordinationv1.Lease
	var err error
	if l.ResourceVersion == "" {
		out, err = e.client.CoordinationV1().Leases(e.ns).Create(ctx, l, metav1.CreateOptions{})
	} else {
		out, err = e.client.CoordinationV1().Leases(e.ns).Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("acquire the Lease %s/%s: %w", e.ns, api.LeaseName, err)
	}
	e.cache.setLease(out)
	return nil
}

// drain evicts the Node's Pods with kubectl's drain helper, waiting for
// them at most drainTimeout; the planner waits for what is left.
// Note: the helper's Force is kubectl drain --force (Pods no controller
// manages are deleted too, or the Node never empties), not a manual
// request's overrides: a drain passes no pause, hold or failure domain.
func (e *executor) drain(ctx context.Context, node string) error {
	h := &drain.Helper{
		Ctx:                 ctx,
		Client:              e.client,
		Force:               true,
		IgnoreAllDaemonSets: true,
		DeleteEmptyDirData:  true,
		GracePeriodSeconds:  -1,
		Timeout:             e.drainTimeout,
		Out:                 io.Discard,
		ErrOut:              io.Discard,
	}
	list, errs := h.GetPodsForDeletion(node)
	if len(errs) > 0 {
		return fmt.Errorf("drain %s: %w", node, errors.Join(errs...))
	}
	if err := h.DeleteOrEvictPods(list.Pods()); err != nil {
		return fmt.Errorf("drain %s: %w", node, err)
	}
	return nil
}

// end clears the swap's annotations from the Nodes, records the result in
// the status, and releases the Lease; the record was marked ended by the
// renewal before, so an end interrupted midway is ended again.
func (e *executor) end(ctx context.Context, plan swapplan.Plan, status func(*api.Status, error)) error {
	for _, node := range plan.Action.Clear {
		if err := e.patchNode(ctx, node, plan.Action, plan.Swap.ID, nodeTaints{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	if err := e.recordEnd(ctx, plan, status); err != nil {
		return err
	}
	l := e.cache.leaseObject()
	if l == nil {
		return nil
	}
	if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != api.ControllerHolder {
		return nil // released already
	}
	l.Spec.HolderIdentity, l.Spec.AcquireTime = nil, nil
	now := metav1.NewMicroTime(e.now())
	l.Spec.RenewTime = &now
	if err := setRecord(l, nil); err != nil {
		return err
	}
	out, err := e.client.CoordinationV1().Leases(e.ns).Update(ctx, l, metav1.UpdateOptions{})
	if err != nil {
		return fmt.Errorf("release the Lease %s/%s: %w", e.ns, api.LeaseName, err)
	}
	e.cache.setLease(out)
	return nil
}

// clearFinished clears the annotations of the ended swap a.Swap from the
// Node whose agent reported the finish of its demotion, lifting the
// cordon that swap left first where the plan says so, with the uncordon's
// own patch (only while cordoned-by still names that swap). A Node gone
// is cleared already.
func (e *executor) clearFinished(ctx context.Context, a swapplan.Action) error {
	if a.Uncordon {
		err := e.uncordon(ctx, swapplan.Action{Type: api.ActionUncordon, Node: a.Node}, a.Swap)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	if err := e.patchNode(ctx, a.Node, a, a.Swap, nodeTaints{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// recordEnd writes the swap's result and the cooldown into status.json,
// and removes the manual request it carried out and a cancel of it, in one
// update.
func (e *executor) recordEnd(ctx context.Context, plan swapplan.Plan, status func(*api.Status, error)) error {
	rec := plan.Swap
	return e.updateStatus(ctx, func(st *api.Status, data map[string]string) {
		// The steps it went through, the last closed at its end.
		var steps []api.StepSpan
		if cur := st.Swap; cur != nil && cur.ID == rec.ID {
			steps = slices.Clone(st.Steps)
			if n := len(steps); n > 0 && steps[n-1].End.IsZero() {
				steps[n-1].End = *rec.EndedAt
			}
		}
		status(st, nil)
		st.Swap, st.Steps = nil, nil
		st.Last = &api.SwapResult{ID: rec.ID, Out: rec.Out, In: rec.In, Origin: rec.Origin, Result: rec.Result,
			Reason: rec.Reason, StartedAt: rec.StartedAt, EndedAt: *rec.EndedAt, RequestAt: rec.RequestAt, Pending: rec.Pending, Steps: steps, Dead: rec.Dead,
			Overrides: rec.Overrides}
		if e.writeCost != nil {
			st.Last.Writes = e.writeCost(rec.ID)
		}
		st.CooldownUntil = plan.Action.CooldownUntil
		if r := plan.Action.Remediations; r != nil {
			st.Remediations = r
		}
		if req, ok := data[api.RequestKey]; ok && rec.RequestAt != nil {
			var q api.ManualRequest
			if json.Unmarshal([]byte(req), &q) == nil && q.At.Equal(*rec.RequestAt) {
				delete(data, api.RequestKey)
				st.Request = nil
				st.Last.By = q.By
			}
		}
		// The history, the newest first. An end made again (its Lease's
		// release failed) finds itself there, with the steps and the
		// requester the first end took, which are gone from the status
		// since.
		if len(st.History) > 0 && st.History[0].ID == rec.ID {
			first := st.History[0]
			if st.Last.Steps == nil {
				st.Last.Steps = first.Steps
			}
			if st.Last.By == "" {
				st.Last.By = first.By
			}
			if st.Last.Writes == nil {
				st.Last.Writes = first.Writes
			}
			st.History[0] = *st.Last
		} else {
			st.History = append([]api.SwapResult{*st.Last}, st.History...)
		}
		st.History = st.History[:min(len(st.History), api.HistoryLength)]
		ended := st.History[0]
		e.ended = &ended
		if v, ok := data[api.CancelKey]; ok {
			var c api.Cancel
			if json.Unmarshal([]byte(v), &c) == nil && c.Swap == rec.ID {
				delete(data, api.CancelKey)
				st.Cancel = nil
			}
		}
	})
}

// updateStatus changes status.json (and the ConfigMap's other keys) by a
// function, creating the ConfigMap if there is none.
func (e *executor) updateStatus(ctx context.Context, change func(st *api.Status, data map[string]string)) error {
	e.statusMu.Lock()
	defer e.statusMu.Unlock()
	cm := e.cache.statusObject()
	create := cm == nil
	if create {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: api.StatusConfigMap}}
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	var st api.Status
	if v := cm.Data[api.StatusKey]; v != "" {
		_ = json.Unmarshal([]byte(v), &st) // a malformed status is written anew
	}
	change(&st, cm.Data)
	st.UpdatedAt = e.now().UTC()
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	cm.Data[api.StatusKey] = string(b)
	var out *corev1.ConfigMap
	if create {
		out, err = e.client.CoreV1().ConfigMaps(e.ns).Create(ctx, cm, metav1.CreateOptions{})
	} else {
		out, err = e.client.CoreV1().ConfigMaps(e.ns).Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write %s/%s: %w", e.ns, api.StatusConfigMap, err)
	}
	e.cache.setStatus(out)
	return nil
}

// event says what was done on the Node acted on.
func eventObject(plan swapplan.Plan) *corev1.ObjectReference {
	node := plan.Action.Node
	if node == "" && plan.Swap != nil {
		node = plan.Swap.Out
	}
	if node == "" {
		return nil
	}
	return &corev1.ObjectReference{Kind: "Node", Name: node, UID: types.UID(node)}
}
