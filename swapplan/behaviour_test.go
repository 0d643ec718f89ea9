package swapplan_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
	"github.com/fleet-role/fleet-role/tests/fleetmodel"
)

// The behaviours the shell system's own tests pinned down, one test each,
// named as the sentence.

func TestTheGatesAreHeldWithFourVotersAndTheOutgoingVoterIsNotTouchedWhileOneFails(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(50, acting(api.ActionPromote, "s1"))
	w.Hosts["v2"].UnhealthyUntil = w.now.Add(10 * time.Minute)
	plan := w.runUntil(50, atStep(api.StepGates))
	assert.Equal(t, api.ActionNone, plan.Action.Type)
	assert.Equal(t, []string{"s1", "v1", "v2", "v3"}, plan.Voters)
	assert.Contains(t, plan.Reason, "v2's probe says unhealthy")
	for range 20 {
		plan = w.pass()
		assert.NotEqual(t, "v1", plan.Action.Node, plan.Reason)
		assert.Equal(t, api.StepGates, plan.Step)
	}
	plan = w.runUntil(50, func(p swapplan.Plan) bool { return p.Action.Type != api.ActionNone })
	assert.Equal(t, api.ActionCordonOut, plan.Action.Type)
	assert.Equal(t, "v1", plan.Action.Node)
}

// Once the outgoing voter is stopped, a remaining voter whose disk is
// only slow votes: the removal, which gives the cluster back its failure
// to spare, does not wait for it.
func TestTheRemovalIsNotHeldByARemainingVoterWhoseDiskIsOnlySlow(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionStepDown, "v1"))
	w.Hosts["v3"].UnhealthyUntil = w.now.Add(time.Hour)
	plan := w.runUntil(5, func(p swapplan.Plan) bool { return p.Action.Type != api.ActionNone })
	require.Equal(t, api.ActionRemoveMember, plan.Action.Type, plan.Reason)
	assert.Equal(t, "v1", plan.Action.Node)
	assert.False(t, w.node("v3").Probe.Healthy, "v3 still slow")
	assert.Equal(t, api.ResultCompleted, w.run(100).Result)
}

func TestTheRemovalHeldByAVoterReadyButSilentNamesItAndSaysSoPastItsBound(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	// v1 answers its step-down only once v3 has been silent for long: a
	// voter silent for less than the freshness of its last sample is
	// counted voting, as no planner can tell it from one that answers.
	w.Hosts["v1"].IgnoreStepDown = true
	w.runUntil(100, acting(api.ActionStepDown, "v1"))
	v3 := w.Hosts["v3"]
	v3.UnhealthyUntil = w.now.Add(time.Hour)
	w.pass()
	v3.SilentUntil = w.now.Add(time.Hour) // its last sample unhealthy, then none
	for range 10 {
		require.Equal(t, api.StepStepDown, w.pass().Step)
	}
	w.Hosts["v1"].IgnoreStepDown = false
	var reasons []string
	for w.now.Before(v3.SilentUntil.Add(-50 * time.Minute)) {
		plan := w.pass()
		require.NotEqual(t, api.ActionRemoveMember, plan.Action.Type, "never removed while a remaining voter is silent")
		if plan.Step == api.StepStepDown && len(reasons) == 0 {
			continue
		}
		require.Equal(t, api.StepRemoveMember, plan.Step, plan.Reason)
		reasons = append(reasons, plan.Reason)
	}
	assert.True(t, w.node("v3").Ready, "its kubelet beats")
	assert.Contains(t, reasons[len(reasons)/2], "v3 is Ready but its agent has been silent since", "named, and why")
	assert.Contains(t, reasons[len(reasons)/2], "it may not reach the API server")
	assert.NotContains(t, reasons[0], "past its bound")
	last := reasons[len(reasons)-1]
	assert.True(t, strings.HasPrefix(last, "held past its bound 5m0s (the outgoing voter is stopped: no fault tolerance is left until its member goes): "+
		"removal held: 2 remaining voter(s) vote, not a majority (3) of the 4 members with v1's, which is down: v3 is Ready but its agent has been silent"), last)

	v3.SilentUntil, v3.UnhealthyUntil = w.now, w.now
	w.runUntil(20, acting(api.ActionRemoveMember, "v1"))
	assert.Equal(t, api.ResultCompleted, w.run(100).Result)
}

func TestTheSwapWaitsWhileTheSnapshotIsNotReadyEvenWhenTheAgentSaysDone(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["v2"].SnapshotNotReady = true
	w.requestSwap("v1", "s1")
	w.runUntil(10, acting(api.ActionSnapshot, "v2"))
	plan := w.pass()
	require.Equal(t, api.StateDone, w.node("v2").Report.State)
	assert.Equal(t, api.ActionNone, plan.Action.Type)
	assert.Equal(t, api.StepSnapshot, plan.Step)
	assert.Contains(t, plan.Reason, "not ready")
	res := w.run(100)
	assert.Equal(t, api.ResultAbandoned, res.Result)
	assert.NotContains(t, w.actions(), "cordon-in s1")
}

func TestEveryPassRenewsTheLeaseTheSwapHoldsAndKeepsItsAnnotations(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	start := w.runUntil(5, acting(api.ActionStart, ""))
	rec := *start.Swap
	for {
		before := w.now
		plan := w.pass()
		if plan.Action.Type == api.ActionEnd {
			break
		}
		require.True(t, plan.RenewLease, "pass at %s: %s", plan.Step, plan.Reason)
		assert.Equal(t, rec, *plan.Swap, "the record is kept as it was")
		assert.Equal(t, rec, *w.lease.Swap)
		assert.True(t, w.lease.RenewTime.After(before), "renewed")
	}
}

func TestPastTheRunnerWaitTheSwapIsAbandonedWithTheCandidateUncordonedTheLeaseReleasedAndNoCooldown(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	s1 := w.node("s1")
	s1.Pods = append(s1.Pods, swapplan.Pod{Namespace: "arc-runners", Name: "runner-abc", Runner: true})
	w.requestSwap("v1", "s1")
	plan := w.runUntil(20, atStep(api.StepRunnersIn))
	assert.Contains(t, plan.Reason, "arc-runners/runner-abc")
	res := w.run(200)
	assert.Equal(t, api.ResultAbandoned, res.Result)
	assert.Contains(t, res.Reason, "runner wait")
	acts := w.actions()
	assert.Equal(t, []string{"abandon ", "uncordon s1", "end "}, acts[len(acts)-3:])
	assert.Equal(t, []string{"v2"}, w.plans[len(w.plans)-1].Action.Clear, "the snapshot's request is cleared")
	assert.False(t, w.node("s1").Unschedulable)
	assert.Empty(t, w.node("s1").CordonedBy)
	assert.Equal(t, swapplan.Lease{}, w.lease)
	assert.Nil(t, w.status.CooldownUntil)
	assert.Equal(t, 3, len(w.Members))
}

func TestAFinishedRollbackWaitsUntilEveryVoterListsTheTargetMembersAndNoMore(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["s1"].NeverJoin = true
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionStepDown, "s1"))
	w.K3sPaused = true
	w.runUntil(30, acting(api.ActionRemoveMember, "s1"))
	for range 10 {
		plan := w.pass()
		assert.Equal(t, api.ActionNone, plan.Action.Type)
		assert.Equal(t, api.StepRemoveCandidate, plan.Step)
		assert.Contains(t, plan.Reason, "waiting for k3s to remove the member s1-")
		assert.Contains(t, plan.Reason, "(v2 lists it)", "the first voter that lists it")
	}
	// v2's etcd no longer lists it, v3's still does: the wait goes on,
	// naming v3.
	w.hooks = append(w.hooks, func(w *world) {
		p := *w.node("v2").Probe
		p.Members = slices.DeleteFunc(slices.Clone(p.Members), func(m api.Member) bool { return strings.HasPrefix(m.Name, "s1-") })
		w.node("v2").Probe = &p
	})
	for range 3 {
		plan := w.pass()
		assert.Equal(t, api.ActionNone, plan.Action.Type)
		assert.Contains(t, plan.Reason, "(v3 lists it)")
	}
	w.hooks = nil
	w.K3sPaused = false
	plan := w.runUntil(5, acting(api.ActionMemberGone, "s1"))
	assert.Contains(t, plan.Reason, "every voter lists the original members")
	assert.Equal(t, api.ResultRolledBack, w.run(50).Result)
}

func TestALearnerEtcdListsWithoutANameHoldsTheStartUntilItIsGone(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Members = append(w.Members, fleetmodel.Member{Learner: true}) // added, never started
	w.requestSwap("v1", "s1")
	for range 5 {
		plan := w.pass()
		assert.Nil(t, plan.Swap, "no swap starts")
		assert.Contains(t, plan.Reason, "lists a learner: "+swapplan.UnstartedLearner)
	}
	w.Members = slices.DeleteFunc(w.Members, func(m fleetmodel.Member) bool { return m.Name == "" })
	assert.Equal(t, api.ResultCompleted, w.run(200).Result)
}

