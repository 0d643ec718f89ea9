package swapplan_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// remediationWorld is a fleet of three voters and four standbys whose
// automatic swaps are spaced by a cooldown of ten minutes, with the
// remediation limits given.
func remediationWorld(t *testing.T, limits swapplan.Remediation) *world {
	w := newWorld(t, 3, 4, 0)
	w.cfg.Cooldown = 10 * time.Minute
	w.cfg.Remediation = limits
	return w
}

// unfitSwappedOut turns the voter unfit and runs until the automatic swap
// of it ends, which it must: it returns the swap's result.
func (w *world) unfitSwappedOut(voter string) *api.SwapResult {
	w.t.Helper()
	w.node(voter).Verdict = api.Verdict{State: api.VerdictUnfit, Score: 9, Reason: "fsync p99 40 ms"}
	res := w.run(400)
	require.Equal(w.t, voter, res.Out)
	require.Equal(w.t, api.OriginAutomatic, res.Origin)
	require.Equal(w.t, api.ResultCompleted, res.Result, res.Reason)
	return res
}

// idleFor passes until the hidden clock has gone on by d, no swap
// starting meanwhile, and returns the last plan.
func (w *world) idleFor(d time.Duration) swapplan.Plan {
	w.t.Helper()
	var plan swapplan.Plan
	for end := w.now.Add(d); w.now.Before(end); {
		plan = w.pass()
		require.NotEqual(w.t, api.ActionStart, plan.Action.Type, "no swap starts: %s", plan.Reason)
	}
	return plan
}

func TestAnAutomaticSwapOfAVoterAnAutomaticSwapPutInWithinTheMinimumHealthyPeriodIsARetryAndPastMaxRetriesNoneStarts(t *testing.T) {
	w := remediationWorld(t, swapplan.Remediation{MaxRetries: 1, MinHealthyPeriod: 2 * time.Hour})
	first := w.unfitSwappedOut("v1")
	require.Len(t, w.status.Remediations, 1)
	assert.Equal(t, api.Remediation{Swap: first.ID, Out: "v1", In: first.In, At: first.StartedAt, Retry: 0}, w.status.Remediations[0],
		"a first remediation, timed at its start")

	// Its voter turns unfit within the period: the next swap is retry 1.
	w.idleFor(10 * time.Minute)
	second := w.unfitSwappedOut(first.In)
	require.Len(t, w.status.Remediations, 1, "the voter swapped out is no one's to count any more")
	assert.Equal(t, api.Remediation{Swap: second.ID, Out: first.In, In: second.In, At: second.StartedAt, Retry: 1}, w.status.Remediations[0])

	// And that one's: a retry past max_retries does not start.
	w.idleFor(10 * time.Minute)
	w.node(second.In).Verdict = api.Verdict{State: api.VerdictUnfit, Score: 9, Reason: "fsync p99 40 ms"}
	plan := w.idleFor(time.Minute)
	assert.True(t, plan.RetriesSpent)
	require.NotNil(t, plan.Decision, "the decision is still reported")
	assert.Equal(t, second.In, plan.Decision.Out)
	assert.Contains(t, plan.Reason, "the automatic decision to swap "+second.In+" for ")
	assert.Contains(t, plan.Reason, "does not start: "+second.In+" was put in by the automatic swap "+second.ID)
	assert.Contains(t, plan.Reason, "has spent its max_retries (1); automatic swaps start again at "+
		second.StartedAt.Add(2*time.Hour).UTC().Format(time.RFC3339))

	// Until the period has run out from that remediation's start; then
	// the swap is a first remediation again.
	until := second.StartedAt.Add(2 * time.Hour)
	w.idleFor(until.Sub(w.now) - w.tick)
	assert.True(t, w.plans[len(w.plans)-1].RetriesSpent, "still spent a pass before the period runs out")
	res := w.run(400)
	assert.Equal(t, second.In, res.Out)
	assert.False(t, res.StartedAt.Before(until))
	require.Len(t, w.status.Remediations, 1)
	assert.Equal(t, 0, w.status.Remediations[0].Retry)
	assert.False(t, w.plans[len(w.plans)-1].RetriesSpent)
}

