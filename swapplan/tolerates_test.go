package swapplan_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// The failures etcd survives now: three voters survive one, a slow one
// among them too (it votes), one that does not answer its agent none; a
// swap's outgoing voter counts down from its step-down until its member
// is removed, which gives the failure back.
func TestThePlanSaysHowManyMoreFailuresEtcdSurvivesCountingAStoppedUnremovedMemberDown(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	assert.Equal(t, 1, w.pass().Tolerates, "3 voters of 3 up")

	w.Hosts["v3"].UnhealthyUntil = w.now.Add(time.Hour)
	w.pass()
	assert.Equal(t, 1, w.pass().Tolerates, "a voter only slow votes")
	w.Hosts["v3"].UnhealthyUntil = w.now

	answers := w.unanswering("v3")
	assert.Equal(t, 0, w.pass().Tolerates, "a voter that does not answer does not vote")
	answers()
	assert.Equal(t, 1, w.pass().Tolerates)

	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionStepDown, "v1"))
	plan := w.pass()
	require.Equal(t, api.StepRemoveMember, plan.Step, plan.Reason)
	assert.Equal(t, 0, plan.Tolerates, "4 members, the outgoing one stopped: 3 up, a majority is 3")
	w.runUntil(50, func(p swapplan.Plan) bool { return p.Step == api.StepMemberGone })
	w.pass()
	assert.Equal(t, 1, w.pass().Tolerates, "its member removed: 3 of 3")
	assert.Equal(t, api.ResultCompleted, w.run(100).Result)
	assert.Equal(t, 1, w.pass().Tolerates)
}

// A voter asked to step down counts down at once, stopping, though its
// last sample still says it runs: the alert on no failure to spare must
// not wait for its Node to turn NotReady.
func TestAVoterAskedToStepDownCountsDownAtOnce(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["v1"].IgnoreStepDown = true
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionStepDown, "v1"))
	plan := w.pass()
	require.True(t, w.node("v1").Ready)
	assert.Equal(t, 0, plan.Tolerates, "4 members, the one asked to step down counted down: 3 up, a majority is 3")
}

// With no voter's sample fresh, the voting members are the voter Nodes,
// each down: three voters, none up, a majority of two short.
func TestWithNoFreshMemberListTheVotersAreTheMembersEachDown(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	for _, v := range []string{"v1", "v2", "v3"} {
		w.Hosts[v].SilentUntil = w.now.Add(time.Hour)
	}
	for range 6 { // past the freshness of the last samples (2 periods of 10 s)
		w.pass()
	}
	assert.Equal(t, -2, w.pass().Tolerates)
}

// A removal that goes on while a remaining voter does not vote names it
// in its reason: the cluster then has no failure to spare.
func TestARemovalAskedWithARemainingVoterDownNamesIt(t *testing.T) {
	w := newWorld(t, 5, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(200, acting(api.ActionStepDown, "v1"))
	w.unanswering("v5")
	plan := w.runUntil(20, acting(api.ActionRemoveMember, "v1"))
	assert.Contains(t, plan.Reason, "4 of 5 remaining voter(s) vote, a majority of the 6 members with it (not voting: v5's probe says unhealthy: etcd did not answer within 2s)")
}