func TestACandidateThatIsNotAVoterByTheDeadlineIsRolledBackAskingK3sToRemoveItsLearnerWhenItJoined(t *testing.T) {
	t.Run("joined as a learner", func(t *testing.T) {
		w := newWorld(t, 3, 1, 0)
		w.Hosts["s1"].NeverJoin = true
		w.requestSwap("v1", "s1")
		plan := w.runUntil(100, acting(api.ActionRollback, ""))
		assert.Contains(t, plan.Reason, "is not a voter within 5m0s")
		assert.Equal(t, api.PhaseRollback, plan.Swap.Phase)
		assert.Equal(t, api.ResultRolledBack, w.run(100).Result)
		assert.Contains(t, w.actions(), "remove-member s1")
	})
	t.Run("never joined", func(t *testing.T) {
		w := newWorld(t, 3, 1, 0)
		w.Hosts["s1"].IgnorePromote = true
		w.requestSwap("v1", "s1")
		plan := w.runUntil(100, acting(api.ActionRollback, ""))
		assert.Contains(t, plan.Reason, "did not answer the promotion")
		assert.Equal(t, api.ResultRolledBack, w.run(100).Result)
		assert.NotContains(t, w.actions(), "remove-member s1")
	})
}

func TestALeaseThatRegradeTookMidSwapIsNeverActedUnderAndNeverRenewed(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	start := w.runUntil(5, acting(api.ActionStart, ""))
	w.runUntil(10, acting(api.ActionCordonIn, "s1"))
	w.lease = swapplan.Lease{Holder: "regrade", RenewTime: w.now, Duration: time.Hour}
	w.regradeUntil = w.now.Add(5 * time.Minute)
	for w.now.Before(w.regradeUntil.Add(-w.tick)) {
		plan := w.pass()
		assert.Equal(t, api.ActionNone, plan.Action.Type)
		assert.False(t, plan.RenewLease)
		assert.Contains(t, plan.Reason, `held by "regrade"`)
		assert.Equal(t, "regrade", w.lease.Holder)
	}
	plan := w.runUntil(5, acting(api.ActionStart, ""))
	assert.Equal(t, start.Swap.ID, plan.Swap.ID, "the same swap is resumed")
	assert.Contains(t, plan.Reason, "resuming")
	assert.Equal(t, api.ResultCompleted, w.run(200).Result)
}

func TestAManualRequestIsCarriedOutInsideTheCooldownAndWhateverTheVerdictsSay(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	until := w.now.Add(time.Hour)
	w.status.CooldownUntil = &until
	w.node("v1").Verdict = api.Verdict{State: api.VerdictFit}
	w.node("s1").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 99}
	w.requestSwap("v1", "s1")
	plan := w.pass()
	assert.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
	assert.Contains(t, plan.Reason, "carrying out the manual request of test to swap v1 for s1")
	assert.Equal(t, api.OriginManual, plan.Swap.Origin)
	assert.Equal(t, w.request.At, *plan.Swap.RequestAt)
}

func TestDryRunCarriesOutAManualRequestAndOnlyReportsAnAutomaticDecision(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.cfg.DryRun = true
	w.node("v2").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 5, Reason: "fsync p99 40 ms"}
	for range 5 {
		plan := w.pass()
		assert.Equal(t, api.ActionNone, plan.Action.Type)
		require.NotNil(t, plan.Decision)
		assert.Equal(t, api.Decision{Out: "v2", In: "s1", Reason: plan.Decision.Reason}, *plan.Decision)
		assert.Contains(t, plan.Reason, "dry run: would swap v2 for s1")
	}
	w.requestSwap("v3", "s1")
	plan := w.pass()
	assert.Equal(t, api.ActionStart, plan.Action.Type)
	assert.Equal(t, "v3", plan.Swap.Out)
	assert.Equal(t, api.ResultCompleted, w.run(200).Result)
}

func TestTheRemovedMemberIsNoVoterSoTheMembershipPublishedHasThreeVoters(t *testing.T) {
	w := newWorld(t, 4, 0, 0)
	v4 := w.node("v4")
	v4.RemovedMember = v4.MemberName // k3s removed it; label and condition are stale
	plan := swapplan.Next(w.snapshot())
	assert.Equal(t, []string{"v1", "v2", "v3"}, plan.Voters)
	v4.MemberName = ""
	assert.Equal(t, []string{"v1", "v2", "v3"}, swapplan.Next(w.snapshot()).Voters, "node-name gone, removed-node-name set")
}

func TestThePromotionWaitsForAVoterThatIsReadyOnAHeartbeatAfterTheServerStarted(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(50, acting(api.ActionPromote, "s1"))
	w.Hosts["s1"].HeartbeatStuck = true
	for range 10 {
		plan := w.pass()
		assert.Equal(t, api.StepJoin, plan.Step)
		assert.Equal(t, api.ActionNone, plan.Action.Type)
	}
	assert.Equal(t, "True", w.node("s1").EtcdIsVoter.Status, "s1 votes by its condition already")
	assert.Contains(t, w.plans[len(w.plans)-1].Reason, "not Ready on a kubelet heartbeat after its server started")
	w.Hosts["s1"].HeartbeatStuck = false
	w.runUntil(3, acting(api.ActionCordonOut, "v1"))
}

func TestTheSwapEndsCompletedWithTheAnnotationsClearedAndTheLeaseReleased(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	res := w.run(200)
	assert.Equal(t, api.ResultCompleted, res.Result)
	end := w.plans[len(w.plans)-1]
	assert.Equal(t, api.ActionEnd, end.Action.Type)
	assert.Equal(t, "swap "+res.ID+" ends completed", end.Reason, "a swap that completed has no reason to give")
	assert.ElementsMatch(t, []string{"s1", "v1", "v2"}, end.Action.Clear)
	for _, n := range w.nodes {
		assert.Nil(t, n.Request, n.Name)
		assert.Empty(t, n.MemberGone, n.Name)
		assert.Empty(t, n.CordonedBy, n.Name)
	}
	assert.Equal(t, swapplan.Lease{}, w.lease)
	require.NotNil(t, w.status.CooldownUntil)
}

func TestAnAgentThatRefusesThePromotionAbandonsTheSwapSinceNothingChangedOnTheHost(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["s1"].RefusePromote = true
	w.requestSwap("v1", "s1")
	res := w.run(100)
	assert.Equal(t, api.ResultAbandoned, res.Result)
	assert.Contains(t, res.Reason, "the candidate s1 refused the promotion (not staged): nothing changed on the host", "the agent's message is said")
	assert.Equal(t, "swap "+res.ID+" ends abandoned: "+res.Reason, w.plans[len(w.plans)-1].Reason, "the end says the reason")
	for _, a := range w.actions() {
		assert.NotContains(t, []string{"rollback ", "step-down s1", "remove-member s1", "clean-up s1"}, a)
	}
	s1 := w.node("s1")
	assert.Equal(t, api.RoleStandby, s1.Role)
	assert.False(t, s1.Unschedulable)
}

func TestTheRemovalWaitsForTheStepDownWhileTheOutgoingVoterIsReadyAndHasNotReported(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["v1"].IgnoreStepDown = true
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionStepDown, "v1"))
	for w.now.Before(w.plans[len(w.plans)-1].Since.Add(w.cfg.Bounds.StepDown - w.tick)) {
		plan := w.pass()
		assert.Equal(t, api.ActionNone, plan.Action.Type)
		assert.Contains(t, plan.Reason, "the removal waits for the step-down while v1 is Ready and has not reported")
	}
	w.runUntil(3, acting(api.ActionRemoveMember, "v1"))
}

func TestTheRemovalGoesOnAtOnceOnceTheOutgoingVoterThatHasNotReportedIsNotReady(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["v1"].IgnoreStepDown = true
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionStepDown, "v1"))
	plan := w.pass()
	assert.Contains(t, plan.Reason, "the removal waits for the step-down while v1 is Ready and has not reported")
	w.Hosts["v1"].KubeletDead = true
	plan = w.pass()
	assert.Equal(t, api.ActionRemoveMember, plan.Action.Type, plan.Reason)
	assert.Equal(t, "v1", plan.Action.Node)
	assert.Less(t, w.now.Sub(*plan.Since), w.cfg.Bounds.StepDown, "well within the step-down's bound")
}

func TestASwapThatEndedWithTheAnnotationsClearedBeforeTheLeaseWasReleasedIsEndedNotStartedAgain(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(200, func(p swapplan.Plan) bool { return p.Step == api.StepUncordon && p.Action.Node == "v1" })
	// The end, interrupted: the record marked, the annotations cleared,
	// nothing recorded, the Lease not released.
	end := swapplan.Next(w.snapshot())
	require.Equal(t, api.ActionEnd, end.Action.Type)
	w.lease.Swap = end.Swap
	for _, name := range end.Action.Clear {
		n := w.node(name)
		n.Request, n.MemberGone, n.CordonedBy = nil, "", ""
	}
	for range 3 {
		w.now = w.now.Add(w.tick)
		w.react()
		plan := swapplan.Next(w.snapshot())
		assert.Equal(t, api.ActionEnd, plan.Action.Type)
		assert.Equal(t, api.ResultCompleted, plan.Action.Result)
		assert.Empty(t, plan.Action.Clear)
		assert.Equal(t, end.Swap.EndedAt, plan.Swap.EndedAt, "ended once, at the same time")
		assert.Equal(t, *end.Action.CooldownUntil, *plan.Action.CooldownUntil)
	}
	// Without the mark too: the roles flipped and the cordons gone say the
	// swap is at its end, and the manual request is not carried out again.
	rec := *end.Swap
	rec.Phase, rec.Result, rec.EndedAt = "", "", nil
	w.lease.Swap = &rec
	plan := swapplan.Next(w.snapshot())
	assert.Equal(t, api.ActionEnd, plan.Action.Type)
	w.apply(plan)
	assert.NotNil(t, w.request, "the request is still there")
	assert.Equal(t, api.ActionNone, w.pass().Action.Type)
}

