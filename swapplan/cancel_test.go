package swapplan_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// cancel writes a cancel as `fleet-role swap --cancel` does, once
// swapplan.CheckCancel lets it.
func (w *world) cancelSwap() error {
	rec, err := swapplan.CheckCancel(w.snapshot())
	if err != nil {
		return err
	}
	w.cancel = &api.Cancel{Swap: rec.ID, By: "carol", At: w.now}
	return nil
}

// cancelledOnceTheOutgoingVoterIsCordoned runs a swap of v1 for s1 until
// v1 is cordoned, s1's member voting, and cancels it: the rollback is
// ahead.
func cancelledOnceTheOutgoingVoterIsCordoned(t *testing.T) *world {
	t.Helper()
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionCordonOut, "v1"))
	require.NoError(t, w.cancelSwap())
	return w
}

func TestACancelBeforeThePromotionAbandonsTheSwapAndUncordonsTheCandidate(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(20, acting(api.ActionCordonIn, "s1"))
	require.NoError(t, w.cancelSwap())
	res := w.run(50)
	assert.Equal(t, api.ResultAbandoned, res.Result)
	assert.Contains(t, res.Reason, "cancelled by carol at")
	assert.False(t, w.node("s1").Unschedulable, "the candidate uncordoned")
	assert.NotContains(t, strings.Join(w.actions(), ","), "promote")
	assert.Equal(t, api.RoleStandby, w.node("s1").Role)
}

func TestACancelAfterThePromotionRollsTheCandidateBackAndLeavesTheOutgoingVoterAsItWas(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionCordonOut, "v1"))
	require.True(t, w.node("v1").Unschedulable)
	require.NoError(t, w.cancelSwap())
	res := w.run(300)
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
	assert.Contains(t, res.Reason, "cancelled by carol")
	assert.Contains(t, w.actions(), "remove-member s1", "the candidate's member removed")
	assert.Contains(t, w.actions(), "uncordon v1", "the outgoing voter uncordoned")
	assert.False(t, w.node("v1").Unschedulable)
	assert.False(t, w.node("s1").Unschedulable)
	assert.Equal(t, api.RoleVoter, w.node("v1").Role)
	assert.Equal(t, api.RoleStandby, w.node("s1").Role)
	assert.Equal(t, []string{"v1", "v2", "v3"}, swapplan.Next(w.snapshot()).Voters)
	assert.NotContains(t, w.actions(), "step-down v1")
}

func TestACancelIsRefusedOnceTheOutgoingVoterSteppedDownAndTheSwapGoesOn(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionStepDown, "v1"))
	err := w.cancelSwap()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the outgoing voter v1 has stepped down")
	assert.Contains(t, err.Error(), "the way back is a new swap once this one ends")
	// A cancel written all the same (a race with the step-down) is not
	// acted on.
	w.cancel = &api.Cancel{Swap: w.status.Swap.ID, By: "carol", At: w.now}
	assert.Equal(t, api.ResultCompleted, w.run(200).Result)
}

func TestACancelNeedsASwapGoingForward(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	_, err := swapplan.CheckCancel(w.snapshot())
	assert.EqualError(t, err, "no swap is under way")
	w.requestSwap("v1", "s1")
	w.runUntil(20, acting(api.ActionCordonIn, "s1"))
	require.NoError(t, w.cancelSwap())
	w.pass()
	_, err = swapplan.CheckCancel(w.snapshot())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is already going back (abandon: cancelled by carol")
	w.run(50) // the abandon ends
	w.cancel = &api.Cancel{Swap: "20260101-000000-v9", By: "carol", At: w.now}
	w.requestSwap("v2", "s1")
	assert.Equal(t, api.ResultCompleted, w.run(300).Result, "a cancel of another swap is no concern of this one")
}

func TestACancelIsRefusedFromEachStepOnTheOutgoingVoterPastItsStepDownSayingWhy(t *testing.T) {
	for _, tc := range []struct {
		after string
		// removed: k3s has removed the member and said so on the Node,
		// and the member-gone is not yet written.
		removed bool
		why     string
	}{
		{api.ActionRemoveMember, false, "k3s has been asked to remove the outgoing voter v1's member"},
		{api.ActionRemoveMember, true, "the outgoing voter v1's member has been removed"},
		{api.ActionMemberGone, false, "the outgoing voter v1's member has been removed"},
		{api.ActionCleanUp, false, "the swap is cleaning up: v1 is no longer a voter"},
	} {
		t.Run(fmt.Sprintf("%s, removed %t", tc.after, tc.removed), func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			w.requestSwap("v1", "s1")
			w.runUntil(100, acting(tc.after, "v1"))
			if tc.removed {
				v1 := w.node("v1")
				require.NotEmpty(t, v1.MemberName)
				v1.RemovedMember = v1.MemberName
			}
			err := w.cancelSwap()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.why)
			assert.Contains(t, err.Error(), "the way back is a new swap once this one ends")
		})
	}
}

