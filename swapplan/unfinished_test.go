package swapplan_test

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// etcdDoesNotAnswer makes the host's samples say its etcd did not answer,
// as an agent's do while its own member is cut off: fresh, unhealthy.
func etcdDoesNotAnswer(name string) func(w *world) {
	return func(w *world) {
		n := w.node(name)
		if n.Probe == nil {
			return
		}
		p := *n.Probe
		p.Healthy, p.Error = false, "etcd status: context deadline exceeded"
		n.Probe = &p
	}
}

// keeps says the Node keeps the swap's step-down and member-gone.
func keeps(t *testing.T, n *swapplan.Node, swap string) {
	t.Helper()
	require.NotNil(t, n.Request, "%s's request", n.Name)
	assert.Equal(t, api.RequestStepDown, n.Request.Action, n.Name)
	assert.Equal(t, swap, n.Request.Swap, n.Name)
	assert.Equal(t, swap, n.MemberGone, n.Name)
}

func TestARollbackWaitsAskingNothingWhileTheCandidatesAgentSamplesThatItsEtcdDoesNotAnswerThenGoesOnPastItsBoundAndEndsPending(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["s1"].NeverJoin = true
	w.Hosts["s1"].IgnoreStepDown = true
	w.hooks = append(w.hooks, etcdDoesNotAnswer("s1"))
	w.requestSwap("v1", "s1")
	asked := w.runUntil(100, acting(api.ActionStepDown, "s1"))
	id := asked.Swap.ID
	for w.now.Add(w.tick).Sub(*asked.Since) <= w.cfg.Bounds.Rollback {
		plan := w.pass()
		s1 := w.node("s1")
		require.False(t, s1.Ready, "a joining server's Node is not Ready")
		require.LessOrEqual(t, w.now.Sub(s1.Probe.At), 2*w.cfg.ProbePeriod, "its samples are fresh")
		require.False(t, s1.Probe.Healthy)
		assert.Equal(t, api.ActionNone, plan.Action.Type, "nothing more is asked: %s", plan.Reason)
		assert.Equal(t, api.StepRollback, plan.Step)
		assert.Contains(t, plan.Reason, "rolling back: waiting for the candidate s1 to step down")
	}
	plan := w.runUntil(3, func(p swapplan.Plan) bool { return p.Action.Type != api.ActionNone })
	assert.Equal(t, "remove-member s1", plan.Action.Type+" "+plan.Action.Node, "past the bound the rollback goes on: %s", plan.Reason)

	res := w.run(300)
	assert.Equal(t, api.ResultPending, res.Result, res.Reason)
	assert.Equal(t, []string{"s1"}, res.Pending)
	assert.Contains(t, res.Reason, "s1 did not finish its demotion within 5m0s")
	keeps(t, w.node("s1"), id)
}

func TestARollbackWhoseCandidateIsSilentAndNeverFinishesEndsPendingKeepingItsInstructionAndClearingTheOthers(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["s1"].NeverJoin = true
	w.Hosts["s1"].IgnoreStepDown = true
	w.requestSwap("v1", "s1")
	asked := w.runUntil(100, acting(api.ActionStepDown, "s1"))
	id := asked.Swap.ID
	w.Hosts["s1"].SilentUntil = w.now.Add(24 * time.Hour)

	res := w.run(300)
	end := w.plans[len(w.plans)-1]
	require.Equal(t, api.ActionEnd, end.Action.Type)
	assert.Equal(t, api.ResultPending, res.Result, res.Reason)
	assert.Equal(t, []string{"s1"}, res.Pending)
	assert.Contains(t, res.Reason, "s1 did not finish its demotion while its Node is not Ready and its agent silent (no probe sample since ")
	assert.Contains(t, res.Reason, "its step-down and member-gone stay on its Node until its agent reports the finish")
	assert.Equal(t, []string{"v2"}, end.Action.Clear, "the snapshot's voter is cleared, the candidate is not")
	assert.Equal(t, []api.UnfinishedDemotion{{Node: "s1", Swap: id}}, end.Pending)
	keeps(t, w.node("s1"), id)
	assert.Nil(t, w.node("v2").Request, "the others' annotations are cleared")
}