func TestAnOutgoingVoterThatFinishedButIsNotReadyWithinTheUncordonBoundEndsTheSwapPendingAndIsLeftCordoned(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(200, acting(api.ActionMemberGone, "v1"))
	w.Hosts["v1"].KubeletDead = true
	res := w.run(200)
	assert.Equal(t, api.ResultPending, res.Result)
	assert.Equal(t, []string{"v1"}, res.Pending)
	assert.Contains(t, res.Reason, "v1 finished its demotion but was not Ready on a heartbeat after its agent started within 5m0s: it is left cordoned")
	end := w.plans[len(w.plans)-1]
	assert.Contains(t, end.Action.Clear, "v1", "its demotion finished: nothing is kept for it")
	assert.Empty(t, end.Pending, "no demotion is unfinished")
	assert.True(t, slices.ContainsFunc(w.plans, func(p swapplan.Plan) bool {
		return strings.Contains(p.Reason, "waiting for v1 to be Ready on a heartbeat after its agent started")
	}), "the wait said what it waited for")
	assert.True(t, w.node("v1").Unschedulable, "left cordoned")
	assert.NotContains(t, w.actions(), "uncordon v1")
}

func TestADemotionTheAgentFinishedIsCleanedUpRoleLabelsEtcdAnnotationsLevelLabelAndTaint(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	v1 := w.node("v1")
	v1.Level, v1.EtcdTaint = "etcd-only", true
	w.requestSwap("v1", "s1")
	plan := w.runUntil(200, acting(api.ActionCleanUp, "v1"))
	assert.Contains(t, plan.Reason, "v1 finished its demotion")
	assert.Equal(t, api.RoleStandby, plan.Action.Role)
	require.Equal(t, api.ResultCompleted, w.run(20).Result)
	v1 = w.node("v1")
	assert.Equal(t, api.RoleStandby, v1.Role)
	assert.Empty(t, v1.ServerLabels)
	assert.Empty(t, v1.MemberName)
	assert.Empty(t, v1.RemovedMember)
	assert.False(t, v1.RemoveRequested)
	assert.Empty(t, v1.Level)
	assert.False(t, v1.EtcdTaint)
	assert.Equal(t, api.RoleVoter, w.node("s1").Role)
}

func TestAnActionThatFailsIsRepeatedAndLeavesTheSwapWhereItWas(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionCordonOut, "v1"))
	failed := w.plans[len(w.plans)-1]
	// The same pass again, the action having failed: nothing of it applied.
	w.failRate = 1
	var since time.Time
	for range 3 {
		plan := w.pass()
		assert.Equal(t, api.ActionDrainOut, plan.Action.Type, "the cordon above was applied")
		assert.Equal(t, api.StepDrainOut, plan.Step)
		require.NotNil(t, plan.Since)
		if since.IsZero() {
			since = *plan.Since
		}
		assert.Equal(t, since, *plan.Since, "the step's clock goes on")
	}
	assert.Equal(t, "injected failure", w.status.LastAction.Error)
	w.failRate = 0
	plan := w.pass()
	assert.Equal(t, api.ActionDrainOut, plan.Action.Type)
	assert.Equal(t, failed.Swap.ID, plan.Swap.ID)
	assert.Equal(t, api.ActionStepDown, w.pass().Action.Type)
}

func TestASnapshotIsNeverAskedOfTheOutgoingVoterEvenWhenItSortsFirst(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	plan := w.runUntil(5, atStep(api.StepSnapshot))
	assert.Equal(t, api.ActionSnapshot, plan.Action.Type)
	assert.Equal(t, "v2", plan.Action.Node)
	// v2 turns unhealthy: v3 is asked, never v1.
	w.Hosts["v2"].UnhealthyUntil = w.now.Add(time.Hour)
	w.node("v2").Request = nil
	plan = w.pass()
	assert.Equal(t, "v3", plan.Action.Node)
	w.Hosts["v3"].UnhealthyUntil = w.now.Add(time.Hour)
	w.node("v3").Request = nil
	plan = w.pass()
	assert.Equal(t, api.ActionNone, plan.Action.Type)
	assert.Contains(t, plan.Reason, "no healthy voter other than the outgoing v1")
}

func TestASteppedDownMemberWhoseNodeNoLongerSaysItVotesIsStillCountedAsAMemberAndRemoved(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionStepDown, "v1"))
	// An etcd-only server runs no kubelet: its Node stops saying it votes.
	w.hooks = append(w.hooks, func(w *world) {
		if v1 := w.node("v1"); v1.Role == api.RoleVoter {
			v1.EtcdIsVoter = swapplan.Condition{}
			v1.ServerLabels = slices.DeleteFunc(v1.ServerLabels, func(l string) bool { return l == api.LabelEtcd })
		}
	})
	w.K3sPaused = true
	plan := w.runUntil(5, acting(api.ActionRemoveMember, "v1"))
	assert.NotContains(t, plan.Voters, "v1")
	for range 5 {
		plan = w.pass()
		assert.Equal(t, api.StepRemoveMember, plan.Step)
		assert.Contains(t, plan.Reason, "lists 4 member(s), 3 voter(s) remain")
	}
	w.K3sPaused = false
	w.runUntil(3, acting(api.ActionMemberGone, "v1"))
	assert.Equal(t, api.ResultCompleted, w.run(100).Result)
}

func TestOnlyNodesThisSwapCordonedAreUncordoned(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.node("v1").Unschedulable = true // an operator's cordon
	w.requestSwap("v1", "s1")
	require.Equal(t, api.ResultCompleted, w.run(200).Result)
	assert.True(t, w.node("v1").Unschedulable, "the operator's cordon stays")
	assert.False(t, w.node("s1").Unschedulable, "the swap's cordon goes")
	assert.NotContains(t, w.actions(), "cordon-out v1")
	assert.NotContains(t, w.actions(), "uncordon v1")

	w = newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(5, acting(api.ActionStart, ""))
	w.node("s1").Unschedulable = true // cordoned by someone else before the swap's cordon-in
	require.Equal(t, api.ResultCompleted, w.run(200).Result)
	assert.True(t, w.node("s1").Unschedulable)
	assert.False(t, w.node("v1").Unschedulable)
	assert.NotContains(t, strings.Join(w.actions(), ","), "uncordon s1")
}

func TestARollbackLeavesTheCordonsOthersSetOnTheCandidateAndTheOutgoingVoter(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["s1"].NeverJoin = true
	w.node("v1").Unschedulable = true // an operator's cordon
	w.requestSwap("v1", "s1")
	w.runUntil(5, acting(api.ActionStart, ""))
	w.node("s1").Unschedulable = true // cordoned by someone else before the swap's cordon-in
	require.Equal(t, api.ResultRolledBack, w.run(300).Result)
	assert.True(t, w.node("s1").Unschedulable)
	assert.True(t, w.node("v1").Unschedulable)
	assert.NotContains(t, w.actions(), "uncordon s1")
	assert.NotContains(t, w.actions(), "uncordon v1")
}

func TestAManualRequestIsCheckedBeforeItIsWritten(t *testing.T) {
	w := newWorld(t, 3, 1, 1)
	s := w.snapshot()
	require.NoError(t, swapplan.CheckRequest(s, "v1", "s1", nil))
	for _, tc := range []struct{ out, in, want string }{
		{"s1", "v1", "s1 is not a voter"},
		{"v1", "a1", `a1's role is "agent", not "standby"`},
		{"v1", "v2", "v2 is a voter already"},
		{"v1", "nope", "there is no Node nope"},
		{"v1", "v1", "the same node"},
	} {
		assert.ErrorContains(t, swapplan.CheckRequest(s, tc.out, tc.in, nil), tc.want)
	}
	w.node("s1").Unschedulable = true
	assert.ErrorContains(t, swapplan.CheckRequest(w.snapshot(), "v1", "s1", nil), "s1 is cordoned")
	w.node("s1").Unschedulable = false
	w.requestSwap("v1", "s1")
	w.pass()
	assert.ErrorContains(t, swapplan.CheckRequest(w.snapshot(), "v2", "s1", nil), "is under way")
	w.lease = swapplan.Lease{Holder: "regrade", RenewTime: w.now, Duration: time.Minute}
	assert.ErrorContains(t, swapplan.CheckRequest(w.snapshot(), "v2", "s1", nil), `held by "regrade"`)
}

func TestThePromotionNamesTheVotersButTheOutgoingOneForTheCandidateToJoinThrough(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	plan := w.runUntil(50, acting(api.ActionPromote, "s1"))
	require.NotNil(t, plan.Action.Request)
	assert.Equal(t, []string{"v2", "v3"}, plan.Action.Request.Voters, "the outgoing v1 is not named: it may be gone by the time s1 restarts")
}

