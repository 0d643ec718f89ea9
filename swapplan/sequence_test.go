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
)

// Sequence tests: each action applied to the simulated cluster, passes run
// until the swap ends.

func TestSequenceAManualSwapRunsToCompleted(t *testing.T) {
	w := newWorld(t, 3, 1, 1)
	w.requestSwap("v1", "s1")
	res := w.run(200)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Empty(t, res.Pending)
	assert.Equal(t, []string{
		"start ", "snapshot v2", "cordon-in s1", "drain-in s1", "promote s1", "cordon-out v1", "drain-out v1",
		"step-down v1", "remove-member v1", "member-gone v1", "clean-up v1", "clean-up s1", "uncordon s1", "uncordon v1", "end ",
	}, w.actions())

	v1, s1 := w.node("v1"), w.node("s1")
	assert.Equal(t, api.RoleStandby, v1.Role)
	assert.Equal(t, api.RoleVoter, s1.Role)
	assert.Empty(t, v1.ServerLabels)
	assert.False(t, v1.Unschedulable)
	assert.False(t, s1.Unschedulable)
	for _, n := range w.nodes {
		assert.Nil(t, n.Request, n.Name)
		assert.Empty(t, n.CordonedBy, n.Name)
		assert.Empty(t, n.MemberGone, n.Name)
	}
	assert.Equal(t, swapplan.Lease{}, w.lease, "the Lease is released")
	plan := w.pass()
	assert.Equal(t, []string{"s1", "v2", "v3"}, plan.Voters)
	assert.Equal(t, api.ActionNone, plan.Action.Type, "the request is not carried out twice")
}

func TestSequenceACandidateThatNeverVotesIsRolledBack(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["s1"].NeverJoin = true
	w.requestSwap("v1", "s1")
	res := w.run(300)
	assert.Equal(t, api.ResultRolledBack, res.Result)
	assert.Contains(t, res.Reason, "not a voter")
	acts := strings.Join(w.actions(), ",")
	// Note: a learner's apiserver never runs, so k3s never writes its
	// Node's etcd annotations and cannot remove it: a voter's agent does.
	assert.Contains(t, acts, "rollback ,step-down s1,remove-member s1,remove-by-voter v2,member-gone s1,clean-up s1,uncordon s1,end ")
	assert.NotContains(t, acts, "v1", "the outgoing voter is never touched")
	s1 := w.node("s1")
	assert.Equal(t, api.RoleStandby, s1.Role)
	assert.Empty(t, s1.ServerLabels)
	assert.False(t, s1.Unschedulable)
	assert.Len(t, w.Members, 3)
	assert.Equal(t, []string{"v1", "v2", "v3"}, w.pass().Voters)
}

func TestSequenceARefusedPromotionIsAbandoned(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["s1"].RefusePromote = true
	w.requestSwap("v1", "s1")
	res := w.run(200)
	assert.Equal(t, api.ResultAbandoned, res.Result)
	assert.Nil(t, w.status.CooldownUntil, "no cooldown after an abandon")
	assert.False(t, w.node("s1").Unschedulable)
}

func TestSequenceAPausedOutgoingVoterIsSwappedAndLeftPending(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, atStep(api.StepCordonOut))
	w.Hosts["v1"].Paused = true
	res := w.run(300)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, []string{"v1"}, res.Pending)
	assert.Len(t, w.Members, 3)
}

func TestSequenceFailingActionsAreRepeatedAndTheSwapStillCompletes(t *testing.T) {
	w := newWorld(t, 3, 2, 1)
	w.failRate = 0.4
	w.requestSwap("v2", "s2")
	res := w.run(400)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
}

func TestSequenceTheAutomaticDecisionSwapsTheWorstUnfitVoter(t *testing.T) {
	w := newWorld(t, 3, 2, 0)
	w.node("v2").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 30, Reason: "fsync p99 30 ms"}
	w.node("v3").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 20, Reason: "fsync p99 20 ms"}
	w.node("s1").Verdict = api.Verdict{State: api.VerdictFit, Score: 3}
	w.node("s2").Verdict = api.Verdict{State: api.VerdictFit, Score: 2}
	plan := w.pass()
	require.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
	assert.Equal(t, "v2", plan.Swap.Out)
	assert.Equal(t, "s2", plan.Swap.In)
	assert.Equal(t, api.OriginAutomatic, plan.Swap.Origin)
	// The verdicts are the controller's; once v2 is out it is no voter.
	w.node("v2").Verdict = api.Verdict{State: api.VerdictFit}
	res := w.run(300)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	require.NotNil(t, w.status.CooldownUntil)
	assert.Equal(t, res.EndedAt.Add(time.Hour), *w.status.CooldownUntil)
	plan = w.pass()
	assert.Equal(t, api.ActionNone, plan.Action.Type)
	assert.Contains(t, plan.Reason, "cooldown")
}

// rollBackWithV2Slow runs a swap of v1 for s1, whose server never comes
// up, to its rollback, v2's disk turning slow at the join; the rollback's
// first pass has been made.
func rollBackWithV2Slow(t *testing.T, w *world) {
	t.Helper()
	w.Hosts["s1"].NeverReady = true
	w.requestSwap("v1", "s1")
	w.runUntil(200, atStep(api.StepJoin))
	w.Hosts["v2"].UnhealthyUntil = w.now.Add(time.Hour)
	plan := w.runUntil(300, func(p swapplan.Plan) bool { return p.Action.Type == api.ActionRollback })
	require.Equal(t, api.ActionRollback, plan.Action.Type, plan.Reason)
}

