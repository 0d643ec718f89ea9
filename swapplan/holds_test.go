package swapplan_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// One disruption at a time: a hold that begins mid-swap (kured's lock
// taken on another voter, an upgrade applying) holds the outgoing voter's
// stop, and nothing that restores a failure to spare.

const kuredOnV3 = "kured's reboot lock is held by v3"

// stopsOut says the plan stops the outgoing voter v1: its step-down.
func stopsOut(p swapplan.Plan) bool {
	return p.Action.Type == api.ActionStepDown && p.Action.Node == "v1"
}

func TestAHoldThatBeginsMidSwapHoldsTheOutgoingVotersStepDownWhereverItBeganBeforeIt(t *testing.T) {
	for _, c := range []struct {
		name  string
		begin func(swapplan.Plan) bool
	}{
		{"at the candidate's promotion", acting(api.ActionPromote, "s1")},
		{"at the outgoing voter's cordon", acting(api.ActionCordonOut, "v1")},
		{"at the outgoing voter's drain", acting(api.ActionDrainOut, "v1")},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			w.requestSwap("v1", "s1")
			w.runUntil(100, c.begin)
			w.holds = []string{kuredOnV3}
			var plan swapplan.Plan
			for range 20 {
				plan = w.pass()
				require.False(t, stopsOut(plan), "v1 is not stopped while kured may reboot v3: %s", plan.Reason)
			}
			assert.Equal(t, api.ActionNone, plan.Action.Type, plan.Reason)
			assert.Equal(t, api.StepGates, plan.Step)
			assert.Equal(t, "gates held, the outgoing voter v1 is not touched: held: "+kuredOnV3+
				" (one disruption at a time: the outgoing voter is not stopped while another may be)", plan.Reason)
			assert.Equal(t, []string{"s1", "v1", "v2", "v3"}, plan.Voters, "the swap waits with one voter more, v1 running")
			w.holds = nil
			next := w.runUntil(10, func(p swapplan.Plan) bool { return p.Action.Type != api.ActionNone })
			assert.NotEqual(t, api.StepGates, next.Step, "the swap goes on once the hold ends: %s", next.Reason)
			assert.Equal(t, api.ResultCompleted, w.run(200).Result)
		})
	}
}

func TestAHoldPastTheGatesBoundKeepsHoldingTheStepDownAndSaysItIsPastItsBound(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionDrainOut, "v1"))
	w.holds = []string{"the Plan system-upgrade/server-plan is applying to v2"}
	start := w.now
	var plan swapplan.Plan
	for w.now.Sub(start) <= w.cfg.Bounds.Gates+2*w.tick {
		plan = w.pass()
		require.False(t, stopsOut(plan), plan.Reason)
	}
	assert.Equal(t, api.StepGates, plan.Step)
	assert.Equal(t, "gates held past their bound 10m0s, the outgoing voter v1 is not touched: held: the Plan system-upgrade/server-plan is applying to v2"+
		" (one disruption at a time: the outgoing voter is not stopped while another may be)", plan.Reason)
	w.holds = nil
	assert.True(t, stopsOut(w.runUntil(10, func(p swapplan.Plan) bool { return p.Action.Type != api.ActionNone })))
	assert.Equal(t, api.ResultCompleted, w.run(200).Result)
}

func TestAStepDownThatFailedIsNotAskedAgainWhileAHoldIsInForce(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["v1"].FailStepDowns = 1
	w.requestSwap("v1", "s1")
	w.runUntil(100, stopsOut)
	w.holds = []string{kuredOnV3}
	var plan swapplan.Plan
	for range 5 {
		plan = w.pass()
		require.False(t, stopsOut(plan), plan.Reason)
	}
	assert.Equal(t, api.StepStepDown, plan.Step)
	assert.Equal(t, "the step-down failed on v1 (systemctl stop k3s: timed out); asking again is held: "+kuredOnV3+" (one disruption at a time)", plan.Reason)
	w.holds = nil
	assert.True(t, stopsOut(w.pass()), "asked again once the hold ends")
	assert.Equal(t, api.ResultCompleted, w.run(200).Result)
}