func TestARollbackWaitsForTheStepDownOfACandidateWhoseNodeIsNotReadyWhileItsAgentSamples(t *testing.T) {
	// asked: a rollback has asked s1, whose member never joined and whose
	// agent does not answer, to step down.
	asked := func(t *testing.T) *world {
		w := newWorld(t, 3, 1, 0)
		w.Hosts["s1"].NeverJoin = true
		w.Hosts["s1"].IgnoreStepDown = true
		w.requestSwap("v1", "s1")
		w.runUntil(100, acting(api.ActionStepDown, "s1"))
		return w
	}
	waits := func(t *testing.T, w *world, passes int) {
		for range passes {
			plan := w.pass()
			assert.Equal(t, api.ActionNone, plan.Action.Type, plan.Reason)
			assert.Contains(t, plan.Reason, "waiting for the candidate s1 to step down")
		}
	}
	answers := func(t *testing.T, w *world) {
		w.Hosts["s1"].IgnoreStepDown = false
		w.Hosts["s1"].Handled = time.Time{} // the request is still there to be read
		assert.Equal(t, api.ResultRolledBack, w.run(100).Result)
		assert.Equal(t, "agent", w.Hosts["s1"].RoleFile, "the candidate stepped down")
	}
	t.Run("its agent samples: waits for its answer", func(t *testing.T) {
		w := asked(t)
		require.False(t, w.node("s1").Ready, "a joining server's Node is not Ready")
		waits(t, w, 10)
		answers(t, w)
	})
	t.Run("its samples come late: waits for its answer", func(t *testing.T) {
		// Note: a sample comes late while the candidate's own etcd does
		// not answer; stale is not silent.
		w := asked(t)
		w.Hosts["s1"].SilentUntil = w.now.Add(35 * time.Second)
		waits(t, w, 3)
		require.Greater(t, w.now.Sub(w.node("s1").Probe.At), 2*w.cfg.ProbePeriod, "the sample is stale")
		answers(t, w)
	})
	t.Run("its agent is silent: goes on without, and ends pending", func(t *testing.T) {
		w := asked(t)
		w.Hosts["s1"].SilentUntil = w.now.Add(time.Hour)
		assert.Equal(t, api.ResultPending, w.run(100).Result)
		assert.Equal(t, "server", w.Hosts["s1"].RoleFile, "the candidate never answered")
	})
}

func TestARollbackEndsRolledBackOnceTheCandidateFinishedItsDemotionOrPendingWhenItNeverDoes(t *testing.T) {
	t.Run("it finishes", func(t *testing.T) {
		w := newWorld(t, 3, 1, 0)
		w.Hosts["s1"].NeverJoin = true
		w.Hosts["s1"].NoFinish = true
		w.requestSwap("v1", "s1")
		w.runUntil(300, acting(api.ActionMemberGone, "s1"))
		for range 5 {
			plan := w.pass()
			if plan.Action.Type != api.ActionNone {
				continue // the clean-up, the uncordon
			}
			assert.Equal(t, api.StepMemberGone, plan.Step)
			assert.Contains(t, plan.Reason, "waiting for the candidate s1's agent to finish its demotion")
		}
		w.Hosts["s1"].NoFinish = false
		res := w.run(100)
		assert.Equal(t, api.ResultRolledBack, res.Result)
		assert.Empty(t, res.Pending)
	})
	t.Run("it never does", func(t *testing.T) {
		w := newWorld(t, 3, 1, 0)
		w.Hosts["s1"].NeverJoin = true
		w.Hosts["s1"].NoFinish = true
		w.requestSwap("v1", "s1")
		res := w.run(500)
		assert.Equal(t, api.ResultPending, res.Result)
		assert.Equal(t, []string{"s1"}, res.Pending)
		assert.Contains(t, res.Reason, "s1 did not finish its demotion within 5m0s: its step-down and member-gone stay on its Node until its agent reports the finish")
	})
}

func TestAJumpOfAHostsClockNeitherHoldsASwapForeverNorMakesASilentVoterLookAlive(t *testing.T) {
	for _, jump := range []time.Duration{-10 * time.Minute, 10 * time.Minute} {
		t.Run(jump.String(), func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			w.observe = true
			w.requestSwap("v1", "s1")
			w.runUntil(50, acting(api.ActionPromote, "s1"))
			for _, h := range []string{"v2", "v3", "s1"} {
				w.Hosts[h].ClockOffset = jump
			}
			res := w.run(400)
			assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
		})
	}
	for _, jump := range []time.Duration{-10 * time.Minute, 10 * time.Minute} {
		t.Run("a rollback, "+jump.String(), func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			w.observe = true
			w.Hosts["s1"].NeverJoin = true
			w.requestSwap("v1", "s1")
			w.runUntil(50, acting(api.ActionPromote, "s1"))
			w.Hosts["s1"].ClockOffset = jump
			w.Hosts["v3"].ClockOffset = -jump
			res := w.run(600)
			assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
			assert.Equal(t, 3, len(w.Members), "the candidate's member is gone")
		})
	}
	t.Run("judged by the stamps alone, a clock set back holds the swap", func(t *testing.T) {
		w := newWorld(t, 3, 1, 0)
		w.requestSwap("v1", "s1")
		w.runUntil(50, acting(api.ActionPromote, "s1"))
		w.Hosts["v2"].ClockOffset = -10 * time.Minute
		for range 100 {
			w.pass()
		}
		assert.Nil(t, w.status.Last, "no end: %s", w.status.Reason)
		assert.Contains(t, w.status.Reason, "v2")
	})
	t.Run("a silent voter whose last sample is stamped ahead is silent", func(t *testing.T) {
		w := newWorld(t, 3, 1, 0)
		w.observe = true
		w.Hosts["v2"].ClockOffset = 10 * time.Minute
		for range 5 {
			w.pass()
		}
		w.Hosts["v2"].Cut = true // its agent writes nothing more
		for range 8 {
			w.pass()
		}
		w.requestSwap("v1", "s1")
		plan := w.pass()
		assert.Equal(t, api.ActionNone, plan.Action.Type)
		assert.Contains(t, plan.Reason, "voter v2's probe has been silent since")
	})
}

func TestARequestWaitingToBeCarriedOutIsNotReplacedButOneThePlannerRefusesIs(t *testing.T) {
	w := newWorld(t, 3, 2, 1)
	w.pause = &api.Pause{By: "carol", Reason: "freeze", At: w.now}
	w.request = &api.ManualRequest{Out: "v1", In: "s1", At: w.now, By: "alice"}
	s := w.snapshot()
	assert.ErrorContains(t, swapplan.CheckRequest(s, "v2", "s2", nil), "alice's request to swap v1 for s1 (at ")
	assert.ErrorContains(t, swapplan.CheckRequest(s, "v2", "s2", nil), "swap --cancel withdraws it")
	assert.NoError(t, swapplan.CheckRequest(s, "v1", "s1", nil), "the same request again")
	assert.Equal(t, w.request, swapplan.PendingRequest(s))

	w.request = &api.ManualRequest{Out: "v1", In: "a1", At: w.now, By: "alice"}
	assert.NoError(t, swapplan.CheckRequest(w.snapshot(), "v2", "s2", nil), "a request the planner refuses is replaced")

	w.pause = nil
	w.request = &api.ManualRequest{Out: "v1", In: "s1", At: w.now, By: "alice"}
	require.Equal(t, api.ResultCompleted, w.run(200).Result)
	assert.Nil(t, swapplan.PendingRequest(w.snapshot()), "a request that started its swap is no longer pending")
}

func TestAnOutgoingVoterSilentWhileItsNodeIsReadyIsAskedNothingUntilItSamplesAgain(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	back := w.now.Add(5 * time.Minute)
	w.Hosts["v1"].SilentUntil = back
	for {
		p := w.node("v1").Probe
		if w.now.Sub(p.At) > 3*time.Duration(p.Period) {
			break
		}
		w.pass()
	}
	w.requestSwap("v1", "s1")
	held := false
	for w.now.Add(w.tick).Before(back) { // the last pass before its samples come again
		plan := w.pass()
		require.NotContains(t, []string{api.ActionCordonOut, api.ActionDrainOut, api.ActionStepDown, api.ActionRemoveMember}, plan.Action.Type,
			"nothing is asked of the silent v1: %s", plan.Reason)
		if strings.Contains(plan.Reason, "the outgoing voter v1 is Ready but its probe has been silent since") {
			held = true
			require.True(t, w.node("v1").Ready)
		}
	}
	assert.True(t, held, "the gates said why they held")
	res := w.run(300)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
}

func TestAWaitForManyRunnerPodsNamesTheFirstThreeAndCountsTheRest(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	for _, name := range []string{"r1", "r2", "r3", "r4", "r5"} {
		w.node("s1").Pods = append(w.node("s1").Pods, swapplan.Pod{Namespace: "arc", Name: name, Runner: true})
	}
	w.requestSwap("v1", "s1")
	plan := w.runUntil(50, atStep(api.StepRunnersIn))
	assert.Equal(t, "waiting for 5 runner pod(s) on the candidate s1 to finish: arc/r1, arc/r2, arc/r3 and 2 more", plan.Reason)

	w = newWorld(t, 3, 1, 0)
	for _, name := range []string{"r1", "r2", "r3"} {
		w.node("s1").Pods = append(w.node("s1").Pods, swapplan.Pod{Namespace: "arc", Name: name, Runner: true})
	}
	w.requestSwap("v1", "s1")
	plan = w.runUntil(50, atStep(api.StepRunnersIn))
	assert.Equal(t, "waiting for 3 runner pod(s) on the candidate s1 to finish: arc/r1, arc/r2, arc/r3", plan.Reason, "three are named, no more to count")
}

