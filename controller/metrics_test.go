package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

func TestAVerdictSaysWhetherItsHostVotes(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, 5*time.Second)
	m.observe(swapplan.Plan{Voters: []string{"v1", "v2"}}, 0, map[string]api.Verdict{
		"v1": {State: api.VerdictFit}, "v2": {State: api.VerdictUnfit}, "s1": {State: api.VerdictPartial},
	})
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fleet_role_verdict 1 for each host's verdict; role is voter when the host's member votes, else standby.
# TYPE fleet_role_verdict gauge
fleet_role_verdict{node="s1",role="standby",state="partial"} 1
fleet_role_verdict{node="v1",role="voter",state="fit"} 1
fleet_role_verdict{node="v2",role="voter",state="unfit"} 1
`), "fleet_role_verdict"))

	// A swap under way: IN's member votes before its label says so.
	m.observe(swapplan.Plan{Voters: []string{"v1", "s1"}}, 0, map[string]api.Verdict{
		"v1": {State: api.VerdictFit}, "s1": {State: api.VerdictFit},
	})
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fleet_role_verdict 1 for each host's verdict; role is voter when the host's member votes, else standby.
# TYPE fleet_role_verdict gauge
fleet_role_verdict{node="s1",role="voter",state="fit"} 1
fleet_role_verdict{node="v1",role="voter",state="fit"} 1
`), "fleet_role_verdict"))
}

func TestTheUnfinishedDemotionsCountTheHostsWhoseNodeKeepsAnInstruction(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, 5*time.Second)
	m.observe(swapplan.Plan{Pending: []api.UnfinishedDemotion{
		{Node: "s1", Swap: "x"}, {Node: "v1", Swap: "x"}, {Node: "v9", Swap: "x", NodeGone: true},
	}}, 0, nil)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fleet_role_unfinished_demotions Hosts a swap that ended left with their demotion unfinished: their Node keeps the swap's step-down and member-gone until their agent reports the finish.
# TYPE fleet_role_unfinished_demotions gauge
fleet_role_unfinished_demotions 2
`), "fleet_role_unfinished_demotions"), "a host whose Node is gone keeps nothing, and is not counted")
	m.observe(swapplan.Plan{}, 0, nil)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fleet_role_unfinished_demotions Hosts a swap that ended left with their demotion unfinished: their Node keeps the swap's step-down and member-gone until their agent reports the finish.
# TYPE fleet_role_unfinished_demotions gauge
fleet_role_unfinished_demotions 0
`), "fleet_role_unfinished_demotions"))
}

func TestTheRetriesSpentGaugeIsOneWhileThePlanSaysSo(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, 5*time.Second)
	gauge := func(v string) string {
		return "# HELP fleet_role_remediation_retries_spent 1 while an automatic swap does not start: it would retry a remediation past [remediation] max_retries.\n" +
			"# TYPE fleet_role_remediation_retries_spent gauge\nfleet_role_remediation_retries_spent " + v + "\n"
	}
	m.observe(swapplan.Plan{RetriesSpent: true}, 0, nil)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(gauge("1")), "fleet_role_remediation_retries_spent"))
	m.observe(swapplan.Plan{}, 0, nil)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(gauge("0")), "fleet_role_remediation_retries_spent"))
}

func TestTheStepsOfASwapThatEndedAreCountedOnceEach(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, 5*time.Second)
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	r := api.SwapResult{ID: "x", Steps: []api.StepSpan{
		{Step: api.StepSnapshot, Start: t0, End: t0.Add(3 * time.Second)},
		{Step: api.StepJoin, Start: t0.Add(3 * time.Second), End: t0.Add(43 * time.Second)},
	}}
	m.ended(r)
	m.ended(r) // the same end seen again
	assert.Equal(t, 2, testutil.CollectAndCount(m.stepTook), "a series for each step")
	for step, sum := range map[string]float64{api.StepSnapshot: 3, api.StepJoin: 40} {
		var d dto.Metric
		require.NoError(t, m.stepTook.WithLabelValues(step).(prometheus.Metric).Write(&d))
		assert.Equal(t, uint64(1), d.GetHistogram().GetSampleCount(), step)
		assert.Equal(t, sum, d.GetHistogram().GetSampleSum(), step)
	}
}

func TestThePausesStartIsItsTimeWhilePausedAndZeroOnceResumed(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newMetrics(reg, 5*time.Second)
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	m.paused(&api.Pause{By: "carol", Reason: "freeze", At: at})
	assert.Equal(t, float64(at.Unix()), testutil.ToFloat64(m.pausedSince))
	m.paused(nil)
	assert.Equal(t, 0.0, testutil.ToFloat64(m.pausedSince))
}
