package swapplan_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// maintainedFor runs the dead world, the dry run off, for d with v2
// under maintenance (as adapt says it), and checks every pass that v2 is
// not called dead and no swap starts.
func maintainedFor(t *testing.T, w *world, why string, d time.Duration) swapplan.Plan {
	t.Helper()
	w.cfg.DryRun = false
	w.node("v2").Maintenance = why
	var last swapplan.Plan
	for end := w.now.Add(d); w.now.Before(end); {
		last = w.pass()
		require.Empty(t, last.Dead, "a voter under maintenance is never dead: %s", last.Reason)
		require.Nil(t, last.Swap, "no swap starts for it: %s", last.Reason)
	}
	return last
}

func TestACordonedVoterSilentPastDeadAfterIsNotDeadNoSwapStartsAndTheReasonSaysWhy(t *testing.T) {
	w := deadWorld(t)
	w.node("v2").Unschedulable = true // cordoned by someone: no CordonedBy
	plan := maintainedFor(t, w, "cordoned, not by fleet-role", 30*time.Minute)
	assert.Contains(t, plan.Reason, "no swap: no voter is unfit; the voter v2 is under maintenance (cordoned, not by fleet-role), "+
		"so not called dead though no probe sample since ")
	assert.Contains(t, plan.Reason, "dead_after 5m0s")
	assert.Equal(t, []string{"v1", "v2", "v3"}, w.membersOf(), "its member stays")

	// Uncordoned, the same voter is dead and swapped.
	w.node("v2").Unschedulable, w.node("v2").Maintenance = false, ""
	w.checks = append(w.checks, quorumKept(t))
	res := w.run(1000)
	assert.Equal(t, "v2", res.Out)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
}

func TestAVoterHoldingKuredsLockOrAnnotatedForMaintenanceIsNotDeadHoweverLongItIsSilent(t *testing.T) {
	for _, why := range []string{"holding kured's reboot lock", "annotated " + api.AnnotationMaintenance + ": firmware"} {
		t.Run(why, func(t *testing.T) {
			w := deadWorld(t)
			plan := maintainedFor(t, w, why, time.Hour)
			assert.Contains(t, plan.Reason, "the voter v2 is under maintenance ("+why+")")
		})
	}
}

func TestAnUnfitVotersSwapIsHeldWhileAnotherVoterIsUnderMaintenanceAndOnePastTheHoldsWaitsSayingItIsNotDead(t *testing.T) {
	w := deadWorld(t)
	maintainedFor(t, w, "holding kured's reboot lock", 10*time.Minute)
	w.node("v1").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 9, Reason: "fsync p99 40 ms"}
	plan := maintainedFor(t, w, "holding kured's reboot lock", 10*time.Minute)
	assert.Contains(t, plan.Reason, "the automatic decision to swap v1 for s1 waits: held: the voter v2 is under maintenance (holding kured's reboot lock)",
		"a voter under maintenance is a disruption: one at a time")
	obstacles := swapplan.Obstacles(w.snapshot(), api.ManualRequest{V: 1, Out: "v1", In: "s1", At: w.now, Overrides: []string{api.OverrideHolds}})
	require.Len(t, obstacles, 1, "past the holds, the start gates: %v", obstacles)
	assert.Contains(t, obstacles[0], "waits: voter v2's probe has been silent since ")
	assert.Contains(t, obstacles[0], "it is under maintenance (holding kured's reboot lock), not dead")
}

func TestADeadVoterSwapNotYetAtItsCordonAbandonsWhenTheDeadVoterIsMarkedForMaintenance(t *testing.T) {
	w := deadWorld(t)
	w.cfg.DryRun = false
	w.node("s1").Pods = append(w.node("s1").Pods, swapplan.Pod{Namespace: "arc", Name: "runner-1", Runner: true})
	w.runUntil(100, atStep(api.StepRunnersIn))
	w.node("v2").Maintenance = "annotated " + api.AnnotationMaintenance + ": disk check"
	w.node("s1").Pods = w.node("s1").Pods[:len(w.node("s1").Pods)-1] // the runner finished
	res := w.run(200)
	assert.Equal(t, api.ResultAbandoned, res.Result)
	assert.Contains(t, res.Reason, "the voter v2 is no longer dead by every sign (it is under maintenance: annotated "+api.AnnotationMaintenance+": disk check)")
	assert.Equal(t, []string{"v1", "v2", "v3"}, w.membersOf(), "nothing was asked of its member")
}

func TestWithReplaceDeadVotersOffADeadVoterIsReportedButNoSwapStartsAndAManualSwapStillReplacesIt(t *testing.T) {
	w := deadWorld(t)
	w.cfg.DryRun = false
	w.cfg.ReplaceDead = false
	var plan swapplan.Plan
	for end := w.now.Add(time.Hour); w.now.Before(end); {
		plan = w.pass()
		require.Nil(t, plan.Swap, plan.Reason)
	}
	require.Len(t, plan.Dead, 1, "reported")
	assert.Equal(t, "v2", plan.Dead[0].Node)
	assert.Nil(t, plan.Decision)
	assert.Contains(t, plan.Reason, "no swap: the voter v2 is dead: no probe sample since ")
	assert.Contains(t, plan.Reason, "replace_dead_voters is off, so no swap starts for it: fleet-role swap v2 STANDBY replaces it by hand")

	w.checks = append(w.checks, quorumKept(t))
	w.request = &api.ManualRequest{Out: "v2", In: "s1", At: w.now, By: "alice"}
	res := w.run(1000)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, api.OriginManual, res.Origin)
	assert.Equal(t, []string{"s1", "v1", "v3"}, w.voterNodes())
}