func TestTheJoinGateWaitsForEachOfItsConditions(t *testing.T) {
	for _, tc := range []struct {
		name   string
		break_ func(w *world)
		why    string
	}{
		{"IN's EtcdIsVoter not True", func(w *world) {
			w.node("s1").EtcdIsVoter = swapplan.Condition{Status: "False", Reason: api.ReasonMemberIsLearner}
		}, `s1's EtcdIsVoter is "False"/"MemberIsLearner"`},
		{"IN without the etcd label", func(w *world) {
			w.node("s1").ServerLabels = nil
		}, "s1 carries no node-role.kubernetes.io/etcd label"},
		{"a voter without a fresh member list", func(w *world) {
			p := *w.node("v2").Probe
			p.At = w.now.Add(-time.Hour)
			w.node("v2").Probe = &p
		}, "voter v2 has no fresh member list"},
		{"a voter listing IN as a learner", func(w *world) {
			p := *w.node("v3").Probe
			p.Members = slices.Clone(p.Members)
			for i := range p.Members {
				if strings.HasPrefix(p.Members[i].Name, "s1-") {
					p.Members[i].Learner = true
				}
			}
			w.node("v3").Probe = &p
		}, "voter v3 does not list s1 as a voter"},
		{"a report of the promotion without the server's start", func(w *world) {
			if r := w.node("s1").Report; r != nil && r.Action == api.RequestPromote {
				c := *r
				c.StartedAt = nil
				w.node("s1").Report = &c
			}
		}, "s1's report of the promotion says no server start"},
		{"IN not Ready", func(w *world) {
			w.node("s1").Ready = false
		}, "s1 is not Ready on a kubelet heartbeat after its server started"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			w.requestSwap("v1", "s1")
			w.runUntil(100, atStep(api.StepJoin))
			// From the join on, the condition stays broken: the swap
			// waits at the join, saying why, until its bound.
			w.hooks = append(w.hooks, tc.break_)
			for range 20 {
				p := w.pass()
				require.Equal(t, api.StepJoin, p.Step, p.Reason)
				require.Equal(t, api.ActionNone, p.Action.Type)
			}
			assert.Contains(t, w.plans[len(w.plans)-1].Reason, tc.why)
		})
	}
}

func TestARollbackHoldsTheCandidatesRemovalWhileAVoterOtherThanTheOutgoingOneIsUnhealthy(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["s1"].NeverJoin = true
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionStepDown, "s1"))
	w.Hosts["v2"].UnhealthyUntil = w.now.Add(3 * time.Minute)
	held := w.runUntil(10, func(p swapplan.Plan) bool { return strings.Contains(p.Reason, "removal of s1's member held") })
	assert.Contains(t, held.Reason, "rolling back: removal of s1's member held while a voter is unhealthy: v2's probe says unhealthy")
	for w.now.Add(w.tick).Before(w.Hosts["v2"].UnhealthyUntil) {
		p := w.pass()
		require.NotEqual(t, api.ActionRemoveMember, p.Action.Type, "no removal while v2 is unhealthy: %s", p.Reason)
	}
	res := w.run(200)
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
	assert.Contains(t, strings.Join(w.actions(), ","), "remove-member s1")
}

func TestTheGatesHoldTheOutgoingVoterUntouchedWhileAVoterListsOtherMembersThanExpected(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, atStep(api.StepJoin))
	// v3 lists a member of a host that is no voter: once IN votes, the
	// gates hold.
	w.hooks = append(w.hooks, func(w *world) {
		p := *w.node("v3").Probe
		p.Members = append(slices.Clone(p.Members), api.Member{Name: "x9-0a1b2c3d", ID: "1"})
		w.node("v3").Probe = &p
	})
	w.runUntil(20, atStep(api.StepGates))
	for range 5 {
		p := w.pass()
		require.Equal(t, api.StepGates, p.Step, p.Reason)
		require.Equal(t, api.ActionNone, p.Action.Type)
		assert.Contains(t, p.Reason, "gates held, the outgoing voter v1 is not touched: v3 lists members [s1 v1 v2 v3 x9], expected [s1 v1 v2 v3]")
	}
	assert.False(t, w.node("v1").Unschedulable, "v1 untouched")
}

// failOnce makes the Node's first report of the action, once written,
// say failed with the message, as an agent whose step failed does.
func failOnce(node, action, message string) func(w *world) {
	done := false
	return func(w *world) {
		if r := w.node(node).Report; !done && r != nil && r.Action == action && r.State == api.StateDone {
			f := *r
			f.State, f.Message, f.StartedAt = api.StateFailed, message, nil
			w.node(node).Report = &f
			done = true
		}
	}
}

func TestAPromotionThatFailsRollsTheCandidateBack(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionPromote, "s1"))
	w.hooks = append(w.hooks, failOnce("s1", api.RequestPromote, "k3s.service did not start"))
	res := w.run(300)
	assert.Equal(t, api.ResultRolledBack, res.Result)
	assert.Equal(t, "the promotion failed on the candidate s1 (k3s.service did not start)", res.Reason)
	assert.NotContains(t, strings.Join(w.actions(), ","), "v1", "the outgoing voter is never touched")
}

func TestAStepDownThatFailsIsAskedAgainWhileTheOutgoingVoterIsReady(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["v1"].FailStepDowns = 1
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionStepDown, "v1"))
	again := w.runUntil(10, acting(api.ActionStepDown, "v1"))
	assert.Equal(t, "the step-down failed on v1 (systemctl stop k3s: timed out): asking again", again.Reason)
	assert.Equal(t, api.ResultCompleted, w.run(200).Result)
}

func TestAManualRequestIsRefusedForEachReasonAPairCannotBeSwappedAndNothingStarts(t *testing.T) {
	for _, tc := range []struct {
		out, in string
		edit    func(w *world)
		why     string
	}{
		{"v9", "s1", nil, "there is no Node v9"},
		{"s1", "v2", nil, "s1 is not a voter"},
		{"v1", "s9", nil, "there is no Node s9"},
		{"v1", "v2", nil, "v2 is a voter already"},
		{"v1", "a1", nil, `a1's role is "agent", not "standby"`},
		{"v1", "s1", func(w *world) {
			p := *w.node("s1").Probe
			p.At = w.now.Add(-time.Hour)
			w.node("s1").Probe = &p
		}, "s1 has no fresh probe sample"},
		{"v1", "s1", func(w *world) {
			p := *w.node("s1").Probe
			p.Staged = false
			w.node("s1").Probe = &p
		}, "s1 is not staged to become a server"},
		{"v1", "s1", func(w *world) { w.node("s1").Ready = false }, "s1 is not Ready"},
		{"v1", "s1", func(w *world) { w.node("s1").Unschedulable = true }, "s1 is cordoned"},
	} {
		t.Run(tc.why, func(t *testing.T) {
			w := newWorld(t, 3, 1, 1)
			if tc.edit != nil {
				tc.edit(w)
			}
			assert.EqualError(t, swapplan.CheckRequest(w.snapshot(), tc.out, tc.in, nil), tc.why)
			w.requestSwap(tc.out, tc.in)
			p := swapplan.Next(w.snapshot())
			assert.Equal(t, api.ActionNone, p.Action.Type)
			assert.Nil(t, p.Swap, "no swap starts")
			assert.Equal(t, "the manual request to swap "+tc.out+" for "+tc.in+" is refused: "+tc.why, p.Reason)
		})
	}
}

func TestAManualRequestIsRefusedWhileASwapIsUnderWayByTheLeaseOrByTheStatusAndNotOnceItEnded(t *testing.T) {
	w := newWorld(t, 3, 2, 0)
	rec := &api.SwapRecord{ID: "20261130-113000-v3", Out: "v3", In: "s2", StartedAt: w.now}
	other := &api.SwapResult{ID: "20261130-100000-v2"}
	ended := &api.SwapResult{ID: rec.ID}
	for _, tc := range []struct {
		name  string
		lease swapplan.Lease
		swap  *api.SwapRecord
		last  *api.SwapResult
		want  string
	}{
		{"the controller holding the Lease for a swap", swapplan.Lease{Holder: api.ControllerHolder, RenewTime: w.now, Duration: time.Minute, Swap: rec}, nil, nil,
			"swap 20261130-113000-v3 (v3 out, s2 in) is under way"},
		{"the controller holding the Lease for no swap", swapplan.Lease{Holder: api.ControllerHolder, RenewTime: w.now, Duration: time.Minute}, nil, nil, ""},
		{"another holder whose Lease expired", swapplan.Lease{Holder: "regrade", RenewTime: w.now.Add(-2 * time.Minute), Duration: time.Minute}, nil, nil, ""},
		{"the status naming a swap, none ended before", swapplan.Lease{}, rec, nil, "swap 20261130-113000-v3 (v3 out, s2 in) is under way"},
		{"the status naming a swap, another ended before", swapplan.Lease{}, rec, other, "swap 20261130-113000-v3 (v3 out, s2 in) is under way"},
		{"the status naming a swap that it says ended", swapplan.Lease{}, rec, ended, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := w.snapshot()
			s.Lease, s.Status.Swap, s.Status.Last = tc.lease, tc.swap, tc.last
			err := swapplan.CheckRequest(s, "v1", "s1", nil)
			if tc.want == "" {
				assert.NoError(t, err)
			} else {
				assert.EqualError(t, err, tc.want)
			}
		})
	}
}