func TestAnOutgoingVoterThatNeverFinishesEndsTheSwapCompletedWithItPendingKeepingItsInstructionAndCordonUntilItFinishes(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["v1"].NoFinish = true
	w.requestSwap("v1", "s1")
	res := w.run(300)
	end := w.plans[len(w.plans)-1]
	id := res.ID
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, []string{"v1"}, res.Pending)
	assert.Contains(t, res.Reason, "v1 did not finish its demotion within 5m0s: its step-down and member-gone stay on its Node, and it stays cordoned")
	assert.NotContains(t, end.Action.Clear, "v1")
	assert.ElementsMatch(t, []string{"s1", "v2"}, end.Action.Clear)
	assert.Equal(t, []api.UnfinishedDemotion{{Node: "v1", Swap: id}}, end.Pending)
	v1 := w.node("v1")
	keeps(t, v1, id)
	assert.Equal(t, id, v1.CordonedBy)
	assert.True(t, v1.Unschedulable)
	assert.Equal(t, api.RoleStandby, v1.Role, "cleaned up anyway")

	for range 5 {
		plan := w.pass()
		assert.Equal(t, api.ActionNone, plan.Action.Type, plan.Reason)
		assert.Equal(t, []api.UnfinishedDemotion{{Node: "v1", Swap: id}}, plan.Pending, "named every pass")
	}
	w.Hosts["v1"].NoFinish = false
	plan := w.runUntil(5, acting(api.ActionClearFinished, "v1"))
	assert.True(t, plan.Action.Uncordon, "Ready on a heartbeat after its agent started: uncordoned")
	assert.Equal(t, id, plan.Action.Swap)
	assert.Nil(t, plan.Swap, "no swap is under way")
	v1 = w.node("v1")
	assert.Nil(t, v1.Request)
	assert.Empty(t, v1.MemberGone)
	assert.Empty(t, v1.CordonedBy)
	assert.False(t, v1.Unschedulable)
	plan = w.pass()
	assert.Equal(t, api.ActionNone, plan.Action.Type, plan.Reason)
	assert.Empty(t, plan.Pending)
}

