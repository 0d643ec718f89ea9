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

// deleteNode deletes the Node as kubectl delete node does: from this tick
// on k3s answers the deletion (fleetmodel Delete), and the Node goes once
// it lets it; until then it is there, being deleted.
func (w *world) deleteNode(name string) {
	w.faults = append(w.faults, func(w *world) {
		i := slices.IndexFunc(w.nodes, func(n swapplan.Node) bool { return n.Name == name })
		if i >= 0 && w.Delete(&w.nodes[i]) {
			w.nodes = slices.Delete(w.nodes, i, i+1)
		}
	})
}

// gone says the Node is no longer in the cluster.
func (w *world) gone(name string) bool {
	return !slices.ContainsFunc(w.nodes, func(n swapplan.Node) bool { return n.Name == name })
}

// membersOf are the Nodes of etcd's members, sorted.
func (w *world) membersOf() []string {
	var names []string
	for _, m := range w.Members {
		names = append(names, m.Node)
	}
	slices.Sort(names)
	return names
}

// quorumKept fails the test when etcd's voting members that run are
// ever fewer than a quorum of them, and when an action is aimed at a
// Node that is gone.
func quorumKept(t *testing.T) func(w *world, p swapplan.Plan) {
	return func(w *world, p swapplan.Plan) {
		if err := w.QuorumKept(fleetmodel.QuorumCheck{Now: w.now}); err != nil {
			t.Fatalf("at %s: %v: %s %s (%s)", w.now, err, p.Action.Type, p.Action.Node, p.Reason)
		}
		if p.Action.Node != "" && w.gone(p.Action.Node) {
			t.Fatalf("at %s: %s aimed at %s, whose Node is gone (%s)", w.now, p.Action.Type, p.Action.Node, p.Reason)
		}
	}
}

func TestTheCandidatesNodeDeletedAfterThePromotionRollsTheSwapBackWithTheOutgoingVoterUncordonedAndTheCandidatePending(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.checks = append(w.checks, quorumKept(t))
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionCordonOut, "v1"))
	require.Equal(t, []string{"s1", "v1", "v2", "v3"}, w.membersOf())
	w.deleteNode("s1")
	res := w.run(100)
	assert.True(t, w.gone("s1"))
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
	assert.Equal(t, []string{"s1"}, res.Pending)
	assert.Contains(t, res.Reason, "the candidate's Node s1 was deleted")
	assert.Equal(t, []string{"v1", "v2", "v3"}, w.membersOf(), "k3s removed the candidate's member")
	assert.False(t, w.node("v1").Unschedulable, "the outgoing voter is uncordoned")
	assert.Empty(t, w.node("v1").CordonedBy)
	assert.Equal(t, api.RoleVoter, w.node("v1").Role)
	assert.NotContains(t, w.actions(), "step-down v1")
}

func TestTheCandidatesNodeDeletedAfterThePromotionLeavesTheCordonAnOperatorSetOnTheOutgoingVoter(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.node("v1").Unschedulable = true // an operator's cordon
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionDrainOut, "v1"))
	w.deleteNode("s1")
	res := w.run(100)
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
	assert.True(t, w.node("v1").Unschedulable, "the operator's cordon stays")
	assert.NotContains(t, w.actions(), "uncordon v1")
}

func TestTheCandidatesNodeDeletedBeforeItWasAskedToPromoteAbandonsTheSwap(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.checks = append(w.checks, quorumKept(t))
	w.requestSwap("v1", "s1")
	w.runUntil(50, acting(api.ActionCordonIn, "s1"))
	w.deleteNode("s1")
	res := w.run(50)
	assert.Equal(t, api.ResultAbandoned, res.Result, res.Reason)
	assert.Contains(t, res.Reason, "before it was asked to promote")
	assert.Equal(t, []string{"v1", "v2", "v3"}, w.membersOf())
}

