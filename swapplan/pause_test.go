package swapplan_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
)

func TestWhilePausedNoSwapStartsButARequestThatOverridesThePauseAndASwapUnderWayGoesOnToItsEnd(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.pause = &api.Pause{By: "alice", Reason: "kernel upgrades", At: w.now}
	w.node("v2").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 5, Reason: "fsync p99 40 ms"}
	for range 5 {
		plan := w.pass()
		assert.Equal(t, api.ActionNone, plan.Action.Type)
		require.NotNil(t, plan.Decision, "the decision is still made and shown")
		assert.Contains(t, plan.Reason, "the automatic decision to swap v2 for s1 waits: paused by alice at")
		assert.Contains(t, plan.Reason, "kernel upgrades")
	}
	w.requestSwap("v3", "s1")
	for range 5 {
		plan := w.pass()
		assert.Equal(t, api.ActionNone, plan.Action.Type)
		assert.Contains(t, plan.Reason, "the manual request to swap v3 for s1 waits: paused by alice")
	}
	w.request.Overrides = []string{api.OverrideHolds, api.OverrideDomains}
	plan := w.pass()
	assert.Equal(t, api.ActionNone, plan.Action.Type, "the other overrides do not pass the pause")
	assert.Contains(t, plan.Reason, "waits: paused by alice")
	assert.Contains(t, plan.Reason, "fleet-role resume, or swap --override pause")
	w.request.Overrides = []string{api.OverridePause}
	plan = w.pass()
	require.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
	assert.Equal(t, "v3", plan.Swap.Out)
	assert.Equal(t, api.ResultCompleted, w.run(200).Result, "a swap under way goes on while paused")
}

func TestAPauseTakenMidSwapLetsTheSwapEndAndHoldsTheNextAutomaticOne(t *testing.T) {
	w := newWorld(t, 3, 2, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(50, acting(api.ActionPromote, "s1"))
	w.pause = &api.Pause{By: "bob", Reason: "change freeze", At: w.now}
	assert.Equal(t, api.ResultCompleted, w.run(200).Result)
	w.status.CooldownUntil = nil
	w.node("v2").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 5, Reason: "fsync p99 40 ms"}
	plan := w.pass()
	assert.Equal(t, api.ActionNone, plan.Action.Type)
	assert.Contains(t, plan.Reason, "the automatic decision to swap v2 for s2 waits: paused by bob")
	w.pause = nil
	plan = w.pass()
	assert.NotContains(t, plan.Reason, "paused")
}

func TestAHoldKeepsAnySwapFromStartingButARequestThatOverridesTheHoldsAndHoldsASwapUnderWayAtItsGatesUntilItEnds(t *testing.T) {
	w := newWorld(t, 3, 2, 0)
	w.holds = []string{"kured's reboot lock is held by v3", "the Plan system-upgrade/server-plan is applying to v3"}
	w.node("v2").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 5, Reason: "fsync p99 40 ms"}
	plan := w.pass()
	assert.Equal(t, api.ActionNone, plan.Action.Type)
	require.NotNil(t, plan.Decision, "the decision is still made and shown")
	assert.Contains(t, plan.Reason, "the automatic decision to swap v2 for s1 waits: held: kured's reboot lock is held by v3; the Plan system-upgrade/server-plan is applying to v3")
	w.requestSwap("v1", "s2")
	plan = w.pass()
	assert.Equal(t, api.ActionNone, plan.Action.Type)
	assert.Contains(t, plan.Reason, "the manual request to swap v1 for s2 waits: held: kured's reboot lock")
	assert.Contains(t, plan.Reason, "swap --override holds")
	w.request.Overrides = []string{api.OverridePause, api.OverrideDomains}
	plan = w.pass()
	assert.Equal(t, api.ActionNone, plan.Action.Type, "the other overrides do not pass the holds")
	assert.Contains(t, plan.Reason, "the manual request to swap v1 for s2 waits: held: kured's reboot lock")
	w.request.Overrides = []string{api.OverrideHolds}
	plan = w.pass()
	require.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
	w.runUntil(50, acting(api.ActionPromote, "s2"))
	w.holds = []string{"the alert EtcdHighFsyncDurations is firing"}
	plan = w.runUntil(50, atStep(api.StepGates))
	assert.Contains(t, plan.Reason, "held: the alert EtcdHighFsyncDurations is firing", "a swap under way does not stop its outgoing voter while held")
	w.holds = nil
	assert.Equal(t, api.ResultCompleted, w.run(200).Result, "and ends once the hold does")
}

func TestADryRunSaysItsDecisionWouldWaitForAPauseAndTheHoldsInForce(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.cfg.DryRun = true
	w.node("v2").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 5, Reason: "fsync p99 40 ms"}
	plan := w.pass()
	assert.Contains(t, plan.Reason, "dry run: would swap v2 for s1 (")
	assert.NotContains(t, plan.Reason, "would wait", "nothing holds")

	w.holds = []string{"alerts are active at http://prometheus:9090: etcdNoLeader"}
	plan = w.pass()
	assert.Equal(t, api.ActionNone, plan.Action.Type)
	assert.Contains(t, plan.Reason, "dry run: would swap v2 for s1 (")
	assert.True(t, strings.HasSuffix(plan.Reason, "; would wait: held: alerts are active at http://prometheus:9090: etcdNoLeader"), plan.Reason)

	w.pause = &api.Pause{By: "carol", Reason: "freeze", At: w.now}
	plan = w.pass()
	assert.Contains(t, plan.Reason, "; would wait: paused by carol at ")
	assert.True(t, strings.HasSuffix(plan.Reason, ": freeze; held: alerts are active at http://prometheus:9090: etcdNoLeader"), plan.Reason)
}