func TestARequestWaitingToBeCarriedOutRefusesOneWithTheSameOutAndAnotherIn(t *testing.T) {
	w := newWorld(t, 3, 2, 0)
	w.pause = &api.Pause{By: "carol", Reason: "freeze", At: w.now}
	w.request = &api.ManualRequest{Out: "v1", In: "s1", At: w.now, By: "alice"}
	assert.ErrorContains(t, swapplan.CheckRequest(w.snapshot(), "v1", "s2", nil), "alice's request to swap v1 for s1 (at ")
	assert.ErrorContains(t, swapplan.CheckRequest(w.snapshot(), "v2", "s1", nil), "alice's request to swap v1 for s1 (at ")
}

func TestTheAutomaticDecisionChoosesAStandbyThatIsNoVoterNeverARunnerHoweverFit(t *testing.T) {
	w := newWorld(t, 3, 1, 1)
	w.cfg.DryRun = true
	w.node("v1").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 9, Reason: "fsync p99 40 ms"}
	w.node("s1").Verdict = api.Verdict{State: api.VerdictFit, Score: 5}
	w.node("a1").Verdict = api.Verdict{State: api.VerdictFit, Score: 0}
	w.node("v2").Verdict = api.Verdict{State: api.VerdictFit, Score: 0}
	plan := w.pass()
	require.NotNil(t, plan.Decision, plan.Reason)
	assert.Equal(t, api.Decision{Out: "v1", In: "s1", Reason: plan.Decision.Reason}, *plan.Decision, "a1 and v2, fitter, are a runner and a voter")
}

func TestARunnerPodSeenOnTheOutgoingVoterOnceItsDrainBeganDoesNotTakeTheSwapBackToTheRunnersWait(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(200, acting(api.ActionDrainOut, "v1"))
	// A runner the informer shows only now, scheduled before the cordon:
	// the runners' wait was gone past, and its clock would start again.
	w.node("v1").Pods = append(w.node("v1").Pods, swapplan.Pod{Namespace: "arc-runners", Name: "runner-late", Runner: true})
	plan := w.pass()
	assert.NotEqual(t, api.StepRunnersOut, plan.Step, plan.Reason)
	assert.Equal(t, api.ResultCompleted, w.run(200).Result)
}

func TestASwapTheStatusShowsUnderWayWithItsLeaseGoneIsResumedUnlessTheStatusSaysItEnded(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	rec := &api.SwapRecord{ID: "20261130-113000-v1", Out: "v1", In: "s1", StartedAt: w.now}
	for _, tc := range []struct {
		name   string
		last   *api.SwapResult
		resume bool
	}{
		{"no swap ended before", nil, true},
		{"another swap ended before", &api.SwapResult{ID: "20261130-100000-v2"}, true},
		{"the status says it ended", &api.SwapResult{ID: rec.ID}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := w.snapshot()
			s.Status.Swap, s.Status.Step, s.Status.Last = rec, api.StepCordonOut, tc.last
			plan := swapplan.Next(s)
			if !tc.resume {
				assert.NotContains(t, plan.Reason, "resuming", plan.Reason)
				return
			}
			assert.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
			require.NotNil(t, plan.Swap)
			assert.Equal(t, rec.ID, plan.Swap.ID)
			assert.Contains(t, plan.Reason, "resuming swap 20261130-113000-v1 (v1 out, s1 in): its Lease was released or expired before it ended")
		})
	}
}

func TestALeaseHeldByAnotherHolderBlocksThePlanAndKeepsTheSwapTheStatusShowsEvenWithNoDurationSaid(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	rec := &api.SwapRecord{ID: "20261130-113000-v1", Out: "v1", In: "s1", StartedAt: w.now}
	s := w.snapshot()
	s.Lease = swapplan.Lease{Holder: "regrade", RenewTime: w.now.Add(-time.Hour)}
	s.Status.Swap, s.Status.Step = rec, api.StepDrainOut
	plan := swapplan.Next(s)
	assert.Equal(t, api.ActionNone, plan.Action.Type)
	assert.Contains(t, plan.Reason, `is held by "regrade"`)
	require.NotNil(t, plan.Swap, "the swap the status shows is kept")
	assert.Equal(t, rec.ID, plan.Swap.ID)
	assert.Equal(t, api.StepDrainOut, plan.Step)
}

func TestALeaseTheControllerHoldsWithoutASwapRecordIsNoSwapUnderWay(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	s := w.snapshot()
	s.Lease = swapplan.Lease{Holder: api.ControllerHolder, RenewTime: w.now, Duration: time.Minute}
	plan := swapplan.Next(s)
	assert.Nil(t, plan.Swap, plan.Reason)
	assert.Equal(t, "no swap: no voter is unfit", plan.Reason)
}

func TestAVoterSilentMidSwapHoldsEveryActionNamingItAndTheSwapGoesOnOnceItSamplesAgain(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(200, acting(api.ActionDrainIn, "s1"))
	// v2 falls silent, and three of its periods (10 s) go by before the
	// next pass: the promotion, which no other gate holds, is held.
	w.Hosts["v2"].SilentUntil = w.now.Add(2 * time.Minute)
	w.now = w.now.Add(35 * time.Second)
	plan := w.pass()
	assert.Equal(t, api.ActionNone, plan.Action.Type)
	assert.Regexp(t, `^every step holds: voter v2's probe has been silent since \S+ \(3 periods of 10s\) \(next: promote s1\)$`, plan.Reason)
	require.NotNil(t, plan.Swap, "the swap stays under way")
	for w.now.Before(w.Hosts["v2"].SilentUntil) {
		plan = w.pass()
		if strings.HasPrefix(plan.Reason, "every step holds") {
			assert.Equal(t, api.ActionNone, plan.Action.Type, "no action while v2 is silent")
		}
	}
	assert.Equal(t, api.ResultCompleted, w.run(300).Result)
}

func TestAStepWaitsThroughTheLastInstantOfItsBoundAndGivesUpJustPastIt(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["v2"].SnapshotNotReady = true
	w.requestSwap("v1", "s1")
	w.runUntil(10, acting(api.ActionSnapshot, "v2"))
	plan := w.runUntil(5, atStep(api.StepSnapshot))
	require.NotNil(t, plan.Since)
	since := *plan.Since
	require.Equal(t, api.ActionNone, plan.Action.Type, plan.Reason)

	w.tick = since.Add(w.cfg.Bounds.Snapshot).Sub(w.now)
	plan = w.pass()
	assert.Equal(t, since.Add(w.cfg.Bounds.Snapshot), w.now)
	assert.Equal(t, api.StepSnapshot, plan.Step, "at its bound exactly, the step still waits: %s", plan.Reason)
	assert.Equal(t, api.ActionNone, plan.Action.Type, plan.Reason)

	w.tick = time.Nanosecond
	plan = w.pass()
	assert.Equal(t, api.ActionAbandon, plan.Action.Type, "a nanosecond past its bound, the swap gives up: %s", plan.Reason)
}

func TestSamplesThatGiveNoProbePeriodAreJudgedByTheConfiguredOneAndASwapCompletes(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	// An agent of before the period was sampled writes none; its samples
	// are read a second after they are taken.
	w.hooks = append(w.hooks, func(w *world) {
		for i := range w.nodes {
			if p := w.nodes[i].Probe; p != nil && p.Period != 0 {
				q := *p
				q.Period, q.At = 0, q.At.Add(-time.Second)
				w.nodes[i].Probe = &q
			}
		}
	})
	w.swapCompletes("v1", "s1")
}

// renameMember gives the voter's member a name not of k3s's form
// ("<node>-<8 hex>"), as a member added outside k3s has (a cluster moved
// onto k3s from another etcd, say): only the names the Nodes carry map it
// to its Node.
func (w *world) renameMember(voter, name string) {
	h := w.Hosts[voter]
	for i := range w.Members {
		if w.Members[i].Name == h.Member {
			w.Members[i].Name = name
		}
	}
	h.Member = name
	w.node(voter).MemberName = name
}

// sayNoMember makes the Node's sample that of an agent that does not say
// its member's name.
func sayNoMember(n *swapplan.Node) {
	if p := n.Probe; p != nil && p.Member != "" {
		q := *p
		q.Member = ""
		n.Probe = &q
	}
}

func TestAVoterWhoseMemberNameIsNotK3ssIsKnownByItsNodesAnnotationAloneAndASwapCompletes(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.renameMember("v2", "etcd-two")
	w.hooks = append(w.hooks, func(w *world) { sayNoMember(w.node("v2")) })
	w.swapCompletes("v1", "s1")
}

func TestAVoterWhoseMemberNameIsNotK3ssIsKnownByItsAgentsSampleAloneAndASwapCompletes(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.renameMember("v2", "etcd-two")
	w.hooks = append(w.hooks, func(w *world) {
		w.node("v2").MemberName = "" // k3s's node-name annotation gone
	})
	w.swapCompletes("v1", "s1")
}