func TestACancelIsCheckedAgainstTheSwapTheLeaseOrElseTheStatusNamesAndRefusedWhileARegradeHoldsTheLease(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(20, acting(api.ActionCordonIn, "s1"))
	id := w.status.Swap.ID

	rec, err := swapplan.CheckCancel(w.snapshot())
	require.NoError(t, err)
	assert.Equal(t, id, rec.ID, "the Lease's swap")

	held := w.lease
	w.lease = swapplan.Lease{}
	rec, err = swapplan.CheckCancel(w.snapshot())
	require.NoError(t, err, "the Lease lost, the status still shows the swap under way")
	assert.Equal(t, id, rec.ID)

	w.lease = swapplan.Lease{Holder: api.ControllerHolder, RenewTime: w.now, Duration: time.Minute}
	rec, err = swapplan.CheckCancel(w.snapshot())
	require.NoError(t, err, "the controller holds the Lease with no swap on it, the status shows the swap under way")
	assert.Equal(t, id, rec.ID)

	w.lease = swapplan.Lease{}
	w.status.Last = &api.SwapResult{ID: id, Result: api.ResultCompleted}
	_, err = swapplan.CheckCancel(w.snapshot())
	assert.EqualError(t, err, "no swap is under way", "the status shows it ended")

	w.lease = swapplan.Lease{Holder: "regrade", RenewTime: w.now, Duration: time.Hour}
	_, err = swapplan.CheckCancel(w.snapshot())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `is held by "regrade": a regrade is under way, not a swap`)

	w.lease = held
	ending := *held.Swap
	ending.Phase, ending.Result = api.PhaseEnd, api.ResultCompleted
	w.lease.Swap = &ending
	_, err = swapplan.CheckCancel(w.snapshot())
	assert.EqualError(t, err, "swap "+id+" is ending (completed)")
}

func TestACancelOfASwapWhoseNodeIsGoneIsLeftToThePlanner(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionStepDown, "v1"))
	_, err := swapplan.CheckCancel(w.snapshot())
	require.Error(t, err, "refused with both Nodes there")
	w.deleteNode("s1")
	w.pass()
	require.True(t, w.gone("s1"))
	rec, err := swapplan.CheckCancel(w.snapshot())
	require.NoError(t, err, "the planner abandons, rolls back or goes on, as it does uncancelled")
	assert.Equal(t, w.status.Swap.ID, rec.ID)
}

func TestARolledBackCandidateIsCleanedAgainWhileAnyServerStateIsLeftOnItsNode(t *testing.T) {
	for name, leave := range map[string]func(n *swapplan.Node){
		"a server label":    func(n *swapplan.Node) { n.ServerLabels = []string{api.LabelEtcd} },
		"its member's name": func(n *swapplan.Node) { n.MemberName = "s1-0123abcd" },
		"a removed member":  func(n *swapplan.Node) { n.RemovedMember = "s1-0123abcd" },
		"a removal asked":   func(n *swapplan.Node) { n.RemoveRequested = true },
		"a level":           func(n *swapplan.Node) { n.Level = "full" },
		"the etcd taint":    func(n *swapplan.Node) { n.EtcdTaint = true },
	} {
		t.Run(name, func(t *testing.T) {
			w := cancelledOnceTheOutgoingVoterIsCordoned(t)
			w.runUntil(100, acting(api.ActionCleanUp, "s1"))
			left := false
			w.hooks = append(w.hooks, func(w *world) {
				if !left {
					leave(w.node("s1")) // what the clean-up's patch left, say
					left = true
				}
			})
			plan := w.pass()
			assert.Equal(t, "clean-up s1", plan.Action.Type+" "+plan.Action.Node, plan.Reason)
			res := w.run(100)
			require.NotNil(t, res)
			assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
		})
	}
}