func TestACandidateWhoseNodeIsDeletedWhileALearnerKeepsItsMemberWhichTheRollbackRemovesThroughAVoter(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["s1"].NeverJoin = true
	w.checks = append(w.checks, quorumKept(t))
	w.requestSwap("v1", "s1")
	w.runUntil(50, acting(api.ActionPromote, "s1"))
	w.runUntil(10, atStep(api.StepJoin))
	// Not yet labelled an etcd Node: k3s lets the Node go and leaves its
	// learner (member_controller.go, onRemove).
	w.deleteNode("s1")
	w.pass()
	require.True(t, w.gone("s1"))
	require.Contains(t, w.membersOf(), "s1")
	plan := w.runUntil(100, acting(api.ActionRemoveByVoter, "v2"))
	assert.Contains(t, plan.Reason, "the member s1-")
	res := w.run(50)
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
	assert.Equal(t, []string{"s1"}, res.Pending)
	assert.Equal(t, []string{"v1", "v2", "v3"}, w.membersOf())
}

func TestTheOutgoingVotersNodeDeletedBeforeThePromotionAbandonsTheSwapAndUncordonsTheCandidate(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.checks = append(w.checks, quorumKept(t))
	w.requestSwap("v1", "s1")
	w.runUntil(50, acting(api.ActionCordonIn, "s1"))
	w.deleteNode("v1")
	res := w.run(50)
	assert.Equal(t, api.ResultAbandoned, res.Result, res.Reason)
	assert.Contains(t, res.Reason, "the outgoing voter's Node v1 was deleted")
	assert.False(t, w.node("s1").Unschedulable)
	assert.Equal(t, []string{"v2", "v3"}, w.membersOf(), "k3s removed its member")
}

func TestTheOutgoingVotersNodeDeletedMidPromotionFinishesTheSwapWithoutItsStepsAndLeavesItPending(t *testing.T) {
	for at, cond := range map[string]func(swapplan.Plan) bool{
		"asked to promote":            acting(api.ActionPromote, "s1"),
		"joining":                     atStep(api.StepJoin),
		"the outgoing voter cordoned": acting(api.ActionCordonOut, "v1"),
	} {
		t.Run(at, func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			w.checks = append(w.checks, quorumKept(t))
			w.requestSwap("v1", "s1")
			w.runUntil(100, cond)
			w.deleteNode("v1")
			n := len(w.plans)
			res := w.run(100)
			assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
			assert.Equal(t, []string{"v1"}, res.Pending)
			assert.Contains(t, res.Reason, "with no Node, its agent can be told nothing, so its host was not demoted")
			assert.Equal(t, []string{"s1", "v2", "v3"}, w.membersOf())
			assert.Equal(t, api.RoleVoter, w.node("s1").Role)
			assert.False(t, w.node("s1").Unschedulable)
			for _, p := range w.plans[n:] {
				assert.NotEqual(t, "v1", p.Action.Node, "%s: %s", p.Action.Type, p.Reason)
			}
		})
	}
}

func TestTheCandidatesNodeDeletedAtAnyStepFromTheStepDownOnEndsPendingWithTheOutgoingVoterDemoted(t *testing.T) {
	// Each is a different wait of the swap's end without IN: the
	// step-down, k3s's removal, the member gone, and the clean-up done.
	for _, at := range []string{api.ActionStepDown, api.ActionRemoveMember, api.ActionMemberGone, api.ActionCleanUp} {
		t.Run(at, func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			w.checks = append(w.checks, quorumKept(t))
			w.requestSwap("v1", "s1")
			w.runUntil(100, acting(at, "v1"))
			w.deleteNode("s1")
			res := w.run(100)
			require.NotNil(t, res)
			assert.Equal(t, api.ResultPending, res.Result, res.Reason)
			assert.Equal(t, []string{"s1"}, res.Pending)
			assert.Contains(t, res.Reason, "one voter fewer")
			assert.Equal(t, []string{"v2", "v3"}, w.membersOf(), "both the candidate's and the outgoing voter's members removed")
			assert.Equal(t, api.RoleStandby, w.node("v1").Role)
			assert.False(t, w.node("v1").Unschedulable)
			assert.True(t, slices.ContainsFunc(w.plans, func(p swapplan.Plan) bool { return p.Action.Type == api.ActionRemoveMember && p.Action.Node == "v1" }))
		})
	}
}