func TestARetryWaitsForTheRetryPeriodFromTheRemediationsStartAndMaxRetriesBelowZeroNeverStops(t *testing.T) {
	w := remediationWorld(t, swapplan.Remediation{MaxRetries: -1, RetryPeriod: time.Hour, MinHealthyPeriod: 24 * time.Hour})
	prev := w.unfitSwappedOut("v1")
	for retry := 1; retry <= 3; retry++ {
		w.node(prev.In).Verdict = api.Verdict{State: api.VerdictUnfit, Score: 9, Reason: "fsync p99 40 ms"}
		until := prev.StartedAt.Add(time.Hour)
		plan := w.idleFor(until.Sub(w.now) - w.tick)
		assert.Contains(t, plan.Reason, "waits for retry_period until "+until.UTC().Format(time.RFC3339)+
			": it would retry the remediation of swap "+prev.ID)
		assert.False(t, plan.RetriesSpent)
		res := w.run(400)
		assert.Equal(t, prev.In, res.Out)
		assert.False(t, res.StartedAt.Before(until), "not before the retry period has passed")
		require.Len(t, w.status.Remediations, 1)
		assert.Equal(t, retry, w.status.Remediations[0].Retry)
		// The standby swapped out is a standby again, fit, for the next.
		w.node(prev.Out).Verdict = api.Verdict{State: api.VerdictFit, Score: 1}
		prev = res
	}
}

func TestAManualSwapIsNeverLimitedAndNoRemediation(t *testing.T) {
	w := remediationWorld(t, swapplan.Remediation{MaxRetries: 0, MinHealthyPeriod: 24 * time.Hour})
	first := w.unfitSwappedOut("v1")
	w.node(first.In).Verdict = api.Verdict{State: api.VerdictUnfit, Score: 9, Reason: "fsync p99 40 ms"}
	plan := w.idleFor(15 * time.Minute)
	require.True(t, plan.RetriesSpent, "max_retries 0: no retry at all")

	w.requestSwap(first.In, "s4")
	res := w.run(400)
	assert.Equal(t, api.OriginManual, res.Origin)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, []api.Remediation{{Swap: first.ID, Out: "v1", In: first.In, At: first.StartedAt}}, w.status.Remediations,
		"a manual swap is no remediation, and leaves the record as it was")
	assert.False(t, w.plans[len(w.plans)-1].RetriesSpent)
}

func TestAnAutomaticSwapOfAnotherVoterIsARemediationOfItsOwnAndKeepsTheFirstOnesRecord(t *testing.T) {
	w := remediationWorld(t, swapplan.Remediation{MaxRetries: 0, MinHealthyPeriod: 24 * time.Hour})
	first := w.unfitSwappedOut("v1")
	w.idleFor(10 * time.Minute)
	second := w.unfitSwappedOut("v2")
	assert.Equal(t, []api.Remediation{
		{Swap: first.ID, Out: "v1", In: first.In, At: first.StartedAt},
		{Swap: second.ID, Out: "v2", In: second.In, At: second.StartedAt},
	}, w.status.Remediations, "one for each voter put in")
	w.node(first.In).Verdict = api.Verdict{State: api.VerdictUnfit, Score: 9, Reason: "fsync p99 40 ms"}
	assert.True(t, w.idleFor(15*time.Minute).RetriesSpent, "the first one's voter is still counted")
}

func TestAnEndRepeatedAfterItsRecordWasWrittenLeavesTheRecordAsItIs(t *testing.T) {
	w := remediationWorld(t, swapplan.Remediation{MaxRetries: 1, MinHealthyPeriod: 24 * time.Hour})
	first := w.unfitSwappedOut("v1")
	w.idleFor(10 * time.Minute)
	second := w.unfitSwappedOut(first.In)
	end := w.plans[len(w.plans)-1]
	require.Equal(t, api.ActionEnd, end.Action.Type)
	require.Equal(t, 1, w.status.Remediations[0].Retry)

	// The status written, the Lease not released (the executor's release
	// failed): the next pass ends the swap again.
	rec := *end.Swap
	w.lease = swapplan.Lease{Holder: api.ControllerHolder, RenewTime: w.now, Duration: time.Minute, Swap: &rec}
	again := w.pass()
	require.Equal(t, api.ActionEnd, again.Action.Type, again.Reason)
	assert.Nil(t, again.Action.Remediations, "nothing to change")
	assert.Equal(t, []api.Remediation{{Swap: second.ID, Out: first.In, In: second.In, At: second.StartedAt, Retry: 1}}, w.status.Remediations)
}