// What a hold never holds: the removal of a member whose server stopped
// (it gives the cluster back a failure to spare), a rollback (it puts the
// cluster back), the candidate's promotion (it never lowers the failures
// survived) and a dead voter's swap (its member is removed first).
func TestAHoldNeverHoldsTheRemovalOfAStoppedMemberARollbackThePromotionOrADeadVotersSwap(t *testing.T) {
	t.Run("the removal of the outgoing voter's member once it stepped down", func(t *testing.T) {
		w := newWorld(t, 3, 1, 0)
		w.requestSwap("v1", "s1")
		w.runUntil(100, stopsOut)
		w.holds = []string{kuredOnV3}
		plan := w.runUntil(10, func(p swapplan.Plan) bool { return p.Action.Type != api.ActionNone })
		assert.Equal(t, api.ActionRemoveMember, plan.Action.Type, plan.Reason)
		assert.Equal(t, api.ResultCompleted, w.run(200).Result, "the rest of the swap stops no voter")
	})
	t.Run("a rollback", func(t *testing.T) {
		w := newWorld(t, 3, 1, 0)
		w.Hosts["s1"].NeverJoin = true
		w.requestSwap("v1", "s1")
		w.runUntil(100, atStep(api.StepJoin))
		w.holds = []string{kuredOnV3}
		res := w.run(300)
		assert.Equal(t, api.ResultRolledBack, res.Result)
		assert.Contains(t, strings.Join(w.actions(), ","), "rollback ,step-down s1,remove-member s1")
	})
	t.Run("the candidate's promotion", func(t *testing.T) {
		w := newWorld(t, 3, 1, 0)
		w.requestSwap("v1", "s1")
		w.runUntil(100, acting(api.ActionCordonIn, "s1"))
		w.holds = []string{kuredOnV3}
		plan := w.runUntil(20, func(p swapplan.Plan) bool { return p.Action.Type == api.ActionPromote || p.Step == api.StepGates })
		assert.Equal(t, api.ActionPromote, plan.Action.Type, plan.Reason)
	})
	t.Run("a dead voter's swap", func(t *testing.T) {
		w := deadWorld(t)
		w.runUntil(60, func(p swapplan.Plan) bool { return len(p.Dead) > 0 })
		w.requestSwap("v2", "s1")
		w.runUntil(5, func(p swapplan.Plan) bool { return p.Action.Type == api.ActionStart })
		w.holds = []string{"kured's reboot lock is held by v3"}
		assert.Equal(t, api.ResultCompleted, w.run(300).Result)
	})
}

func TestAnotherVoterUnderMaintenanceHoldsAStartAndMidSwapTheOutgoingVotersStepDownButNotASwapOfItself(t *testing.T) {
	const cordonedV3 = "the voter v3 is under maintenance (cordoned, not by fleet-role)"
	w := newWorld(t, 3, 1, 0)
	w.node("v3").Maintenance = "cordoned, not by fleet-role"
	assert.Equal(t, []string{"waits: held: " + cordonedV3 + "; or swap --override holds"},
		swapplan.Obstacles(w.snapshot(), api.ManualRequest{V: 1, Out: "v1", In: "s1", At: w.now}), "a swap of another voter waits")
	assert.Empty(t, swapplan.Obstacles(w.snapshot(), api.ManualRequest{V: 1, Out: "v3", In: "s1", At: w.now}),
		"the voter under maintenance may itself be swapped out: it is the disruption")

	w.node("v3").Maintenance = ""
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionDrainOut, "v1"))
	w.node("v3").Maintenance = "cordoned, not by fleet-role"
	var plan swapplan.Plan
	for range 20 {
		plan = w.pass()
		require.False(t, stopsOut(plan), "v1 is not stopped while v3 is under maintenance: %s", plan.Reason)
	}
	assert.Equal(t, api.StepGates, plan.Step)
	assert.Contains(t, plan.Reason, "held: "+cordonedV3)
	w.node("v3").Maintenance = ""
	assert.True(t, stopsOut(w.runUntil(10, func(p swapplan.Plan) bool { return p.Action.Type != api.ActionNone })))
	assert.Equal(t, api.ResultCompleted, w.run(200).Result)
}