func TestAnEtcdNodeWithoutItsNodeNameIsLeftBeingDeletedAsK3sLeavesIt(t *testing.T) {
	f := fleetmodel.New(fleetmodel.Timing{})
	n := f.Add("v1", api.RoleVoter, epoch)
	f.Add("v2", api.RoleVoter, epoch)
	member := n.MemberName
	n.MemberName = ""
	assert.False(t, f.Delete(&n), "the handler fails: the Node stays")
	assert.True(t, f.IsMember(member))
	n.MemberName = member
	assert.True(t, f.Delete(&n))
	assert.False(t, f.IsMember(member))
	s := f.Add("s1", api.RoleStandby, epoch)
	assert.True(t, f.Delete(&s), "no etcd label: it goes at once")
	assert.True(t, strings.HasPrefix(f.Members[0].Name, "v2-"))
}

func TestTheCandidatesNodeDeletedOnceItWasAskedToPromoteRollsTheSwapBackThoughNoHostShowsThePromotionYet(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.checks = append(w.checks, quorumKept(t))
	w.requestSwap("v1", "s1")
	w.runUntil(50, acting(api.ActionPromote, "s1"))
	require.Equal(t, api.StepPromote, w.status.Step)
	// Its agent may have read the request: the status at the promotion
	// is all that says so once its Node is gone.
	w.deleteNode("s1")
	res := w.run(100)
	assert.True(t, w.gone("s1"))
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
	assert.Equal(t, []string{"s1"}, res.Pending)
}

func TestTheEndWithoutTheCandidateSaysTheFleetHasAVoterFewerAndThenWhyTheOutgoingVoterIsPendingToo(t *testing.T) {
	gone := "the candidate's Node s1 was deleted after the outgoing voter stepped down: k3s removed its member, " +
		"so the fleet has one voter fewer until another swap; with no Node, its agent can be told nothing: " +
		"its host may still run a server until an operator stops it"
	for name, c := range map[string]struct {
		noFinish bool
		reason   string
		pending  []string
	}{
		"the outgoing voter finished": {false, gone, []string{"s1"}},
		"the outgoing voter never finished": {true, gone + "; v1 did not finish its demotion within 5m0s: " +
			"its step-down and member-gone stay on its Node, and it stays cordoned, until its agent reports the finish", []string{"s1", "v1"}},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			w.Hosts["v1"].NoFinish = c.noFinish
			w.requestSwap("v1", "s1")
			w.runUntil(100, acting(api.ActionStepDown, "v1"))
			w.deleteNode("s1")
			res := w.run(100)
			require.NotNil(t, res)
			assert.Equal(t, api.ResultPending, res.Result)
			assert.Equal(t, c.reason, res.Reason)
			assert.Equal(t, c.pending, res.Pending)
		})
	}
}

func TestTheCandidatesNodeDeletedWhileK3sIsAskedToRemoveTheOutgoingVotersMemberWaitsForItToGoAskingNothingAgain(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionRemoveMember, "v1"))
	w.deleteNode("s1")
	// k3s removes s1's member with its Node, then stops answering.
	w.faults = append(w.faults, func(w *world) { w.K3sPaused = true })
	for range 3 {
		plan := w.pass()
		require.True(t, w.gone("s1"))
		require.Equal(t, api.ActionNone, plan.Action.Type, plan.Reason)
		assert.Equal(t, api.StepRemoveMember, plan.Step)
		assert.Equal(t, "waiting for the member of v1 to go: v2 lists 3 member(s), 2 voter(s) remain", plan.Reason)
	}
	w.faults, w.K3sPaused = w.faults[:1], false
	res := w.run(100)
	assert.Equal(t, api.ResultPending, res.Result, res.Reason)
	assert.Equal(t, 1, strings.Count(strings.Join(w.actions(), ","), "remove-member v1"), "k3s was asked once")
}