func TestWithNoSwapUnderWayAHostKeepingAnEndedSwapsInstruction(t *testing.T) {
	const ended = "20261130-070000-v1"
	// kept: s1, a candidate the swap rolled back, keeps its step-down and
	// member-gone; its report is the finish or not.
	kept := func(t *testing.T, finished bool) *world {
		w := newWorld(t, 3, 1, 0)
		s1 := w.node("s1")
		s1.Request = &api.Request{Swap: ended, Action: api.RequestStepDown, At: epoch.Add(-time.Hour)}
		s1.MemberGone = ended
		if finished {
			s1.Report = &api.Report{Swap: ended, Action: api.ReportFinish, State: api.StateDone, At: epoch.Add(-time.Minute), StartedAt: ptr(epoch.Add(-time.Minute))}
		}
		w.status.Last = &api.SwapResult{ID: ended, Out: "v1", In: "s1", Result: api.ResultPending, Pending: []string{"s1"}}
		return w
	}
	t.Run("that reported the finish has it cleared", func(t *testing.T) {
		w := kept(t, true)
		w.requestSwap("v1", "s1")
		plan := w.pass()
		assert.Equal(t, swapplan.Action{Type: api.ActionClearFinished, Node: "s1", Swap: ended}, plan.Action, plan.Reason)
		assert.Equal(t, "s1 finished its demotion from swap "+ended+": clearing the swap's annotations from its Node", plan.Reason)
		assert.Empty(t, plan.Step)
		assert.Empty(t, plan.Pending)
		s1 := w.node("s1")
		assert.Nil(t, s1.Request)
		assert.Empty(t, s1.MemberGone)
		plan = w.pass()
		assert.Equal(t, api.ActionStart, plan.Action.Type, "then the manual request is carried out: %s", plan.Reason)
	})
	t.Run("that did not is left as it is, named pending, and no candidate", func(t *testing.T) {
		w := kept(t, false)
		w.Hosts["s1"].NoFinish = true
		plan := w.pass()
		assert.Equal(t, api.ActionNone, plan.Action.Type, plan.Reason)
		assert.Equal(t, []api.UnfinishedDemotion{{Node: "s1", Swap: ended}}, plan.Pending)
		want := "s1 has not finished its demotion from swap " + ended + ": its agent has not reported the finish"
		assert.EqualError(t, swapplan.CheckRequest(w.snapshot(), "v1", "s1", nil), want)
		w.requestSwap("v1", "s1")
		plan = w.pass()
		assert.Equal(t, api.ActionNone, plan.Action.Type)
		assert.Equal(t, "the manual request to swap v1 for s1 is refused: "+want, plan.Reason)
		w.request = nil
		w.node("v1").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 10}
		plan = w.pass()
		assert.Equal(t, api.ActionNone, plan.Action.Type)
		assert.Contains(t, plan.Reason, "no standby is eligible")
		keeps(t, w.node("s1"), ended)
	})
	t.Run("that reported the finish under someone else's cordon has them cleared and the cordon left", func(t *testing.T) {
		w := kept(t, true)
		w.node("s1").Unschedulable = true
		plan := w.pass()
		assert.Equal(t, swapplan.Action{Type: api.ActionClearFinished, Node: "s1", Swap: ended}, plan.Action, plan.Reason)
		assert.True(t, w.node("s1").Unschedulable)
	})
	for name, start := range map[string]*time.Time{
		"no start":                         nil,
		"a start after its last heartbeat": ptr(epoch.Add(time.Hour)),
	} {
		t.Run("left cordoned by the swap, whose finish says "+name+", keeps them and its cordon", func(t *testing.T) {
			w := kept(t, true)
			s1 := w.node("s1")
			s1.CordonedBy, s1.Unschedulable = ended, true
			w.hooks = append(w.hooks, func(w *world) {
				r := *w.node("s1").Report
				r.StartedAt = start
				w.node("s1").Report = &r
			})
			for range 3 {
				plan := w.pass()
				require.Equal(t, api.ActionNone, plan.Action.Type, plan.Reason)
			}
			keeps(t, w.node("s1"), ended)
			assert.True(t, w.node("s1").Unschedulable)
		})
	}
	t.Run("a Node kept and a host whose Node is gone are both named pending", func(t *testing.T) {
		w := kept(t, false)
		w.Hosts["s1"].NoFinish = true
		w.status.Last.Pending = []string{"s1", "s9"}
		plan := w.pass()
		assert.Equal(t, []api.UnfinishedDemotion{{Node: "s1", Swap: ended}, {Node: "s9", Swap: ended, NodeGone: true}}, plan.Pending)
	})
	t.Run("whose Node the last end named is gone is named pending", func(t *testing.T) {
		w := kept(t, false)
		w.nodes = slices.DeleteFunc(w.nodes, func(n swapplan.Node) bool { return n.Name == "s1" })
		plan := w.pass()
		assert.Equal(t, []api.UnfinishedDemotion{{Node: "s1", Swap: ended, NodeGone: true}}, plan.Pending)
	})
}

func ptr[T any](v T) *T { return &v }

func TestWhileASwapIsUnderWayTheHostsTheLastEndLeftPendingAreNamedWithOrWithoutANode(t *testing.T) {
	const ended = "20261130-070000-v1"
	w := newWorld(t, 3, 2, 0)
	s1 := w.node("s1")
	s1.Request = &api.Request{Swap: ended, Action: api.RequestStepDown, At: epoch.Add(-time.Hour)}
	s1.MemberGone = ended
	w.Hosts["s1"].NoFinish = true
	w.status.Last = &api.SwapResult{ID: ended, Out: "v1", In: "s1", Result: api.ResultPending, Pending: []string{"s1", "s9"}}
	w.requestSwap("v1", "s2")
	plan := w.pass()
	require.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
	plan = w.pass()
	require.NotNil(t, plan.Swap)
	assert.Equal(t, []api.UnfinishedDemotion{{Node: "s1", Swap: ended}, {Node: "s9", Swap: ended, NodeGone: true}}, plan.Pending)
}
