package controller_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
)

// kuredValue and kuredMulti are kured's lock annotation as kured's
// pkg/daemonsetlock declares it (LockAnnotationValue,
// multiLockAnnotationValue), read here as kured reads it.
type kuredValue struct {
	NodeID   string          `json:"nodeID"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
	Created  time.Time       `json:"created"`
	TTL      time.Duration   `json:"TTL"`
}

type kuredMulti struct {
	MaxOwners int          `json:"maxOwners"`
	Locks     []kuredValue `json:"locks"`
}

// kuredAcquires says whether a kured on node, run with --lock-ttl ttl and
// --concurrency concurrency, would take its lock as the annotation stands
// (present or not), by kured's own judgement in pkg/daemonsetlock:
// DaemonSetSingleLock.Acquire (a holder whose TTL, effectiveTTL's
// choice of the stored one or else the configured one, has not run out
// keeps it) and DaemonSetLock.canAcquireMultiple (fewer places taken than
// kured's --concurrency, or one run out).
func kuredAcquires(t *testing.T, annotation string, present bool, ttl time.Duration, concurrency int, node string) bool {
	t.Helper()
	expired := func(v kuredValue) bool {
		eff := v.TTL
		if eff == 0 {
			eff = ttl
		}
		return eff > 0 && time.Since(v.Created) >= eff
	}
	if concurrency > 1 {
		var m kuredMulti
		if present {
			require.NoError(t, json.Unmarshal([]byte(annotation), &m), "kured reads the annotation: %s", annotation)
		}
		if len(m.Locks) < concurrency {
			return true
		}
		for _, l := range m.Locks {
			if expired(l) {
				return true
			}
		}
		return false
	}
	if !present {
		return true
	}
	var v kuredValue
	require.NoError(t, json.Unmarshal([]byte(annotation), &v), "kured reads the annotation: %s", annotation)
	return expired(v) || v.NodeID == node
}

func createKured(t *testing.T, e *env, annotations map[string]string) {
	t.Helper()
	labels := map[string]string{"name": "kured"}
	_, err := e.api.Client.AppsV1().DaemonSets("kube-system").Create(context.Background(), &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kured", Annotations: annotations},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "kured", Image: "kured:test"}}}},
		},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// kuredLock is the lock annotation as the API server holds it.
func kuredLock(t *testing.T, e *env) (string, bool) {
	t.Helper()
	ds, err := e.api.Client.AppsV1().DaemonSets("kube-system").Get(context.Background(), "kured", metav1.GetOptions{})
	require.NoError(t, err)
	v, ok := ds.Annotations[config.DefaultKuredLockAnnotation]
	return v, ok
}

// swapping names the Nodes labelled fleet-role.io/swapping, with the value.
func swapping(t *testing.T, e *env) map[string]string {
	t.Helper()
	list, err := e.api.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{LabelSelector: api.LabelSwapping})
	require.NoError(t, err)
	out := map[string]string{}
	for _, n := range list.Items {
		out[n.Name] = n.Labels[api.LabelSwapping]
	}
	return out
}

func kuredHoldsConfig(concurrency int) config.Holds {
	h := config.DefaultController().Holds
	h.KuredDaemonSet, h.KuredConcurrency = "kube-system/kured", concurrency
	return h
}

func TestASwapHoldsKuredsLockAndLabelsItsTwoNodesAndEveryVoterUntilItEndsThroughARestartAndWhatARestartFindsLeftIsReleased(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 3, 1, 0)
	// What a controller stopped after an end but before its release left:
	// its place in kured's lock, and its label on a Node.
	left := `{"nodeID":"` + api.ControllerHolder + `","metadata":{"unschedulable":false},"created":"` + time.Now().UTC().Format(time.RFC3339Nano) + `","TTL":1800000000000}`
	createKured(t, e, map[string]string{config.DefaultKuredLockAnnotation: left})
	_, err := e.api.Client.CoreV1().Nodes().Patch(ctx, "v3", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"`+api.LabelSwapping+`":"out"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	require.False(t, kuredAcquires(t, left, true, 0, 1, "v2"), "the lock left behind keeps kured from rebooting")

	e.cfg.Holds = kuredHoldsConfig(1)
	e.start()
	// Note: the controller's first passes come within a period (1 s) of
	// its start; the waits of 10-20 s here are outer limits, and those of
	// 2 minutes for a swap at the test bounds (about 12 s a swap here).
	require.Eventually(t, func() bool {
		_, held := kuredLock(t, e)
		return !held && len(swapping(t, e)) == 0
	}, 20*time.Second, 100*time.Millisecond, "the first passes release the lock and the label that were left")

	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	require.Eventually(t, func() bool { st, _ := e.status(); return st.Swap != nil }, 20*time.Second, 100*time.Millisecond)
	value, held := kuredLock(t, e)
	require.True(t, held, "the swap started holding kured's lock")
	var v kuredValue
	require.NoError(t, json.Unmarshal([]byte(value), &v), value)
	assert.Equal(t, api.ControllerHolder, v.NodeID)
	assert.Equal(t, 30*time.Minute, v.TTL, "kured_lock_ttl, written as kured writes its TTL")
	assert.WithinDuration(t, time.Now(), v.Created, time.Minute)
	assert.JSONEq(t, `{"unschedulable":false}`, string(v.Metadata))
	for _, node := range []string{"v1", "v2", "v3", "s1"} {
		// kured with no --lock-ttl and with a short one alike.
		assert.False(t, kuredAcquires(t, value, true, 0, 1, node), "kured on %s takes the lock mid-swap", node)
		assert.False(t, kuredAcquires(t, value, true, time.Second, 1, node), "kured on %s with --lock-ttl=1s takes the lock mid-swap", node)
	}
	assert.Equal(t, map[string]string{"v1": api.LabelSwappingOut, "s1": api.LabelSwappingIn, "v2": api.LabelSwappingVoter, "v3": api.LabelSwappingVoter}, swapping(t, e),
		"the swap's two Nodes, and every other voter, which an upgrade Plan's selector keeps off")

	// A restart mid-swap: the next controller goes on holding both.
	e.stop()
	e.start()
	res := e.waitEnd(2 * time.Minute)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	require.Eventually(t, func() bool {
		_, held := kuredLock(t, e)
		return !held && len(swapping(t, e)) == 0
	}, 10*time.Second, 50*time.Millisecond, "the end releases the lock and the labels")
	assert.True(t, kuredAcquires(t, "", false, 0, 1, "v2"))
	assert.Zero(t, e.conflicts(), "actions that met a conflict")
}

func TestARolledBackSwapHeldEveryPlaceOfKuredsMultipleLockAndGivesThemBack(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	// kured with --concurrency=2, after a reboot: its lock released, the
	// places kept empty (DaemonSetMultiLock.Release).
	createKured(t, e, map[string]string{config.DefaultKuredLockAnnotation: `{"maxOwners":2,"locks":[]}`})
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["s1"].NeverJoin = true })
	e.cfg.Holds = kuredHoldsConfig(1) // the annotation tells its form
	e.start()
	// Note: the rollback waits out the join bound (20 s); 2 minutes is
	// the outer limit of the swap, 10-20 s those of a pass.
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	require.Eventually(t, func() bool { st, _ := e.status(); return st.Swap != nil }, 20*time.Second, 100*time.Millisecond)
	value, held := kuredLock(t, e)
	require.True(t, held)
	var m kuredMulti
	require.NoError(t, json.Unmarshal([]byte(value), &m), value)
	assert.Equal(t, 2, m.MaxOwners)
	require.Len(t, m.Locks, 2, "every place: %s", value)
	for _, l := range m.Locks {
		assert.Equal(t, api.ControllerHolder, l.NodeID)
	}
	assert.False(t, kuredAcquires(t, value, true, 0, 2, "v2"), "kured --concurrency=2 takes a place mid-swap")

	res := e.waitEnd(2 * time.Minute)
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
	require.Eventually(t, func() bool {
		value, _ = kuredLock(t, e)
		return value != "" && json.Unmarshal([]byte(value), &m) == nil && len(m.Locks) == 0 && len(swapping(t, e)) == 0
	}, 10*time.Second, 50*time.Millisecond, "the rollback's end gives the places back: %s", value)
	assert.Equal(t, 2, m.MaxOwners)
	assert.True(t, kuredAcquires(t, value, true, 0, 2, "v2"))
}

// outgoingStopped says v1's Node carries a step-down request.
func outgoingStopped(t *testing.T, e *env) bool {
	t.Helper()
	n, err := e.api.Client.CoreV1().Nodes().Get(context.Background(), "v1", metav1.GetOptions{})
	require.NoError(t, err)
	var q api.Request
	return json.Unmarshal([]byte(n.Annotations[api.AnnotationRequest]), &q) == nil && q.Action == api.RequestStepDown
}

// setKuredLock writes kured's lock annotation (nil removes it) as kured
// does, by update, again on a conflict with the controller's renewal.
func setKuredLock(t *testing.T, e *env, value *string) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		ds, err := e.api.Client.AppsV1().DaemonSets("kube-system").Get(ctx, "kured", metav1.GetOptions{})
		if err != nil {
			return false
		}
		if ds.Annotations == nil {
			ds.Annotations = map[string]string{}
		}
		if value == nil {
			delete(ds.Annotations, config.DefaultKuredLockAnnotation)
		} else {
			ds.Annotations[config.DefaultKuredLockAnnotation] = *value
		}
		_, err = e.api.Client.AppsV1().DaemonSets("kube-system").Update(ctx, ds, metav1.UpdateOptions{})
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
}

// The done-criterion of one disruption at a time: a kured that takes its
// lock for another voter while a swap runs (fleet-role's place ran out,
// or the swap was forced past it) holds the outgoing voter's stop.
func TestKuredsLockTakenOnAnotherVoterMidSwapHoldsTheOutgoingVotersStopUntilKuredReleasesIt(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	createKured(t, e, nil)
	e.cfg.Holds = config.DefaultController().Holds // kured's DaemonSet found by itself
	e.start()
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	// Note: the test bounds reach the promotion in a few passes of 1 s;
	// 30 s are an outer limit for a busy machine, as in the tests above.
	require.Eventually(t, func() bool {
		st, _ := e.status()
		return st.Swap != nil && (st.Step == api.StepPromote || st.Step == api.StepJoin)
	}, 30*time.Second, 20*time.Millisecond, "the candidate is promoted")
	require.False(t, outgoingStopped(t, e))
	value, held := kuredLock(t, e)
	require.True(t, held, "the swap holds kured's lock, on the DaemonSet it found")
	assert.Contains(t, value, api.ControllerHolder)

	v3 := `{"nodeID":"v3","metadata":{"unschedulable":false},"created":"` + time.Now().UTC().Format(time.RFC3339) + `","TTL":0}`
	setKuredLock(t, e, &v3)
	var st api.Status
	// Note: the join (the fleet's learner catching up) and a pass that
	// reads the holds afresh; a minute is an outer limit.
	require.Eventually(t, func() bool {
		st, _ = e.status()
		return st.Step == api.StepGates && strings.Contains(st.Reason, "held: kured's reboot lock is held by v3")
	}, 60*time.Second, 50*time.Millisecond, "the swap waits at its gates: %s", st.Reason)
	assert.Contains(t, st.Reason, "the outgoing voter v1 is not touched")
	require.NotNil(t, st.Controller)
	assert.Contains(t, st.Controller.Held, "kured's reboot lock is held by v3")
	// Three passes of 1 s held: each would have asked v1 to step down.
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		require.False(t, outgoingStopped(t, e), "v1 is not asked to step down while kured may reboot v3")
	}
	value, _ = kuredLock(t, e)
	assert.Equal(t, v3, value, "kured's holder is left alone")

	setKuredLock(t, e, nil) // kured's Release
	// Note: the rest of the swap at the test bounds takes under 20 s; 2
	// minutes are an outer limit, as waitEnd's other callers give.
	res := e.waitEnd(2 * time.Minute)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	require.Eventually(t, func() bool {
		_, held := kuredLock(t, e)
		return !held && len(swapping(t, e)) == 0
	}, 10*time.Second, 50*time.Millisecond, "the end releases the lock it took again and the labels") // the end's pass, and the next
}