func TestTheOutgoingVotersNodeDeletedLeavesACordonSomeoneElseSetOnTheNewVoter(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(5, acting(api.ActionStart, ""))
	w.node("s1").Unschedulable = true // cordoned by someone else before the swap's cordon-in
	w.runUntil(100, atStep(api.StepJoin))
	w.deleteNode("v1")
	res := w.run(100)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.True(t, w.node("s1").Unschedulable)
	assert.NotContains(t, w.actions(), "uncordon s1")
}

func TestACancelWithTheOutgoingVotersNodeDeletedRollsBackOnlyTheSwapItNamesAndSaysWhoOrSomeone(t *testing.T) {
	for name, c := range map[string]struct {
		by, other bool
		result    string
		reason    string
	}{
		"by someone unnamed": {false, false, api.ResultRolledBack, "^cancelled by someone at 20"},
		"by carol":           {true, false, api.ResultRolledBack, "^cancelled by carol at 20"},
		"of another swap":    {true, true, api.ResultCompleted, "the outgoing voter's Node v1 was deleted"},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			w.requestSwap("v1", "s1")
			w.runUntil(100, acting(api.ActionPromote, "s1"))
			w.deleteNode("v1")
			w.pass()
			require.True(t, w.gone("v1"))
			w.cancel = &api.Cancel{Swap: w.status.Swap.ID, At: w.now}
			if c.by {
				w.cancel.By = "carol"
			}
			if c.other {
				w.cancel.Swap = "20260101-000000-v9"
			}
			res := w.run(100)
			assert.Equal(t, c.result, res.Result, res.Reason)
			assert.Regexp(t, c.reason, res.Reason)
		})
	}
}

func TestARollbackWithoutTheCandidatesNodeEndsOnlyOnceEveryVoterButTheOutgoingOneListsTheOriginalMembersFresh(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionCordonOut, "v1"))
	w.deleteNode("s1")
	stale := func(w *world) {
		if w.gone("s1") && !w.IsMember(w.Hosts["s1"].Member) {
			p := *w.node("v3").Probe
			p.At = w.now.Add(-25 * time.Second) // not fresh, not yet silent
			w.node("v3").Probe = &p
		}
	}
	w.hooks = append(w.hooks, stale, func(w *world) { w.Hosts["v1"].Cut = true })
	plan := w.runUntil(20, func(p swapplan.Plan) bool { return strings.Contains(p.Reason, "v3 has no fresh member list") })
	assert.Equal(t, "rolling back: the candidate's Node s1 was deleted; waiting until every voter lists the original members and no more: v3 has no fresh member list", plan.Reason)
	// v1, the outgoing voter, silent, is not waited for.
	w.hooks = w.hooks[1:]
	res := w.run(20)
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
}

func TestAStuckRollbackWithoutTheCandidatesNodeGoesBackToRollingBackOnceAnOperatorRemovedTheMember(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["s1"].NeverJoin = true
	w.Hosts["v2"].RemoveFails = true
	w.requestSwap("v1", "s1")
	w.runUntil(50, atStep(api.StepJoin))
	w.deleteNode("s1")
	w.runUntil(100, acting(api.ActionStuck, "s1"))
	name := w.Hosts["s1"].Member
	w.Members = slices.DeleteFunc(w.Members, func(m fleetmodel.Member) bool { return m.Name == name }) // an operator runs the command
	res := w.run(20)
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
	end := w.plans[len(w.plans)-1]
	require.NotNil(t, end.Swap)
	assert.Nil(t, end.Swap.Stuck, "the record ends with no stuck member: %s", end.Reason)
}

func TestBothNodesOfASwapDeletedBeforeThePromotionAbandonIt(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(50, acting(api.ActionCordonIn, "s1"))
	w.deleteNode("s1")
	w.deleteNode("v1")
	res := w.run(50)
	assert.Equal(t, api.ResultAbandoned, res.Result, res.Reason)
	assert.Equal(t, "the candidate's Node s1 was deleted before it was asked to promote: nothing changed on a host", res.Reason)
}