// runnerOnOut: a swap of v1 for s1 at its runners' wait on v1, whose
// runner never finishes.
func runnerOnOut(t *testing.T, wait bool) *world {
	w := newWorld(t, 3, 1, 0)
	w.cfg.RunnersWait = wait
	w.node("v1").Pods = append(w.node("v1").Pods, swapplan.Pod{Namespace: "arc-runners", Name: "runner-1", Runner: true})
	w.requestSwap("v1", "s1")
	w.runUntil(200, atStep(api.StepRunnersOut))
	return w
}

func TestPastTheRunnersBoundWithRunnersBoundActionWaitTheSwapKeepsWaitingAndSaysItIsPastItsBound(t *testing.T) {
	w := runnerOnOut(t, true)
	var plan swapplan.Plan
	for end := w.now.Add(3 * w.cfg.Bounds.Runners); w.now.Before(end); {
		plan = w.pass()
		require.Equal(t, api.StepRunnersOut, plan.Step, plan.Reason)
		require.Equal(t, api.ActionNone, plan.Action.Type, "no drain kills the job: %s", plan.Reason)
	}
	assert.Contains(t, plan.Reason, "waiting past its bound 10m0s for 1 runner pod(s) on the outgoing voter v1 to finish "+
		"(runners_bound_action is wait; fleet-role swap --cancel rolls the swap back): arc-runners/runner-1")
	// The job ends: the swap goes on.
	w.node("v1").Pods[len(w.node("v1").Pods)-1].Finished = true
	res := w.run(200)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
}

func TestPastTheRunnersBoundWithRunnersBoundActionDrainTheSwapDrainsTheOutgoingVoter(t *testing.T) {
	w := runnerOnOut(t, false)
	start := w.now
	plan := w.runUntil(200, acting(api.ActionDrainOut, "v1"))
	assert.GreaterOrEqual(t, w.now.Sub(start), w.cfg.Bounds.Runners, "not before the bound: %s", plan.Reason)
}

func TestWithRunnersBoundActionWaitARunnerPodSeenOnceTheDrainBeganDoesNotTakeTheSwapBackToTheRunnersWait(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.cfg.RunnersWait = true
	w.requestSwap("v1", "s1")
	w.runUntil(200, acting(api.ActionDrainOut, "v1"))
	w.node("v1").Pods = append(w.node("v1").Pods, swapplan.Pod{Namespace: "arc-runners", Name: "runner-late", Runner: true})
	plan := w.pass()
	assert.NotEqual(t, api.StepRunnersOut, plan.Step, plan.Reason)
	assert.Equal(t, api.ResultCompleted, w.run(200).Result)
}

func TestTheRunnersWaitNamesEveryRunnerPodItWaitsOnAndNoOtherStepDoes(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.cfg.RunnersWait = true
	for _, name := range []string{"runner-1", "runner-2", "runner-3", "runner-4"} {
		w.node("v1").Pods = append(w.node("v1").Pods, swapplan.Pod{Namespace: "arc-runners", Name: name, Runner: true})
	}
	w.node("v1").Pods = append(w.node("v1").Pods, swapplan.Pod{Namespace: "arc-runners", Name: "runner-0", Runner: true, Finished: true})
	w.requestSwap("v1", "s1")
	plan := w.runUntil(200, atStep(api.StepRunnersOut))
	assert.Equal(t, []string{"arc-runners/runner-1", "arc-runners/runner-2", "arc-runners/runner-3", "arc-runners/runner-4"}, plan.WaitingOn,
		"all of them, not the finished one: %s", plan.Reason)
	for i := range w.node("v1").Pods {
		w.node("v1").Pods[i].Finished = true
	}
	plan = w.pass()
	assert.NotEqual(t, api.StepRunnersOut, plan.Step)
	assert.Empty(t, plan.WaitingOn, plan.Reason)
}

func TestTheCandidatesRunnersWaitNamesItsRunnerPods(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.node("s1").Pods = append(w.node("s1").Pods, swapplan.Pod{Namespace: "arc-runners", Name: "runner-s", Runner: true})
	w.node("v1").Pods = append(w.node("v1").Pods, swapplan.Pod{Namespace: "arc-runners", Name: "runner-v", Runner: true})
	w.requestSwap("v1", "s1")
	plan := w.runUntil(200, atStep(api.StepRunnersIn))
	assert.Equal(t, []string{"arc-runners/runner-s"}, plan.WaitingOn, plan.Reason)
}

func TestAStandbyUnderMaintenanceIsNoCandidateAutomaticOrManual(t *testing.T) {
	w := newWorld(t, 3, 2, 0)
	w.cfg.DryRun = true
	w.node("v1").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 9, Reason: "fsync p99 40 ms"}
	w.node("s2").Verdict = api.Verdict{State: api.VerdictFit, Score: 5}
	plan := w.pass()
	require.NotNil(t, plan.Decision, plan.Reason)
	require.Equal(t, "s1", plan.Decision.In, "the fitter")
	w.node("s1").Maintenance = "holding kured's reboot lock"
	plan = w.pass()
	require.NotNil(t, plan.Decision, plan.Reason)
	assert.Equal(t, "s2", plan.Decision.In, plan.Reason)
	assert.ErrorContains(t, swapplan.CheckRequest(w.snapshot(), "v1", "s1", nil), "s1 is under maintenance (holding kured's reboot lock)")
}