func TestASampleSeenAPeriodAfterItsStampIsAgedFromWhenItWasSeenAndIsFreshWhileTwoPeriodsOldExactly(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.observe = true
	w.Hosts["v2"].ClockOffset = -w.cfg.ProbePeriod // its clock a period behind, exactly
	for range 5 {
		w.pass()
	}
	w.Hosts["v2"].Cut = true // its agent writes nothing more
	w.pass()
	w.requestSwap("v1", "s1")
	// Two periods after it was seen, three after its stamp: fresh, as
	// the controller's clock judges it.
	plan := w.pass()
	assert.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
}

func TestAHeldRemovalSaysWhyTheVoterIsDownInItsAgentsWords(t *testing.T) {
	for _, c := range []struct {
		name       string
		err        string
		fsync, rtt float64
		want, not  string
	}{
		{"the agent's error", "etcd did not answer within 2s", 3, 1.5, "v3's probe says unhealthy: etcd did not answer within 2s", "fsync"},
		{"the agent's error and the disk", "etcd did not answer within 2s", 14.3, 2.5, "v3's probe says unhealthy: etcd did not answer within 2s", "fsync"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			w.requestSwap("v1", "s1")
			w.runUntil(100, acting(api.ActionStepDown, "v1"))
			w.hooks = append(w.hooks, func(w *world) {
				if p := w.node("v3").Probe; p != nil && p.Healthy {
					q := *p
					q.Healthy, q.Error, q.FsyncP99Ms, q.RTTMs = false, c.err, c.fsync, c.rtt
					w.node("v3").Probe = &q
				}
			})
			plan := w.pass()
			assert.Equal(t, api.StepRemoveMember, plan.Step)
			assert.Contains(t, plan.Reason, c.want)
			assert.NotContains(t, plan.Reason, c.not)
		})
	}
}

func TestAVoterWhoseMemberNoNodeNamesIsKnownByK3ssNameFormAndASwapCompletes(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	// k3s's form, "<node>-<8 hex>", with each edge of the hex digits.
	w.renameMember("v2", "v2-09afa09f")
	w.hooks = append(w.hooks, func(w *world) {
		w.node("v2").MemberName = ""
		sayNoMember(w.node("v2"))
	})
	w.swapCompletes("v1", "s1")
}

func TestARollbackTrustsNoMemberListSampledBeforeTheCandidateSteppedDown(t *testing.T) {
	w := cancelledOnceTheOutgoingVoterIsCordoned(t)
	w.runUntil(20, acting(api.ActionStepDown, "s1"))
	w.Hosts["v3"].Cut = true // its last sample is of before the candidate stopped
	var reasons []string
	for range 6 {
		plan := w.pass()
		require.NotEqual(t, api.ActionMemberGone, plan.Action.Type, plan.Reason)
		reasons = append(reasons, plan.Reason)
	}
	assert.Contains(t, reasons, "rolling back: waiting for v3's member list sampled after the candidate s1 stepped down")
	w.Hosts["v3"].Cut = false
	res := w.run(100)
	require.NotNil(t, res)
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
}

func TestARollbackTrustsAMemberListSeenAPeriodAfterTheCandidatesStopWasSeenThoughItsVotersClockStampsItBefore(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.observe = true
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionCordonOut, "v1"))
	w.Hosts["v3"].ClockOffset = -time.Hour
	require.NoError(t, w.cancelSwap())
	res := w.run(100)
	require.NotNil(t, res)
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
}

// The candidate's stop is the report of its step-down: a voter's sample
// taken no later than that report is not trusted.
func TestARollbackTrustsNoMemberListSampledNoLaterThanTheCandidatesStepDownReport(t *testing.T) {
	w := cancelledOnceTheOutgoingVoterIsCordoned(t)
	w.runUntil(50, func(swapplan.Plan) bool {
		r := w.node("s1").Report
		return r != nil && r.Swap == w.status.Swap.ID && r.State == api.StateDone && r.Action == api.RequestStepDown
	})
	w.Hosts["v3"].Cut = true // its last sample is of the tick the report was written
	plan := w.pass()
	require.NotEqual(t, api.ActionMemberGone, plan.Action.Type, plan.Reason)
	assert.Equal(t, "rolling back: waiting for v3's member list sampled after the candidate s1 stepped down", plan.Reason)
}

// A voter's sample stamped before the candidate's stop (its clock behind)
// is trusted once the controller saw it a whole period after it saw the
// stop's report (its step-down's, then its finish's once k3s removed its
// member), and not while it has not seen that report change.
func TestARollbackTrustsASampleStampedBeforeTheStopOnlyWhenSeenAWholePeriodAfterTheStopsReport(t *testing.T) {
	for name, c := range map[string]struct {
		// reportSeen is when the controller saw s1's report, before it
		// saw v3's sample; zero: never.
		reportSeen time.Duration
		trusted    bool
	}{
		"seen a whole period after":             {10 * time.Second, true},
		"seen a second short of a period after": {9 * time.Second, false},
		"the report never seen":                 {0, false},
	} {
		t.Run(name, func(t *testing.T) {
			w := cancelledOnceTheOutgoingVoterIsCordoned(t)
			w.runUntil(50, acting(api.ActionStepDown, "s1"))
			w.hooks = append(w.hooks, func(w *world) {
				s1, v3 := w.node("s1"), w.node("v3")
				if r := s1.Report; r != nil && r.State == api.StateDone && (r.Action == api.RequestStepDown || r.Action == api.ReportFinish) {
					p := *v3.Probe
					p.At = r.At.Add(-time.Second)
					v3.Probe, v3.ProbeSeen = &p, w.now
					s1.ReportSeen = time.Time{}
					if c.reportSeen > 0 {
						s1.ReportSeen = w.now.Add(-c.reportSeen)
					}
				}
			})
			gone := false
			for range 20 {
				if p := w.pass(); p.Action.Type == api.ActionMemberGone {
					gone = true
					break
				}
			}
			assert.Equal(t, c.trusted, gone, "the member-gone written on v3's sample")
		})
	}
}

// A report of another swap says nothing of this one's stop, even one
// stamped ahead by a clock that ran ahead then.
func TestARollbackTakesNoReportOfAnotherSwapForTheCandidatesStop(t *testing.T) {
	w := cancelledOnceTheOutgoingVoterIsCordoned(t)
	w.runUntil(50, acting(api.ActionStepDown, "s1"))
	ahead := w.now.Add(time.Hour)
	w.hooks = append(w.hooks, func(w *world) {
		w.node("s1").Report = &api.Report{Swap: "20261129-060000-v9", Action: api.ReportFinish, State: api.StateDone, At: ahead, StartedAt: &ahead}
	})
	plan := w.runUntil(100, acting(api.ActionMemberGone, "s1"))
	assert.Equal(t, "rolling back: every voter lists the original members: telling s1 its member is gone", plan.Reason)
}

// A candidate frozen before it read its promotion never reports: the
// rollback goes on without its report once its Node is not Ready and its
// agent silent.
func TestARollbackOfACandidateThatNeverReportedEndsPendingNamingIt(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionPromote, "s1"))
	w.Hosts["s1"].Paused = true
	require.Nil(t, w.node("s1").Report)
	res := w.run(200)
	assert.Equal(t, api.ResultPending, res.Result, res.Reason)
	assert.Equal(t, []string{"s1"}, res.Pending)
	assert.Contains(t, w.actions(), "member-gone s1")
}

func TestWithNoCooldownConfiguredACompletedSwapSetsNone(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.cfg.Cooldown = 0
	w.requestSwap("v1", "s1")
	res := w.run(100)
	require.NotNil(t, res)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Nil(t, w.status.CooldownUntil)
}

func TestTheAutomaticDecisionTakesTheWorstUnfitVoterForTheFittestStandbyTheFirstByNameOnATie(t *testing.T) {
	decide := func(scores map[string]float64) api.Decision {
		t.Helper()
		w := newWorld(t, 3, 2, 0)
		w.cfg.DryRun = true
		for name, score := range scores {
			state := api.VerdictFit
			if strings.HasPrefix(name, "v") {
				state = api.VerdictUnfit
			}
			w.node(name).Verdict = api.Verdict{State: state, Score: score}
		}
		plan := w.pass()
		require.NotNil(t, plan.Decision, plan.Reason)
		return api.Decision{Out: plan.Decision.Out, In: plan.Decision.In}
	}
	assert.Equal(t, api.Decision{Out: "v3", In: "s2"}, decide(map[string]float64{"v2": 1005, "v3": 3009, "s1": 3, "s2": 1}), "the worst voter, the fittest standby")
	assert.Equal(t, api.Decision{Out: "v2", In: "s1"}, decide(map[string]float64{"v2": 1005, "v3": 1005, "s1": 1, "s2": 1}), "on a tie, the first by name")
}

func TestThePromotionNamesTheHealthyVotersOnlyOrEveryVoterWhereNoneButTheOutgoingOneIsHealthy(t *testing.T) {
	for _, tc := range []struct {
		unhealthy []string
		want      []string
	}{
		{[]string{"v2"}, []string{"v3"}},
		{[]string{"v2", "v3"}, []string{"v1", "v2", "v3"}},
	} {
		t.Run(strings.Join(tc.unhealthy, ","), func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			w.requestSwap("v1", "s1")
			w.runUntil(50, acting(api.ActionDrainIn, "s1"))
			for _, v := range tc.unhealthy {
				w.Hosts[v].UnhealthyUntil = w.now.Add(time.Hour)
			}
			plan := w.runUntil(20, acting(api.ActionPromote, "s1"))
			require.NotNil(t, plan.Action.Request)
			assert.Equal(t, tc.want, plan.Action.Request.Voters)
		})
	}
}

