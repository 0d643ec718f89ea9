package swapplan_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// zonedWorld is a fleet whose Nodes carry the label "zone", the domain
// of each host given.
func zonedWorld(t *testing.T, voters, standbys int, zones map[string]string) *world {
	w := newWorld(t, voters, standbys, 0)
	w.cfg.DomainLabel = "zone"
	for name, zone := range zones {
		w.node(name).Domain = zone
	}
	return w
}

func TestTheAutomaticChoiceTakesTheStandbyThatKeepsTheVotersSpreadOverAFitterOneThatCrowdsADomain(t *testing.T) {
	w := zonedWorld(t, 3, 3, map[string]string{"v1": "a", "v2": "b", "v3": "c", "s1": "a", "s2": "c", "s3": "b"})
	w.node("s1").Verdict.Score = 1 // the fittest, in v1's zone
	w.node("s2").Verdict.Score = 2 // in v3's
	w.node("s3").Verdict.Score = 3 // in v2's own
	w.node("v2").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 9, Reason: "fsync p99 40 ms"}
	plan := w.pass()
	require.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
	assert.Equal(t, "s3", plan.Swap.In, "the one that keeps a voter in each zone")
	assert.Equal(t, "v2 is unfit (fsync p99 40 ms); s3 is the fittest eligible standby that keeps the voters spread across zone", plan.Decision.Reason)

	// Between two that leave the largest domain as large, the one that
	// leaves the voters in more domains.
	w = zonedWorld(t, 5, 2, map[string]string{"v1": "a", "v2": "a", "v3": "b", "v4": "c", "v5": "d", "s1": "c", "s2": "e"})
	w.node("s1").Verdict.Score = 1
	w.node("s2").Verdict.Score = 2
	w.node("v3").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 9, Reason: "fsync p99 40 ms"}
	plan = w.pass()
	require.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
	assert.Equal(t, "s2", plan.Swap.In, "voters in a, c, d and e rather than a, c and d")
}

func TestAmongStandbysThatAllCrowdADomainTheAutomaticChoiceTakesTheFittestAndSaysSo(t *testing.T) {
	w := zonedWorld(t, 3, 2, map[string]string{"v1": "a", "v2": "b", "v3": "c", "s1": "a", "s2": "c"})
	w.node("s1").Verdict.Score = 2
	w.node("s2").Verdict.Score = 1
	w.node("v2").Verdict = api.Verdict{State: api.VerdictUnfit, Score: 9, Reason: "fsync p99 40 ms"}
	plan := w.pass()
	require.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
	assert.Equal(t, "s2", plan.Swap.In)
	assert.Contains(t, plan.Decision.Reason, "; s2 is the fittest eligible standby that keeps the voters spread across "+w.cfg.DomainLabel+
		` as best it can (it would put 2 of the 3 voters in zone "c", a majority: losing that domain would lose quorum, as with every eligible standby)`)
}

func TestAManualSwapThatPutsAMajorityOfTheVotersInOneDomainIsRefusedUnlessItOverridesDomains(t *testing.T) {
	w := zonedWorld(t, 3, 2, map[string]string{"v1": "a", "v2": "b", "v3": "c", "s1": "a", "s2": "b"})
	const why = `it would put 2 of the 3 voters in zone "a", a majority: losing that domain would lose quorum`
	assert.EqualError(t, swapplan.CheckRequest(w.snapshot(), "v2", "s1", nil), why+"; swap --override domains to do it anyway")
	assert.NoError(t, swapplan.CheckRequest(w.snapshot(), "v2", "s1", []string{api.OverrideDomains}))
	assert.NoError(t, swapplan.CheckRequest(w.snapshot(), "v1", "s1", nil), "a voter for one of its own domain crowds nothing")
	assert.NoError(t, swapplan.CheckRequest(w.snapshot(), "v2", "s2", nil))

	w5 := zonedWorld(t, 5, 2, map[string]string{"v1": "a", "v2": "b", "v3": "b", "v4": "c", "v5": "d", "s1": "c", "s2": "b"})
	assert.NoError(t, swapplan.CheckRequest(w5.snapshot(), "v1", "s1", nil), "2 of 5 voters in c: no majority")
	assert.EqualError(t, swapplan.CheckRequest(w5.snapshot(), "v1", "s2", nil),
		`it would put 3 of the 5 voters in zone "b", a majority: losing that domain would lose quorum; swap --override domains to do it anyway`)
	crowded := zonedWorld(t, 3, 1, map[string]string{"v1": "a", "v2": "a", "v3": "b", "s1": "a"})
	assert.NoError(t, swapplan.CheckRequest(crowded.snapshot(), "v1", "s1", nil), "a domain's majority kept, not made")

	w.requestSwap("v2", "s1")
	plan := w.pass()
	assert.Equal(t, api.ActionNone, plan.Action.Type)
	assert.Equal(t, "the manual request to swap v2 for s1 is refused: "+why+"; or swap --override domains", plan.Reason)
	w.request.Overrides = []string{api.OverridePause, api.OverrideHolds}
	plan = w.pass()
	assert.Equal(t, "the manual request to swap v2 for s1 is refused: "+why+"; or swap --override domains", plan.Reason, "the other overrides pass nothing here")
	w.request.Overrides = []string{api.OverrideDomains}
	plan = w.pass()
	require.Equal(t, api.ActionStart, plan.Action.Type, plan.Reason)
	assert.Equal(t, api.ResultCompleted, w.run(200).Result)
}

func TestTheStatusTellsTheDomainsTheVotersSpanAndHowManyQuorumSurvivesLosing(t *testing.T) {
	for _, tc := range []struct {
		name   string
		voters int
		zones  map[string]string
		want   api.Domains
	}{
		{"one voter a zone", 3, map[string]string{"v1": "a", "v2": "b", "v3": "c"},
			api.Domains{Label: "zone", Voters: map[string]int{"a": 1, "b": 1, "c": 1}, Span: 3, Survives: 1}},
		{"two zones of five", 5, map[string]string{"v1": "a", "v2": "a", "v3": "b", "v4": "b", "v5": "c"},
			api.Domains{Label: "zone", Voters: map[string]int{"a": 2, "b": 2, "c": 1}, Span: 3, Survives: 1}},
		{"five in five", 5, map[string]string{"v1": "a", "v2": "b", "v3": "c", "v4": "d", "v5": "e"},
			api.Domains{Label: "zone", Voters: map[string]int{"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}, Span: 5, Survives: 2}},
		{"a majority in one", 3, map[string]string{"v1": "a", "v2": "a", "v3": "b"},
			api.Domains{Label: "zone", Voters: map[string]int{"a": 2, "b": 1}, Span: 2, Survives: 0}},
		{"one voter unlabelled", 3, map[string]string{"v1": "a", "v2": "b"},
			api.Domains{Label: "zone", Unlabelled: []string{"v3"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := zonedWorld(t, tc.voters, 0, tc.zones).pass()
			require.NotNil(t, plan.Domains)
			assert.Equal(t, tc.want, *plan.Domains)
		})
	}
	w := newWorld(t, 3, 0, 0)
	assert.Nil(t, w.pass().Domains, "no label, no domains")
}
