package swapplan_test

import (
	"testing"

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

func TestARollbackWaitsAskingNothingWhileTheCandidatesAgentSamplesThatItsEtcdDoesNotAnswerThenGoesOnPastItsBound(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["s1"].NeverJoin = true
	w.Hosts["s1"].IgnoreStepDown = true
	w.hooks = append(w.hooks, etcdDoesNotAnswer("s1"))
	w.requestSwap("v1", "s1")
	asked := w.runUntil(100, acting(api.ActionStepDown, "s1"))
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

	// k3s cannot remove the member of a candidate whose server never
	// served: the removal's own steps do not go back to the wait.
	res := w.run(300)
	assert.Contains(t, w.actions(), "remove-by-voter v2")
	assert.Contains(t, res.Reason, "s1 did not finish its demotion")
}