func TestSequenceARollbackWithAVoterWhoseDiskIsOnlySlowStopsTheVotingCandidateFirstAndKeepsQuorum(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	// As above, but v2's disk is slow rather than v1 frozen: v2's member
	// answers and votes, so stopping s1 leaves three of four voting.
	// Holding the stop for v2 would leave the rollback waiting on a
	// removal that waits for every voter healthy, as long as the disk
	// is slow.
	w.checks = append(w.checks, quorumKept(t))
	rollBackWithV2Slow(t, w)
	plan := w.pass()
	assert.Equal(t, "step-down s1", plan.Action.Type+" "+plan.Action.Node, plan.Reason)
	res := w.run(600)
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
	assert.Equal(t, []string{"v1", "v2", "v3"}, w.voterNodes())
}

func TestSequenceARollbackWithAVoterWhoseSampleSaysAnErrorStopsNotTheVotingCandidateAndHoldsItsRemovalNamingTheVoter(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	// As above, but v2's agent could not reach its etcd: a voter whose
	// member may not answer is not counted as voting, so s1 is not
	// stopped before its member goes, and that removal is held, as every
	// removal is, while a voter other than the outgoing one is unhealthy.
	w.Hosts["s1"].NeverReady = true
	w.checks = append(w.checks, quorumKept(t))
	w.requestSwap("v1", "s1")
	w.runUntil(200, atStep(api.StepJoin))
	w.hooks = append(w.hooks, func(w *world) {
		if p := w.node("v2").Probe; p != nil && p.Error == "" {
			q := *p
			q.Healthy, q.Error = false, "etcd: context deadline exceeded"
			w.node("v2").Probe = &q
		}
	})
	plan := w.runUntil(300, func(p swapplan.Plan) bool { return p.Action.Type == api.ActionRollback })
	require.Equal(t, api.ActionRollback, plan.Action.Type, plan.Reason)
	plan = w.pass()
	assert.Equal(t, api.ActionNone, plan.Action.Type, plan.Reason)
	assert.Equal(t, "rolling back: removal of s1's member held while a voter is unhealthy: v2's probe says unhealthy: etcd: context deadline exceeded", plan.Reason)
}

func TestSequenceARollbackCountsAVoterWhoseDiskIsSlowAsVotingOnlyWhileItsNodeIsReadyAndItsSampleFresh(t *testing.T) {
	for name, fault := range map[string]func(w *world){
		// its kubelet gone: its Node not Ready, its agent sampling
		"not Ready": func(w *world) { w.node("v2").Ready = false },
		// its agent silent, its last sample of a slow disk
		"stale": func(w *world) {
			if p := w.node("v2").Probe; p != nil {
				q := *p
				q.At = w.now.Add(-time.Hour)
				w.node("v2").Probe = &q
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			rollBackWithV2Slow(t, w)
			w.hooks = append(w.hooks, fault)
			plan := w.pass()
			assert.NotEqual(t, "step-down s1", plan.Action.Type+" "+plan.Action.Node, "v2 may not vote: %s", plan.Reason)
		})
	}
}

func TestSequenceARollbackWithTheOutgoingVoterDownRemovesTheVotingCandidatesMemberBeforeItStopsAndKeepsQuorum(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	// s1's member votes, but its apiserver never comes up: k3s writes no
	// EtcdIsVoter for it and the swap rolls back; meanwhile v1 freezes.
	// Stopping s1 first would leave v2 and v3 of four voters.
	w.Hosts["s1"].NeverReady = true
	w.checks = append(w.checks, quorumKept(t))
	w.requestSwap("v1", "s1")
	w.runUntil(200, atStep(api.StepJoin))
	w.Hosts["v1"].Paused = true
	res := w.run(300)
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
	acts := strings.Join(w.actions(), ",")
	assert.Contains(t, acts, "rollback ,remove-member s1,remove-by-voter v2,step-down s1,member-gone s1")
	i := slices.IndexFunc(w.plans, func(p swapplan.Plan) bool { return p.Action.Type == api.ActionRollback })
	require.GreaterOrEqual(t, i, 0)
	assert.Equal(t, "remove-member s1", w.plans[i+1].Action.Type+" "+w.plans[i+1].Action.Node, "asked at once, waiting for no step-down: %s", w.plans[i+1].Reason)
	assert.True(t, slices.ContainsFunc(w.plans, func(p swapplan.Plan) bool {
		return strings.Contains(p.Reason, "before it stops, as stopping it first would leave etcd short of a quorum: 2 other voter(s) voting are not a quorum of 4 with it: v1 is not Ready")
	}), "the removal says why it comes first")
	assert.Equal(t, []string{"v1", "v2", "v3"}, w.voterNodes())
}

func TestSequenceARollbackStopsTheCandidateBeforeRemovingItsMemberWhenThatKeepsQuorum(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(w *world)
	}{
		// s1 votes (its apiserver never comes up), every other voter is
		// healthy: stopping it leaves three of four.
		{"a voting candidate, every other voter healthy", func(w *world) { w.Hosts["s1"].NeverReady = true }},
		// s1 stays a learner, v1 freezes: stopping a learner takes no
		// vote away.
		{"a learner, the outgoing voter frozen", func(w *world) {
			w.Hosts["s1"].NeverJoin = true
			w.hooks = append(w.hooks, func(w *world) {
				if w.status.Step == api.StepJoin {
					w.Hosts["v1"].Paused = true
				}
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			tc.setup(w)
			w.checks = append(w.checks, quorumKept(t))
			w.requestSwap("v1", "s1")
			res := w.run(300)
			assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
			assert.Contains(t, strings.Join(w.actions(), ","), "rollback ,step-down s1,remove-member s1")
		})
	}
}