func TestASampleIsJudgedFreshByThePeriodItsAgentSaysNotTheConfiguredOne(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	// The agents sample every 30 s, the controller's configuration says
	// 10 s: a sample 25 s old is fresh (two of its periods are 60 s).
	w.hooks = append(w.hooks, func(w *world) {
		for i := range w.nodes {
			if p := w.nodes[i].Probe; p != nil && p.Period != api.Duration(30*time.Second) {
				q := *p
				q.Period, q.At = api.Duration(30*time.Second), q.At.Add(-25*time.Second)
				w.nodes[i].Probe = &q
			}
		}
	})
	w.requestSwap("v1", "s1")
	plan := w.pass()
	assert.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
}

func TestAStandbyWhoseMemberVotesIsNoCandidateHoweverFit(t *testing.T) {
	w := newWorld(t, 3, 2, 0)
	w.cfg.DryRun = true
	w.node("v1").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 1005}
	w.node("s1").Verdict = api.Verdict{State: api.VerdictFit, Score: 3}
	w.node("s2").Verdict = api.Verdict{State: api.VerdictFit, Score: 1}
	// s2's role label says standby, but k3s says its member votes (a
	// label changed by hand on a server, say).
	w.hooks = append(w.hooks, func(w *world) {
		s2 := w.node("s2")
		s2.ServerLabels = slices.Clone(api.ServerLabels)
		s2.EtcdIsVoter = swapplan.Condition{Status: "True", Reason: api.ReasonMemberNotLearner}
	})
	plan := w.pass()
	require.NotNil(t, plan.Decision, plan.Reason)
	assert.Equal(t, "s1", plan.Decision.In, "s2, fitter, votes")
}

func TestANodeWhoseAgentNeverSampledHoldsNoSwapItTakesNoPartIn(t *testing.T) {
	w := newWorld(t, 3, 1, 1)
	w.hooks = append(w.hooks, func(w *world) { w.node("a1").Probe = nil })
	w.swapCompletes("v1", "s1")
}

func TestAMemberNoNodeOwnsIsNamedAsEtcdListsItUnlessItHasK3ssForm(t *testing.T) {
	for _, tc := range []struct{ member, shown string }{
		{"backup-etcd", "backup-etcd"},
		{"old-zzzzzzzz", "old-zzzzzzzz"},
		{"gone-0a1b2c3d", "gone"},
		{"node-abc", "node-abc"},
		{"-0a1b2c3d", "-0a1b2c3d"},
	} {
		t.Run(tc.member, func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			w.Members = append(w.Members, fleetmodel.Member{Name: tc.member, Node: "elsewhere"})
			w.requestSwap("v1", "s1")
			plan := w.pass()
			assert.Equal(t, api.ActionNone, plan.Action.Type)
			assert.Contains(t, plan.Reason, "lists members ["+tc.shown+" v1 v2 v3]", plan.Reason)
		})
	}
}

func TestTheSnapshotStaysAskedOfTheVoterAskedWhenAVoterBeforeItByNameIsHealthyAgain(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["v3"].SnapshotNotReady = true // it answers, never ready
	w.requestSwap("v1", "s1")
	w.runUntil(5, acting(api.ActionSnapshot, "v2"))
	// v2 turns unhealthy before it answers: v3 is asked.
	w.Hosts["v2"].UnhealthyUntil = w.now.Add(time.Hour)
	w.node("v2").Request = nil
	plan := w.pass()
	require.Equal(t, "snapshot v3", plan.Action.Type+" "+plan.Action.Node, plan.Reason)
	w.Hosts["v2"].UnhealthyUntil = w.now
	for range 5 {
		plan = w.pass()
		assert.NotEqual(t, "snapshot v2", plan.Action.Type+" "+plan.Action.Node, "v3 was asked: %s", plan.Reason)
	}
	assert.Contains(t, plan.Reason, "v3 says the snapshot is done but it is not ready")
}

func TestTheOutgoingVoterIsUncordonedOnlyOnceItsFinishSaysWhenItsAgentStartedAndItsNodeIsReadyOnALaterHeartbeat(t *testing.T) {
	for name, c := range map[string]struct {
		hook func(w *world)
		wait string
		// end is the result once the hook is lifted: the Node Ready
		// again is uncordoned, a finish with no start never is.
		end string
	}{
		// Its kubelet beats, but says NotReady.
		"not Ready": {func(w *world) { w.node("v1").Ready = false }, `^\(20[0-9-]+T[0-9:]+Z; Ready false, heartbeat 20`, api.ResultCompleted},
		// Its finish says no start.
		"no start": {func(w *world) {
			r := *w.node("v1").Report
			r.StartedAt = nil
			w.node("v1").Report = &r
		}, `^\(no start; Ready true, heartbeat 20`, api.ResultPending},
		// Its agent's clock runs an hour ahead, and the controller has
		// not seen its report change: a heartbeat seen says nothing of
		// the start.
		"a start ahead, its report not seen": {func(w *world) {
			v1 := w.node("v1")
			r := *v1.Report
			ahead := w.now.Add(time.Hour)
			r.StartedAt = &ahead
			v1.Report, v1.HeartbeatSeen, v1.ReportSeen = &r, w.now, time.Time{}
		}, `^\(20[0-9-]+T[0-9:]+Z; Ready true, heartbeat 20`, api.ResultPending},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			w.requestSwap("v1", "s1")
			w.runUntil(200, acting(api.ActionMemberGone, "v1"))
			w.runUntil(20, func(swapplan.Plan) bool {
				r := w.node("v1").Report
				return r != nil && r.Action == api.ReportFinish && r.StartedAt != nil
			})
			w.hooks = append(w.hooks, c.hook)
			waited := 0
			for range 5 {
				plan := w.pass()
				require.NotEqual(t, "uncordon v1", plan.Action.Type+" "+plan.Action.Node, plan.Reason)
				if why, ok := strings.CutPrefix(plan.Reason, "waiting for v1 to be Ready on a heartbeat after its agent started "); ok {
					assert.Regexp(t, c.wait, why)
					waited++
				}
			}
			assert.Positive(t, waited, "the swap waited for v1 saying what for")
			w.hooks = nil
			assert.Equal(t, c.end, w.run(50).Result)
			assert.Equal(t, c.end == api.ResultCompleted, slices.Contains(w.actions(), "uncordon v1"))
		})
	}
}

// The status the controller published is the planner's only clock of a
// step and its only record of steps gone past; a status that does not
// name the swap under way (lost, or another swap's) gives it neither.
func TestAStatusThatNamesNoSwapOrAnotherGivesTheSwapUnderWayNoTimeAtItsStepAndNoStepGonePast(t *testing.T) {
	statuses := map[string]func(w *world, step string){
		"no swap": func(w *world, _ string) { w.status = api.Status{} },
		"another swap an hour at a later step": func(w *world, step string) {
			since := w.now.Add(-time.Hour)
			w.status.Swap = &api.SwapRecord{ID: "20261130-060000-v9", Out: "v9", In: "s9", StartedAt: since}
			w.status.Step, w.status.Since = step, &since
		},
	}
	for name, status := range statuses {
		t.Run(name, func(t *testing.T) {
			t.Run("the promotion's wait is not past its bound", func(t *testing.T) {
				w := newWorld(t, 3, 1, 0)
				w.Hosts["s1"].IgnorePromote = true
				w.requestSwap("v1", "s1")
				w.runUntil(100, acting(api.ActionPromote, "s1"))
				w.hooks = append(w.hooks, func(w *world) { status(w, api.StepPromote) })
				for range 5 {
					plan := w.pass()
					require.Equal(t, api.StepPromote, plan.Step, plan.Reason)
					require.Equal(t, api.ActionNone, plan.Action.Type, plan.Reason)
				}
			})
			t.Run("the runners' wait on the outgoing voter is not gone past", func(t *testing.T) {
				w := newWorld(t, 3, 1, 0)
				w.node("v1").Pods = append(w.node("v1").Pods, swapplan.Pod{Namespace: "arc-runners", Name: "runner-1", Runner: true})
				w.requestSwap("v1", "s1")
				w.runUntil(200, atStep(api.StepRunnersOut))
				w.hooks = append(w.hooks, func(w *world) { status(w, api.StepCleanUp) })
				for range 5 {
					plan := w.pass()
					require.Equal(t, api.StepRunnersOut, plan.Step, plan.Reason)
				}
			})
			t.Run("the candidate deleted before its promotion abandons the swap", func(t *testing.T) {
				w := newWorld(t, 3, 1, 0)
				w.requestSwap("v1", "s1")
				w.runUntil(50, acting(api.ActionCordonIn, "s1"))
				w.deleteNode("s1")
				w.hooks = append(w.hooks, func(w *world) { status(w, api.StepJoin) })
				plan := w.runUntil(5, func(p swapplan.Plan) bool { return p.Action.Type != api.ActionNone })
				assert.Equal(t, api.ActionAbandon, plan.Action.Type, plan.Reason)
			})
		})
	}
}
