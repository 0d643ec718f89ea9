package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

func TestEveryPassPublishesTheUnfinishedDemotionsSoAHostClearedDropsOut(t *testing.T) {
	c := &Controller{}
	snap := swapplan.Snapshot{Now: execNow}
	st := api.Status{Pending: []string{"v7"}}
	unfinished := []api.UnfinishedDemotion{{Node: "s1", Swap: "x"}, {Node: "v9", Swap: "x", NodeGone: true}}
	c.statusChange(snap, swapplan.Plan{Action: swapplan.Action{Type: api.ActionNone}, Pending: unfinished}, nil)(&st, nil)
	assert.Equal(t, []string{"s1", "v9"}, st.Pending)
	assert.Equal(t, unfinished, st.Unfinished)
	c.statusChange(snap, swapplan.Plan{Action: swapplan.Action{Type: api.ActionClearFinished, Node: "s1", Swap: "x"},
		Pending: unfinished[1:]}, nil)(&st, nil)
	assert.Equal(t, []string{"v9"}, st.Pending)
	c.statusChange(snap, swapplan.Plan{Action: swapplan.Action{Type: api.ActionNone}}, nil)(&st, nil)
	assert.Empty(t, st.Pending)
	assert.Empty(t, st.Unfinished)
}

func TestTheDemotionUnfinishedWarningSaysWhatStaysAndWhatAnOperatorTypes(t *testing.T) {
	msg := UnfinishedMessage(api.UnfinishedDemotion{Node: "s1", Swap: "20261201-095000-v1"})
	for _, part := range []string{
		"swap 20261201-095000-v1 ended before the agent of s1 reported the finish of its demotion",
		"its step-down (fleet-role.io/request) and fleet-role.io/member-gone stay on this Node",
		"Bring the host's agent back",
		"kubectl delete node s1",
		"kubectl annotate node s1 fleet-role.io/request- fleet-role.io/member-gone- fleet-role.io/cordoned-by- && kubectl uncordon s1",
	} {
		assert.Contains(t, msg, part)
	}
}

func TestTheClearOfAFinishedDemotionIsNotNotified(t *testing.T) {
	assert.Empty(t, NotifyMessage(swapplan.Plan{Action: swapplan.Action{Type: api.ActionClearFinished, Node: "s1", Swap: "x"}}))
}
