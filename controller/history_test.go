package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

func TestTheStepLogStartsWithASwapAndClosesEachStepWhenTheNextBegins(t *testing.T) {
	t0 := execNow
	rec := &api.SwapRecord{ID: "x", Out: "v1", In: "s1"}
	at := func(step string, d time.Duration) swapplan.Plan {
		since := t0.Add(d)
		return swapplan.Plan{Step: step, Since: &since, Swap: rec}
	}
	log := stepLog(nil, nil, rec, at(api.StepStart, 0), t0)
	assert.Equal(t, []api.StepSpan{{Step: api.StepStart, Start: t0}}, log)
	log = stepLog(log, rec, rec, at(api.StepStart, 0), t0.Add(time.Second))
	assert.Len(t, log, 1, "the same step again changes nothing")
	log = stepLog(log, rec, rec, at(api.StepSnapshot, 2*time.Second), t0.Add(2*time.Second))
	assert.Equal(t, []api.StepSpan{{Step: api.StepStart, Start: t0, End: t0.Add(2 * time.Second)}, {Step: api.StepSnapshot, Start: t0.Add(2 * time.Second)}}, log)
	other := &api.SwapRecord{ID: "y"}
	assert.Equal(t, []api.StepSpan{{Step: api.StepStart, Start: t0.Add(time.Hour)}}, stepLog(log, rec, other, at(api.StepStart, time.Hour), t0),
		"another swap starts its own")
	assert.Nil(t, stepLog(log, rec, nil, at(api.StepEnd, time.Hour), t0), "none with no swap under way")
}

func TestTheEndKeepsTheSwapWithItsStepsWhoAskedAndTheOverridesItStartedWithFirstInAHistoryOfTwenty(t *testing.T) {
	requestAt := execNow.Add(-15 * time.Minute)
	rec := execSwap
	rec.RequestAt = &requestAt
	rec.Overrides = []string{api.OverridePause, api.OverrideHolds}
	ended := rec
	ended.Phase, ended.Result, ended.EndedAt = api.PhaseEnd, api.ResultCompleted, &execNow
	plan := swapplan.Plan{Action: swapplan.Action{Type: api.ActionEnd, Result: api.ResultCompleted}, Swap: &ended, RenewLease: true}
	steps := []api.StepSpan{
		{Step: api.StepSnapshot, Start: rec.StartedAt, End: rec.StartedAt.Add(time.Minute)},
		{Step: api.StepUncordon, Start: rec.StartedAt.Add(time.Minute)},
	}
	var older []api.SwapResult
	for i := range api.HistoryLength {
		older = append(older, api.SwapResult{ID: fmt.Sprintf("older-%02d", i), Result: api.ResultCompleted})
	}
	b, _ := json.Marshal(api.Status{Swap: &rec, Step: api.StepUncordon, Steps: steps, History: older})
	q, _ := json.Marshal(api.ManualRequest{Out: "v1", In: "s1", At: requestAt, By: "alice"})
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: api.StatusConfigMap, ResourceVersion: "7"},
		Data: map[string]string{api.StatusKey: string(b), api.RequestKey: string(q)}}
	f := newFixture(t, heldLease("41", &rec), node("v1", "17", func(*corev1.Node) {}), cm)
	require.NoError(t, f.do(plan))

	got, err := f.client.CoreV1().ConfigMaps(testNS).Get(context.Background(), api.StatusConfigMap, metav1.GetOptions{})
	require.NoError(t, err)
	var st api.Status
	require.NoError(t, json.Unmarshal([]byte(got.Data[api.StatusKey]), &st))
	require.NotNil(t, st.Last)
	want := []api.StepSpan{steps[0], {Step: api.StepUncordon, Start: steps[1].Start, End: execNow}}
	assert.Equal(t, want, st.Last.Steps, "the last step closed at the end")
	assert.Equal(t, "alice", st.Last.By)
	assert.Equal(t, []string{api.OverridePause, api.OverrideHolds}, st.Last.Overrides, "the refusals it was started past")
	assert.Empty(t, st.Steps, "no swap under way")
	require.Len(t, st.History, api.HistoryLength)
	assert.Equal(t, *st.Last, st.History[0])
	assert.Equal(t, "older-18", st.History[api.HistoryLength-1].ID, "the oldest goes")

	// The end made again, its Lease's release having failed: the status
	// holds neither the swap's steps nor its request any more.
	f = newFixture(t, heldLease("42", &ended), node("v1", "18", func(*corev1.Node) {}), got)
	require.NoError(t, f.do(plan))
	again, err := f.client.CoreV1().ConfigMaps(testNS).Get(context.Background(), api.StatusConfigMap, metav1.GetOptions{})
	require.NoError(t, err)
	var st2 api.Status
	require.NoError(t, json.Unmarshal([]byte(again.Data[api.StatusKey]), &st2))
	require.Len(t, st2.History, api.HistoryLength, "kept once")
	assert.Equal(t, want, st2.History[0].Steps, "with the steps the first end took")
	assert.Equal(t, "alice", st2.History[0].By)
	assert.Equal(t, st2.History[0], *st2.Last)
}
