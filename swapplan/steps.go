package swapplan

import (
	"slices"

	"github.com/fleet-role/fleet-role/api"
)

// forwardSteps are the steps of a live voter's swap going forward, in
// their order (forward; docs/swap.md, The steps).
var forwardSteps = []string{
	api.StepStart, api.StepSnapshot, api.StepCordonIn, api.StepRunnersIn, api.StepDrainIn, api.StepPromote, api.StepJoin,
	api.StepGates, api.StepCordonOut, api.StepRunnersOut, api.StepDrainOut, api.StepStepDown, api.StepRemoveMember,
	api.StepMemberGone, api.StepCleanUp, api.StepUncordon, api.StepEnd,
}

// deadSteps are the steps of a dead voter's swap going forward, in their
// order (forwardDead): its member is removed before the candidate is
// promoted, and nothing waits on its runners or its drain.
var deadSteps = []string{
	api.StepStart, api.StepSnapshot, api.StepCordonIn, api.StepRunnersIn, api.StepDrainIn, api.StepGates,
	api.StepCordonOut, api.StepStepDown, api.StepRemoveMember, api.StepMemberGone, api.StepPromote, api.StepJoin,
	api.StepCleanUp, api.StepUncordon, api.StepEnd,
}

// Steps are the steps a swap goes through going forward, in their order:
// those of a dead voter's swap when dead (SwapRecord.Dead). A step with
// nothing to do (no runner pod to wait for, no pod to evict) is passed at
// once; a rollback or an abandon leaves the list.
func Steps(dead bool) []string {
	if dead {
		return slices.Clone(deadSteps)
	}
	return slices.Clone(forwardSteps)
}
