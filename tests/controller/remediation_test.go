package controller_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
)

func TestAVoterAnAutomaticSwapPutInTurningUnfitPastMaxRetriesIsNotSwappedAutomaticallyButByHand(t *testing.T) {
	e := newEnv(t, 3, 2, 0)
	e.cfg.DryRun = false
	e.cfg.Verdicts.Window = 4
	e.cfg.Cooldown = time.Second
	e.cfg.Remediation.MaxRetries = 0 // no retry at all
	e.d.With(func(d *fleetsim.Driver) {
		d.Hosts["v2"].FsyncMs = 35 // its disk turned slow
		d.Hosts["s2"].FsyncMs = 6  // a fit standby, but not the fittest
	})
	// The waits for a swap's end: a swap here takes some 25 s unhindered
	// (its verdict over 4 samples at 2 s, then its steps, each well inside
	// its bound); 3 minutes, as this suite's other swaps are given, is
	// the slack a busy 2-core machine needs, under the 4m45s the bounds of
	// testConfig add up to.
	e.start()
	first := e.waitEnd(3 * time.Minute)
	require.Equal(t, api.ResultCompleted, first.Result, first.Reason)
	require.Equal(t, "s1", first.In)
	st, _ := e.status()
	assert.Equal(t, []api.Remediation{{Swap: first.ID, Out: "v2", In: "s1", At: first.StartedAt}}, st.Remediations,
		"the remediation, in status.json, timed at its start")

	// The voter it put in turns unfit: its swap would be a retry.
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["s1"].FsyncMs = 35 })
	// s1 unfit over 4 samples at 2 s (8 s) and the 1 s cooldown past:
	// a minute is slack for samples a busy machine delays.
	require.Eventually(t, func() bool {
		st, _ = e.status()
		return strings.Contains(st.Reason, "has spent its max_retries (0)")
	}, time.Minute, 100*time.Millisecond, "the automatic swap stops; status: %s", st.Reason)
	assert.Contains(t, st.Reason, "the automatic decision to swap s1 for s2 does not start: s1 was put in by the automatic swap "+first.ID)
	assert.Equal(t, first.ID, st.Last.ID, "no swap started")
	// Set by the pass that publishes the stop: one a second.
	require.Eventually(t, func() bool {
		return e.metric("fleet_role_remediation_retries_spent") == "fleet_role_remediation_retries_spent 1"
	}, 5*time.Second, 50*time.Millisecond, "the gauge the alert reads: %q", e.metric("fleet_role_remediation_retries_spent"))
	out, _, code := e.cli("status")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "has spent its max_retries (0)", "fleet-role status says why")
	assert.Contains(t, out, "CONTROLLER   test-1 leads; dry run off: it carries out its own decisions\n", "and what governs the decisions")

	// A person may still swap it.
	_, stderr, code := e.cli("swap", "s1", "s2")
	require.Equal(t, 0, code, stderr)
	var last *api.SwapResult
	require.Eventually(t, func() bool {
		st, _ = e.status()
		last = st.Last
		return last != nil && last.ID != first.ID && st.Swap == nil
	}, 3*time.Minute, 100*time.Millisecond, "the manual swap ends; status: %s", st.Reason)
	assert.Equal(t, api.ResultCompleted, last.Result, last.Reason)
	assert.Equal(t, api.OriginManual, last.Origin)
	assertCompleted(t, e, "s1", "s2")
	assert.Equal(t, []api.Remediation{{Swap: first.ID, Out: "v2", In: "s1", At: first.StartedAt}}, st.Remediations,
		"a manual swap is no remediation")

	// Both are in the history, the newest first, with their steps.
	out, _, code = e.cli("history", "-o", "json")
	require.Equal(t, 0, code)
	var history []api.SwapResult
	require.NoError(t, json.Unmarshal([]byte(out), &history))
	require.Len(t, history, 2)
	assert.Equal(t, []string{last.ID, first.ID}, []string{history[0].ID, history[1].ID})
	for _, h := range history {
		require.NotEmpty(t, h.Steps, h.ID)
		assert.Equal(t, api.StepStart, h.Steps[0].Step, h.ID)
		assert.Equal(t, h.EndedAt, h.Steps[len(h.Steps)-1].End, "%s: its last step closed at its end", h.ID)
		for i := 1; i < len(h.Steps); i++ {
			assert.Equal(t, h.Steps[i-1].End, h.Steps[i].Start, "%s: each step ends as the next begins", h.ID)
		}
	}
	assert.NotEmpty(t, history[0].By, "who asked for the manual one")
	out, _, code = e.cli("history", "-o", "wide")
	require.Equal(t, 0, code)
	assert.Regexp(t, last.ID+` +s1 +s2 +manual by \S+ +completed`, out)
	assert.Contains(t, out, "promote ")
}
