package swapplan_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// inOrder says the steps a swap went through come in the list's order,
// each of the list's steps at most once in turn.
func inOrder(went, list []string) bool {
	i := 0
	for _, s := range went {
		j := slices.Index(list[i:], s)
		if j < 0 {
			return false
		}
		i += j + 1
	}
	return true
}

// The steps a live voter's swap goes through are Steps(false), in its
// order, every one but those with nothing to do here (the runners'
// waits, the gates that held at once); a dead voter's are Steps(true),
// its member removed before the candidate's promotion.
func TestASwapGoesThroughTheStepsStepsListsInTheirOrder(t *testing.T) {
	w := newWorld(t, 3, 1, 1)
	w.requestSwap("v1", "s1")
	res := w.run(200)
	require.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	went := w.steps(res.ID)
	assert.True(t, inOrder(went, swapplan.Steps(false)), "went %v, listed %v", went, swapplan.Steps(false))
	assert.False(t, inOrder(went, swapplan.Steps(true)), "a live voter's swap does not go the dead voter's way: %v", went)
	var skipped []string
	for _, s := range swapplan.Steps(false) {
		if !slices.Contains(went, s) {
			skipped = append(skipped, s)
		}
	}
	assert.Subset(t, []string{api.StepRunnersIn, api.StepRunnersOut, api.StepGates, api.StepJoin}, skipped, "went %v", went)

	d := deadWorld(t)
	for plan := d.pass(); len(plan.Dead) == 0; plan = d.pass() {
		require.Less(t, len(d.plans), 1000, "v2 called dead")
	}
	d.request = &api.ManualRequest{Out: "v2", In: "s1", At: d.now, By: "alice"}
	res = d.run(1000)
	require.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	went = d.steps(res.ID)
	assert.True(t, inOrder(went, swapplan.Steps(true)), "went %v, listed %v", went, swapplan.Steps(true))
	assert.False(t, inOrder(went, swapplan.Steps(false)), "a dead voter's swap does not go the live voter's way: %v", went)
}
