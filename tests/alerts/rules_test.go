package alerts

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rulesFile is the file the chart wraps in its PrometheusRule.
var rulesFile = filepath.Join("..", "..", "packaging", "helm", "fleet-role", "files", "prometheus-rules.yaml")

// evalInterval is how often the rules are evaluated in a test, and the
// load interval of the series.
const evalInterval = time.Minute

// firing loads series (lines of promqltest's load syntax, one sample a
// minute from time 0), evaluates the rules file every minute up to the
// last of at, and returns, at each of those times, the alerts named
// alert that fire: their labels, sorted.
func firing(t *testing.T, series, alert string, at ...time.Duration) map[time.Duration][]string {
	t.Helper()
	// A blank line ends a load block: the series' leading one goes.
	suite, err := promqltest.NewLazyLoader("load 1m\n"+strings.TrimLeft(series, "\n"), promqltest.LazyLoaderOpts{EnableAtModifier: true, EnableNegativeOffset: true})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, suite.Close()) })

	m := rules.NewManager(&rules.ManagerOptions{
		QueryFunc:    rules.EngineQueryFunc(suite.QueryEngine(), suite.Storage()),
		AppendableV2: suite.Storage(),
		Context:      context.Background(),
		NotifyFunc:   func(context.Context, string, ...*rules.Alert) {},
		Logger:       promslog.NewNopLogger(),
	})
	groups, errs := m.LoadGroups(evalInterval, labels.EmptyLabels(), "", nil, false, rulesFile)
	require.Empty(t, errs)
	require.NotEmpty(t, groups)
	named := false
	for _, g := range groups {
		for _, r := range g.Rules() {
			if ar, ok := r.(*rules.AlertingRule); ok {
				ar.SetRestored(true) // as promtool: no restore from an earlier run
				named = named || ar.Name() == alert
			}
		}
	}
	require.True(t, named, "the rules file has no alert %s", alert)

	slices.Sort(at)
	got := map[time.Duration][]string{}
	start := time.Unix(0, 0).UTC()
	for ts := time.Duration(0); ts <= at[len(at)-1]; ts += evalInterval {
		suite.WithSamplesTill(start.Add(ts), func(err error) {
			require.NoError(t, err)
			for _, g := range groups {
				g.Eval(suite.Context(), start.Add(ts))
				for _, r := range g.Rules() {
					require.NoError(t, r.LastError(), "rule %s at %v", r.Name(), ts)
				}
			}
		})
		if !slices.Contains(at, ts) {
			continue
		}
		got[ts] = []string{}
		for _, g := range groups {
			for _, r := range g.Rules() {
				ar, ok := r.(*rules.AlertingRule)
				if !ok || ar.Name() != alert {
					continue
				}
				for _, a := range ar.ActiveAlerts() {
					if a.State == rules.StateFiring {
						got[ts] = append(got[ts], a.Labels.String())
					}
				}
			}
		}
		slices.Sort(got[ts])
	}

	// Every series given was loaded: a case whose alert stays quiet must
	// be quiet over its series, not over nothing.
	q, err := suite.Queryable().Querier(math.MinInt64, math.MaxInt64)
	require.NoError(t, err)
	defer q.Close()
	set := q.Select(suite.Context(), false, nil,
		labels.MustNewMatcher(labels.MatchRegexp, model.MetricNameLabel, ".+"),
		labels.MustNewMatcher(labels.MatchNotRegexp, model.MetricNameLabel, "ALERTS.*"))
	loaded := 0
	for set.Next() {
		loaded++
	}
	require.NoError(t, set.Err())
	require.Equal(t, strings.Count(strings.TrimSpace(series), "\n")+1, loaded, "series loaded")
	return got
}

// tested lists the alerts a case below fires, and those a case checks
// stay quiet throughout: every alert of the file must be in both.
var tested = struct{ fires, quiet map[string]bool }{map[string]bool{}, map[string]bool{}}

func expect(t *testing.T, alert string, got map[time.Duration][]string, want map[time.Duration][]string) {
	t.Helper()
	assert.Equal(t, want, got)
	quiet := true
	for _, alerts := range want {
		if len(alerts) > 0 {
			tested.fires[alert] = true
			quiet = false
		}
	}
	if quiet {
		tested.quiet[alert] = true
	}
}

const ctl = `job="fleet-role-controller", instance="10.0.0.5:9090"`

// cases each load series, evaluate the rules over them and check one
// alert, firing or quiet, at chosen times.
var cases = []struct {
	name string
	run  func(t *testing.T)
}{
	{"ASwapPastItsStepsBoundFiresAfterTheBoundAndAMinute", func(t *testing.T) {
		// The gates held 25 minutes: over 20m from minute 21, firing a minute later.
		series := `
  fleet_role_swap_step{` + ctl + `, step="gates"} 1x30
  fleet_role_swap_step_seconds{` + ctl + `} 0+60x30
`
		want := `{alertname="FleetRoleSwapStuck", instance="10.0.0.5:9090", job="fleet-role-controller", severity="warning", step="gates"}`
		expect(t, "FleetRoleSwapStuck", firing(t, series, "FleetRoleSwapStuck", 20*time.Minute, 21*time.Minute, 22*time.Minute, 30*time.Minute),
			map[time.Duration][]string{20 * time.Minute: {}, 21 * time.Minute: {}, 22 * time.Minute: {want}, 30 * time.Minute: {want}})
	}},
	{"RunnersAreGivenTheirHourBeforeTheSwapIsStuck", func(t *testing.T) {
		series := `
  fleet_role_swap_step{` + ctl + `, step="runners-in"} 1x70
  fleet_role_swap_step_seconds{` + ctl + `} 0+60x70
`
		want := `{alertname="FleetRoleSwapStuck", instance="10.0.0.5:9090", job="fleet-role-controller", severity="warning", step="runners-in"}`
		expect(t, "FleetRoleSwapStuck", firing(t, series, "FleetRoleSwapStuck", 30*time.Minute, 65*time.Minute, 67*time.Minute),
			map[time.Duration][]string{30 * time.Minute: {}, 65 * time.Minute: {}, 67 * time.Minute: {want}})
	}},
	{"SwapStepsThatMoveOnAndNoSwapAtAllAreNotStuck", func(t *testing.T) {
		// A swap moving a step every 10 minutes for an hour, then none under
		// way for long: step_seconds counts from each step's start.
		series := `
  fleet_role_swap_step{` + ctl + `, step="snapshot"} 1x10 _x50
  fleet_role_swap_step{` + ctl + `, step="drain-in"} _x10 1x10 _x40
  fleet_role_swap_step{` + ctl + `, step="join"} _x20 1x10 _x30
  fleet_role_swap_step{` + ctl + `, step="none"} _x30 1x30
  fleet_role_swap_step_seconds{` + ctl + `} 0+60x9 0+60x9 0+60x9 0+60x9 0x20
`
		expect(t, "FleetRoleSwapStuck", firing(t, series, "FleetRoleSwapStuck", 9*time.Minute, 25*time.Minute, 59*time.Minute),
			map[time.Duration][]string{9 * time.Minute: {}, 25 * time.Minute: {}, 59 * time.Minute: {}})
	}},
	{"AStuckSwapFiresACriticalAlertAfterAMinute", func(t *testing.T) {
		series := `
  fleet_role_swap_step{` + ctl + `, step="remove-by-voter"} 1x4 _x10
  fleet_role_swap_step{` + ctl + `, step="stuck"} _x5 1x10
  fleet_role_swap_step_seconds{` + ctl + `} 0+60x4 0+60x10
`
		want := `{alertname="FleetRoleSwapStuck", instance="10.0.0.5:9090", job="fleet-role-controller", severity="critical", step="stuck"}`
		expect(t, "FleetRoleSwapStuck", firing(t, series, "FleetRoleSwapStuck", 4*time.Minute, 5*time.Minute, 6*time.Minute),
			map[time.Duration][]string{4 * time.Minute: {}, 5 * time.Minute: {}, 6 * time.Minute: {want}})
	}},
	{"AnUnfitVoterWithNoFitStandbyFiresAfterTenMinutes", func(t *testing.T) {
		// v2 turns unfit at minute 5; the only standby's window is partial.
		series := `
  fleet_role_verdict{` + ctl + `, node="v1", role="voter", state="fit"} 1x30
  fleet_role_verdict{` + ctl + `, node="v2", role="voter", state="fit"} 1x4 _x26
  fleet_role_verdict{` + ctl + `, node="v2", role="voter", state="unfit"} _x5 1x25
  fleet_role_verdict{` + ctl + `, node="s1", role="standby", state="partial"} 1x30
`
		want := `{alertname="FleetRoleVoterUnfitNoStandby", instance="10.0.0.5:9090", job="fleet-role-controller", node="v2", role="voter", severity="warning", state="unfit"}`
		expect(t, "FleetRoleVoterUnfitNoStandby", firing(t, series, "FleetRoleVoterUnfitNoStandby", 4*time.Minute, 14*time.Minute, 15*time.Minute, 30*time.Minute),
			map[time.Duration][]string{4 * time.Minute: {}, 14 * time.Minute: {}, 15 * time.Minute: {want}, 30 * time.Minute: {want}})
	}},
	{"AnUnfitVoterWithAFitStandbyIsLeftToTheSwap", func(t *testing.T) {
		// A fit standby: the automatic decision swaps it in, no alert. An
		// unfit standby alone is no voter's trouble either.
		series := `
  fleet_role_verdict{` + ctl + `, node="v2", role="voter", state="unfit"} 1x30
  fleet_role_verdict{` + ctl + `, node="s1", role="standby", state="fit"} 1x30
  fleet_role_verdict{` + ctl + `, node="s2", role="standby", state="unfit"} 1x30
`
		expect(t, "FleetRoleVoterUnfitNoStandby", firing(t, series, "FleetRoleVoterUnfitNoStandby", 15*time.Minute, 30*time.Minute),
			map[time.Duration][]string{15 * time.Minute: {}, 30 * time.Minute: {}})
	}},
	{"ADryRunThatWouldSwapForHalfAnHourFires", func(t *testing.T) {
		series := `
  fleet_role_dry_run_would_swap{` + ctl + `} 0x9 1x40
`
		want := `{alertname="FleetRoleDryRunWouldSwap", instance="10.0.0.5:9090", job="fleet-role-controller", severity="info"}`
		expect(t, "FleetRoleDryRunWouldSwap", firing(t, series, "FleetRoleDryRunWouldSwap", 9*time.Minute, 39*time.Minute, 40*time.Minute),
			map[time.Duration][]string{9 * time.Minute: {}, 39 * time.Minute: {}, 40 * time.Minute: {want}})
	}},
	{"ADryRunThatWouldSwapOnlyBrieflyIsQuiet", func(t *testing.T) {
		series := `
  fleet_role_dry_run_would_swap{` + ctl + `} 1x20 0x5 1x20
`
		expect(t, "FleetRoleDryRunWouldSwap", firing(t, series, "FleetRoleDryRunWouldSwap", 20*time.Minute, 45*time.Minute),
			map[time.Duration][]string{20 * time.Minute: {}, 45 * time.Minute: {}})
	}},
	{"NoReplicaLeadingFiresAfterFiveMinutes", func(t *testing.T) {
		// Two replicas; the leader stops leading at minute 10.
		series := `
  fleet_role_leader{job="fleet-role-controller", instance="a"} 1x9 0x20
  fleet_role_leader{job="fleet-role-controller", instance="b"} 0x30
`
		want := `{alertname="FleetRoleNoLeader", severity="critical"}`
		expect(t, "FleetRoleNoLeader", firing(t, series, "FleetRoleNoLeader", 9*time.Minute, 14*time.Minute, 15*time.Minute),
			map[time.Duration][]string{9 * time.Minute: {}, 14 * time.Minute: {}, 15 * time.Minute: {want}})
	}},
	{"NoControllerScrapedAtAllIsNoLeaderToo", func(t *testing.T) {
		series := `
  up{job="fleet-role-controller", instance="a"} 0x10
`
		want := `{alertname="FleetRoleNoLeader", severity="critical"}`
		expect(t, "FleetRoleNoLeader", firing(t, series, "FleetRoleNoLeader", 4*time.Minute, 5*time.Minute),
			map[time.Duration][]string{4 * time.Minute: {}, 5 * time.Minute: {want}})
	}},
	{"ALeaderHandedOverIsNoAlert", func(t *testing.T) {
		// b takes over within a minute of a's leaving.
		series := `
  fleet_role_leader{job="fleet-role-controller", instance="a"} 1x9 0x20
  fleet_role_leader{job="fleet-role-controller", instance="b"} 0x10 1x20
`
		expect(t, "FleetRoleNoLeader", firing(t, series, "FleetRoleNoLeader", 10*time.Minute, 30*time.Minute),
			map[time.Duration][]string{10 * time.Minute: {}, 30 * time.Minute: {}})
	}},
	{"AnActionFailingEveryPassFiresPerActionAndKind", func(t *testing.T) {
		// cordon-out fails six times a minute from minute 5 (a pass every 10s);
		// drain-in failed once, long ago.
		series := `
  fleet_role_action_failures_total{` + ctl + `, action="cordon-out", kind="conflict"} 0x4 6+6x40
  fleet_role_action_failures_total{` + ctl + `, action="drain-in", kind="timeout"} 0 1x40
`
		want := `{action="cordon-out", alertname="FleetRoleActionsFailing", kind="conflict", severity="warning"}`
		expect(t, "FleetRoleActionsFailing", firing(t, series, "FleetRoleActionsFailing", 19*time.Minute, 20*time.Minute, 40*time.Minute),
			map[time.Duration][]string{19 * time.Minute: {}, 20 * time.Minute: {want}, 40 * time.Minute: {want}})
	}},
	{"AFewFailuresRepeatedWithSuccessAreQuiet", func(t *testing.T) {
		// One failure every ten minutes: some five-minute windows see none.
		series := `
  fleet_role_action_failures_total{` + ctl + `, action="cordon-out", kind="conflict"} 0 0 1 1 1 1 1 1 1 1 1 1 2 2 2 2 2 2 2 2 2 2 3 3 3 3 3 3 3 3 3 3 4 4 4 4 4 4 4 4 4
`
		expect(t, "FleetRoleActionsFailing", firing(t, series, "FleetRoleActionsFailing", 20*time.Minute, 40*time.Minute),
			map[time.Duration][]string{20 * time.Minute: {}, 40 * time.Minute: {}})
	}},
	{"TwoVotersLeaveNoMarginAndFireAfterFiveMinutes", func(t *testing.T) {
		// A voter lost at minute 10; the stand-by replica never counts.
		series := `
  fleet_role_voters{job="fleet-role-controller", instance="a"} 3x9 2x20
  fleet_role_leader{job="fleet-role-controller", instance="a"} 1x30
  fleet_role_voters{job="fleet-role-controller", instance="b"} 0x30
  fleet_role_leader{job="fleet-role-controller", instance="b"} 0x30
`
		want := `{alertname="FleetRoleQuorumMarginZero", instance="a", job="fleet-role-controller", severity="critical"}`
		expect(t, "FleetRoleQuorumMarginZero", firing(t, series, "FleetRoleQuorumMarginZero", 9*time.Minute, 14*time.Minute, 15*time.Minute),
			map[time.Duration][]string{9 * time.Minute: {}, 14 * time.Minute: {}, 15 * time.Minute: {want}})
	}},
	{"ThreeOrMoreVotersKeepAMargin", func(t *testing.T) {
		// 3, then 4 while a swap's candidate joins, then 3 again.
		series := `
  fleet_role_voters{job="fleet-role-controller", instance="a"} 3x9 4x10 3x10
  fleet_role_leader{job="fleet-role-controller", instance="a"} 1x30
`
		expect(t, "FleetRoleQuorumMarginZero", firing(t, series, "FleetRoleQuorumMarginZero", 15*time.Minute, 30*time.Minute),
			map[time.Duration][]string{15 * time.Minute: {}, 30 * time.Minute: {}})
	}},
	{"NoFailureToSpareFiresAfterAMinuteAtZero", func(t *testing.T) {
		// One failure to spare, then none from minute 9 on (a removal
		// held); the stand-by replica never counts.
		series := `
  fleet_role_failures_tolerated{job="fleet-role-controller", instance="a"} 1x9 0x20
  fleet_role_leader{job="fleet-role-controller", instance="a"} 1x30
  fleet_role_failures_tolerated{job="fleet-role-controller", instance="b"} 0x30
  fleet_role_leader{job="fleet-role-controller", instance="b"} 0x30
`
		want := `{alertname="FleetRoleNoFailureToSpare", instance="a", job="fleet-role-controller", severity="critical"}`
		expect(t, "FleetRoleNoFailureToSpare", firing(t, series, "FleetRoleNoFailureToSpare", 9*time.Minute, 10*time.Minute, 11*time.Minute),
			map[time.Duration][]string{9 * time.Minute: {}, 10 * time.Minute: {}, 11 * time.Minute: {want}})
	}},
	{"OneFailureToSpareOrMoreAndAStopOfLessThanAMinuteAreQuiet", func(t *testing.T) {
		// None to spare for one sample at minute 9 (a swap's outgoing
		// voter stopped until its removal), then one, two, one.
		series := `
  fleet_role_failures_tolerated{job="fleet-role-controller", instance="a"} 1x8 0 1 2x10 1x9
  fleet_role_leader{job="fleet-role-controller", instance="a"} 1x30
`
		expect(t, "FleetRoleNoFailureToSpare", firing(t, series, "FleetRoleNoFailureToSpare", 9*time.Minute, 10*time.Minute, 11*time.Minute, 30*time.Minute),
			map[time.Duration][]string{9 * time.Minute: {}, 10 * time.Minute: {}, 11 * time.Minute: {}, 30 * time.Minute: {}})
	}},
	{"ASilentAgentFiresAfterFiveMinutes", func(t *testing.T) {
		series := `
  fleet_role_verdict{` + ctl + `, node="v1", role="voter", state="fit"} 1x9 _x20
  fleet_role_verdict{` + ctl + `, node="v1", role="voter", state="silent"} _x10 1x20
  fleet_role_verdict{` + ctl + `, node="s1", role="standby", state="fit"} 1x30
`
		want := `{alertname="FleetRoleAgentSilent", instance="10.0.0.5:9090", job="fleet-role-controller", node="v1", role="voter", severity="warning", state="silent"}`
		expect(t, "FleetRoleAgentSilent", firing(t, series, "FleetRoleAgentSilent", 14*time.Minute, 15*time.Minute),
			map[time.Duration][]string{14 * time.Minute: {}, 15 * time.Minute: {want}})
	}},
	{"AnAgentSilentOnlyBrieflyIsQuiet", func(t *testing.T) {
		series := `
  fleet_role_verdict{` + ctl + `, node="v1", role="voter", state="fit"} 1x9 stale _x1 1x17
  fleet_role_verdict{` + ctl + `, node="v1", role="voter", state="silent"} _x10 1x1 stale
`
		// Silent at minutes 10 and 11, gone at 12 (a stale marker, as a
		// scrape writes for a series that went).
		expect(t, "FleetRoleAgentSilent", firing(t, series, "FleetRoleAgentSilent", 11*time.Minute, 15*time.Minute, 20*time.Minute),
			map[time.Duration][]string{11 * time.Minute: {}, 15 * time.Minute: {}, 20 * time.Minute: {}})
	}},
	{"AHostKeepingAnUnfinishedDemotionFiresAfterAQuarterOfAnHour", func(t *testing.T) {
		// A swap ends at minute 5 with s1's demotion unfinished; the
		// stand-by replica counts nothing.
		series := `
  fleet_role_unfinished_demotions{job="fleet-role-controller", instance="a"} 0x4 1x30
  fleet_role_unfinished_demotions{job="fleet-role-controller", instance="b"} 0x35
`
		want := `{alertname="FleetRoleDemotionUnfinished", instance="a", job="fleet-role-controller", severity="warning"}`
		expect(t, "FleetRoleDemotionUnfinished", firing(t, series, "FleetRoleDemotionUnfinished", 19*time.Minute, 20*time.Minute, 35*time.Minute),
			map[time.Duration][]string{19 * time.Minute: {}, 20 * time.Minute: {want}, 35 * time.Minute: {want}})
	}},
	{"AHostWhoseAgentFinishesWithinAQuarterOfAnHourIsQuiet", func(t *testing.T) {
		// Its agent back at minute 15, the finish reported and cleared.
		series := `
  fleet_role_unfinished_demotions{job="fleet-role-controller", instance="a"} 0x4 1x10 0x20
`
		expect(t, "FleetRoleDemotionUnfinished", firing(t, series, "FleetRoleDemotionUnfinished", 15*time.Minute, 20*time.Minute, 35*time.Minute),
			map[time.Duration][]string{15 * time.Minute: {}, 20 * time.Minute: {}, 35 * time.Minute: {}})
	}},
	{"ARemediationPastItsRetriesFiresAfterFiveMinutes", func(t *testing.T) {
		// The leading replica stops at minute 5; the other says nothing.
		series := `
  fleet_role_remediation_retries_spent{job="fleet-role-controller", instance="a"} 0x4 1x30
  fleet_role_remediation_retries_spent{job="fleet-role-controller", instance="b"} 0x35
`
		want := `{alertname="FleetRoleRemediationRetriesSpent", instance="a", job="fleet-role-controller", severity="warning"}`
		expect(t, "FleetRoleRemediationRetriesSpent", firing(t, series, "FleetRoleRemediationRetriesSpent", 9*time.Minute, 10*time.Minute, 30*time.Minute),
			map[time.Duration][]string{9 * time.Minute: {}, 10 * time.Minute: {want}, 30 * time.Minute: {want}})
	}},
	{"ASwapOverItsWriteGapBudgetFiresForTheHourAfter", func(t *testing.T) {
		// A swap over budget ends at minute 5, one within it at minute
		// 90 (the counter does not move); the controller restarts at
		// minute 100 (the counter starts again from 0).
		series := `
  fleet_role_swaps_over_write_gap_budget_total{job="fleet-role-controller", instance="a"} 0x4 1x94 0x30
`
		want := `{alertname="FleetRoleSwapWriteGapOverBudget", instance="a", job="fleet-role-controller", severity="warning"}`
		expect(t, "FleetRoleSwapWriteGapOverBudget", firing(t, series, "FleetRoleSwapWriteGapOverBudget", 4*time.Minute, 5*time.Minute, 60*time.Minute, 66*time.Minute, 95*time.Minute, 110*time.Minute),
			map[time.Duration][]string{4 * time.Minute: {}, 5 * time.Minute: {want}, 60 * time.Minute: {want}, 66 * time.Minute: {}, 95 * time.Minute: {}, 110 * time.Minute: {}})
	}},
	{"ADeadVoterFiresAtOnceFromTheLeadingReplicaAndClearsWhenItIsBack", func(t *testing.T) {
		// The leader a sees v2 dead from minute 5 to 20; b, standing by,
		// counts nothing and leads nothing.
		series := `
  fleet_role_dead_voters{job="fleet-role-controller", instance="a"} 0x4 1x15 0x10
  fleet_role_leader{job="fleet-role-controller", instance="a"} 1x30
  fleet_role_dead_voters{job="fleet-role-controller", instance="b"} 0x30
  fleet_role_leader{job="fleet-role-controller", instance="b"} 0x30
`
		want := `{alertname="FleetRoleVoterDead", job="fleet-role-controller", severity="critical"}`
		expect(t, "FleetRoleVoterDead", firing(t, series, "FleetRoleVoterDead", 4*time.Minute, 5*time.Minute, 20*time.Minute, 21*time.Minute),
			map[time.Duration][]string{4 * time.Minute: {}, 5 * time.Minute: {want}, 20 * time.Minute: {want}, 21 * time.Minute: {}})
	}},
	{"ADeadVoterSeenOnlyByAReplicaThatDoesNotLeadIsQuiet", func(t *testing.T) {
		series := `
  fleet_role_dead_voters{job="fleet-role-controller", instance="b"} 1x30
  fleet_role_leader{job="fleet-role-controller", instance="b"} 0x30
`
		expect(t, "FleetRoleVoterDead", firing(t, series, "FleetRoleVoterDead", 5*time.Minute, 20*time.Minute),
			map[time.Duration][]string{5 * time.Minute: {}, 20 * time.Minute: {}})
	}},
	{"SwapsWithinTheirWriteGapBudgetAreQuiet", func(t *testing.T) {
		// Swaps end at minutes 5 and 40 within budget: the counter is
		// there, at 0, on both replicas.
		series := `
  fleet_role_swaps_over_write_gap_budget_total{job="fleet-role-controller", instance="a"} 0x60
  fleet_role_swaps_over_write_gap_budget_total{job="fleet-role-controller", instance="b"} 0x60
`
		expect(t, "FleetRoleSwapWriteGapOverBudget", firing(t, series, "FleetRoleSwapWriteGapOverBudget", 5*time.Minute, 40*time.Minute, 60*time.Minute),
			map[time.Duration][]string{5 * time.Minute: {}, 40 * time.Minute: {}, 60 * time.Minute: {}})
	}},
	{"ARemediationWhoseRetriesAreSpentOnlyBrieflyIsQuiet", func(t *testing.T) {
		// The minimum healthy period runs out at minute 8.
		series := `
  fleet_role_remediation_retries_spent{job="fleet-role-controller", instance="a"} 0x4 1x3 0x20
`
		expect(t, "FleetRoleRemediationRetriesSpent", firing(t, series, "FleetRoleRemediationRetriesSpent", 7*time.Minute, 10*time.Minute, 20*time.Minute),
			map[time.Duration][]string{7 * time.Minute: {}, 10 * time.Minute: {}, 20 * time.Minute: {}})
	}},
	{"AHoldUnreadableForTenMinutesFiresFromTheLeadingReplicaByHold", func(t *testing.T) {
		// Prometheus stops answering at minute 5; b, standing by, reads
		// nothing.
		series := `
  fleet_role_hold_unreadable{job="fleet-role-controller", instance="a", by="prometheus"} 0x4 1x20
  fleet_role_hold_unreadable{job="fleet-role-controller", instance="a", by="kured"} 0x25
  fleet_role_leader{job="fleet-role-controller", instance="a"} 1x25
  fleet_role_hold_unreadable{job="fleet-role-controller", instance="b", by="prometheus"} 1x25
  fleet_role_leader{job="fleet-role-controller", instance="b"} 0x25
`
		want := `{alertname="FleetRoleHoldUnreadable", by="prometheus", instance="a", job="fleet-role-controller", severity="warning"}`
		expect(t, "FleetRoleHoldUnreadable", firing(t, series, "FleetRoleHoldUnreadable", 14*time.Minute, 15*time.Minute, 25*time.Minute),
			map[time.Duration][]string{14 * time.Minute: {}, 15 * time.Minute: {want}, 25 * time.Minute: {want}})
	}},
	{"AHoldUnreadableOnlyBrieflyIsQuiet", func(t *testing.T) {
		// Prometheus restarted: five minutes unreadable, then read again.
		series := `
  fleet_role_hold_unreadable{job="fleet-role-controller", instance="a", by="prometheus"} 0x4 1x5 0x20
  fleet_role_leader{job="fleet-role-controller", instance="a"} 1x30
`
		expect(t, "FleetRoleHoldUnreadable", firing(t, series, "FleetRoleHoldUnreadable", 10*time.Minute, 15*time.Minute, 30*time.Minute),
			map[time.Duration][]string{10 * time.Minute: {}, 15 * time.Minute: {}, 30 * time.Minute: {}})
	}},
	{"APauseOlderThanADayFiresFromTheLeadingReplicaUntilResumed", func(t *testing.T) {
		// Paused at t = 600 s (minute 10), resumed at minute 1500; b,
		// standing by, shows the same pause but does not lead.
		series := `
  fleet_role_paused_since_timestamp_seconds{job="fleet-role-controller", instance="a"} 0x9 600x1489 0x10
  fleet_role_leader{job="fleet-role-controller", instance="a"} 1x1510
  fleet_role_paused_since_timestamp_seconds{job="fleet-role-controller", instance="b"} 0x9 600x1500
  fleet_role_leader{job="fleet-role-controller", instance="b"} 0x1510
`
		want := `{alertname="FleetRolePausedLong", instance="a", job="fleet-role-controller", severity="warning"}`
		expect(t, "FleetRolePausedLong", firing(t, series, "FleetRolePausedLong", 1450*time.Minute, 1451*time.Minute, 1499*time.Minute, 1500*time.Minute),
			map[time.Duration][]string{1450 * time.Minute: {}, 1451 * time.Minute: {want}, 1499 * time.Minute: {want}, 1500 * time.Minute: {}})
	}},
	{"NoPauseAndAPauseOfHoursAreQuiet", func(t *testing.T) {
		// Not paused (0) for a day, then paused at minute 1440 for hours.
		series := `
  fleet_role_paused_since_timestamp_seconds{job="fleet-role-controller", instance="a"} 0x1439 86400x300
  fleet_role_leader{job="fleet-role-controller", instance="a"} 1x1740
`
		expect(t, "FleetRolePausedLong", firing(t, series, "FleetRolePausedLong", 60*time.Minute, 1439*time.Minute, 1740*time.Minute),
			map[time.Duration][]string{60 * time.Minute: {}, 1439 * time.Minute: {}, 1740 * time.Minute: {}})
	}},
	{"AHoldInForceForSixHoursFiresByHoldFromTheLeadingReplica", func(t *testing.T) {
		// An alert has held since t = 300 s (minute 5); kured's lock held
		// briefly at minute 100; b, standing by, reads nothing.
		series := `
  fleet_role_start_held_since_timestamp_seconds{job="fleet-role-controller", instance="a", by="prometheus"} _x5 300x400
  fleet_role_start_held_since_timestamp_seconds{job="fleet-role-controller", instance="a", by="kured"} _x100 6000x10 _x295
  fleet_role_leader{job="fleet-role-controller", instance="a"} 1x405
`
		want := `{alertname="FleetRoleHeldLong", by="prometheus", instance="a", job="fleet-role-controller", severity="warning"}`
		expect(t, "FleetRoleHeldLong", firing(t, series, "FleetRoleHeldLong", 365*time.Minute, 366*time.Minute, 400*time.Minute),
			map[time.Duration][]string{365 * time.Minute: {}, 366 * time.Minute: {want}, 400 * time.Minute: {want}})
	}},
	{"HoldsThatEndWithinSixHoursAreQuiet", func(t *testing.T) {
		// A Plan applying for two hours, then none: the series goes (a
		// stale marker), and no hold again.
		series := `
  fleet_role_start_held_since_timestamp_seconds{job="fleet-role-controller", instance="a", by="upgrade"} _x5 300x120 stale
  fleet_role_leader{job="fleet-role-controller", instance="a"} 1x500
`
		expect(t, "FleetRoleHeldLong", firing(t, series, "FleetRoleHeldLong", 120*time.Minute, 370*time.Minute, 500*time.Minute),
			map[time.Duration][]string{120 * time.Minute: {}, 370 * time.Minute: {}, 500 * time.Minute: {}})
	}},
	{"ANotificationDroppedFiresAtOnceAndClearsHalfAnHourAfter", func(t *testing.T) {
		series := `
  fleet_role_notifications_total{job="fleet-role-controller", instance="a", outcome="dropped"} 0x9 1x60
  fleet_role_notifications_total{job="fleet-role-controller", instance="a", outcome="sent"} 0x9 5x60
`
		want := `{alertname="FleetRoleNotificationsFailing", instance="a", job="fleet-role-controller", severity="warning"}`
		expect(t, "FleetRoleNotificationsFailing", firing(t, series, "FleetRoleNotificationsFailing", 9*time.Minute, 10*time.Minute, 38*time.Minute, 39*time.Minute),
			map[time.Duration][]string{9 * time.Minute: {}, 10 * time.Minute: {want}, 38 * time.Minute: {want}, 39 * time.Minute: {}})
	}},
	{"SendsFailingForTwentyMinutesFireUntilOneSucceedsAndTheFailuresStop", func(t *testing.T) {
		// A webhook refuses from minute 6, tried again every 6 minutes
		// (about the backoff's cap); its last refusal is at minute 48, it
		// answers at minute 50.
		series := `
  fleet_role_notifications_total{job="fleet-role-controller", instance="a", outcome="failed"} 0x5 1x5 2x5 3x5 4x5 5x5 6x5 7x5 8x40
  fleet_role_notifications_total{job="fleet-role-controller", instance="a", outcome="sent"} 0x50 1x40
`
		want := `{alertname="FleetRoleNotificationsFailing", instance="a", job="fleet-role-controller", severity="warning"}`
		expect(t, "FleetRoleNotificationsFailing", firing(t, series, "FleetRoleNotificationsFailing", 20*time.Minute, 26*time.Minute, 55*time.Minute, 61*time.Minute),
			map[time.Duration][]string{20 * time.Minute: {}, 26 * time.Minute: {want}, 55 * time.Minute: {want}, 61 * time.Minute: {}})
	}},
	{"NotificationsThatFailOnceAndAreThenSentAreQuiet", func(t *testing.T) {
		series := `
  fleet_role_notifications_total{job="fleet-role-controller", instance="a", outcome="failed"} 0x9 1x60
  fleet_role_notifications_total{job="fleet-role-controller", instance="a", outcome="sent"} 0x10 1x60
  fleet_role_notifications_total{job="fleet-role-controller", instance="a", outcome="dropped"} 0x70
`
		expect(t, "FleetRoleNotificationsFailing", firing(t, series, "FleetRoleNotificationsFailing", 10*time.Minute, 20*time.Minute, 60*time.Minute),
			map[time.Duration][]string{10 * time.Minute: {}, 20 * time.Minute: {}, 60 * time.Minute: {}})
	}},
	{"AnAgentActionFailingForAQuarterOfAnHourFiresByAgentAndAction", func(t *testing.T) {
		// s1's promote fails from minute 5, tried again every minute; v1's
		// step-down failed once and then was done.
		series := `
  fleet_role_agent_actions_total{job="fleet-role-agent", instance="s1:9091", action="promote", outcome="failed"} 0x4 1+1x40
  fleet_role_agent_actions_total{job="fleet-role-agent", instance="v1:9091", action="step-down", outcome="failed"} 0x4 1x40
  fleet_role_agent_actions_total{job="fleet-role-agent", instance="v1:9091", action="step-down", outcome="done"} 0x5 1x39
`
		want := `{action="promote", alertname="FleetRoleAgentActionsFailing", instance="s1:9091", job="fleet-role-agent", severity="warning"}`
		expect(t, "FleetRoleAgentActionsFailing", firing(t, series, "FleetRoleAgentActionsFailing", 19*time.Minute, 20*time.Minute, 40*time.Minute),
			map[time.Duration][]string{19 * time.Minute: {}, 20 * time.Minute: {want}, 40 * time.Minute: {want}})
	}},
	{"AnAgentActionThatFailsOnceAndIsDoneAndActionsDoneAtEveryTurnAreQuiet", func(t *testing.T) {
		// s1's promote failed once, then was done; v1 carries out a
		// decision every minute, each done.
		series := `
  fleet_role_agent_actions_total{job="fleet-role-agent", instance="s1:9091", action="promote", outcome="failed"} 0x4 1x40
  fleet_role_agent_actions_total{job="fleet-role-agent", instance="s1:9091", action="promote", outcome="done"} 0x5 1x39
  fleet_role_agent_actions_total{job="fleet-role-agent", instance="v1:9091", action="snapshot", outcome="done"} 0+1x40
`
		expect(t, "FleetRoleAgentActionsFailing", firing(t, series, "FleetRoleAgentActionsFailing", 10*time.Minute, 20*time.Minute, 40*time.Minute),
			map[time.Duration][]string{10 * time.Minute: {}, 20 * time.Minute: {}, 40 * time.Minute: {}})
	}},
	{"AnAgentThatStopsSamplingFiresNineMinutesAfterItsLastSample", func(t *testing.T) {
		// A sample a minute until minute 10; then the count stands still:
		// from minute 14 the five minutes hold that one value alone.
		series := `
  fleet_role_agent_probe_samples_total{job="fleet-role-agent", instance="v2:9091", result="healthy"} 0+1x10 10x30
  fleet_role_agent_probe_samples_total{job="fleet-role-agent", instance="v1:9091", result="healthy"} 0+1x40
`
		want := `{alertname="FleetRoleAgentNotSampling", instance="v2:9091", job="fleet-role-agent", severity="warning"}`
		expect(t, "FleetRoleAgentNotSampling", firing(t, series, "FleetRoleAgentNotSampling", 18*time.Minute, 19*time.Minute, 40*time.Minute),
			map[time.Duration][]string{18 * time.Minute: {}, 19 * time.Minute: {want}, 40 * time.Minute: {want}})
	}},
	{"AnAgentSamplingEveryMinuteIsQuiet", func(t *testing.T) {
		// Healthy, then unhealthy: sampling all the same.
		series := `
  fleet_role_agent_probe_samples_total{job="fleet-role-agent", instance="v2:9091", result="healthy"} 0+1x20 20x20
  fleet_role_agent_probe_samples_total{job="fleet-role-agent", instance="v2:9091", result="unhealthy"} 0x20 0+1x20
`
		expect(t, "FleetRoleAgentNotSampling", firing(t, series, "FleetRoleAgentNotSampling", 10*time.Minute, 25*time.Minute, 40*time.Minute),
			map[time.Duration][]string{10 * time.Minute: {}, 25 * time.Minute: {}, 40 * time.Minute: {}})
	}},
	{"AnAgentWhoseSamplesMostlyFailFiresAfterAQuarterOfAnHour", func(t *testing.T) {
		// From minute 10, every sample is an error.
		series := `
  fleet_role_agent_probe_samples_total{job="fleet-role-agent", instance="v3:9091", result="healthy"} 0+1x10 10x50
  fleet_role_agent_probe_samples_total{job="fleet-role-agent", instance="v3:9091", result="error"} 0x10 0+1x50
`
		want := `{alertname="FleetRoleAgentProbeErrors", instance="v3:9091", job="fleet-role-agent", severity="warning"}`
		expect(t, "FleetRoleAgentProbeErrors", firing(t, series, "FleetRoleAgentProbeErrors", 24*time.Minute, 33*time.Minute, 50*time.Minute),
			map[time.Duration][]string{24 * time.Minute: {}, 33 * time.Minute: {want}, 50 * time.Minute: {want}})
	}},
	{"AnAgentWithAFewFailedSamplesIsQuiet", func(t *testing.T) {
		// One error in every four samples.
		series := `
  fleet_role_agent_probe_samples_total{job="fleet-role-agent", instance="v3:9091", result="healthy"} 0 1 2 3 3 4 5 6 6 7 8 9 9 10 11 12 12 13 14 15 15 16 17 18 18 19 20 21 21 22 23 24 24 25 26 27 27 28 29 30 30
  fleet_role_agent_probe_samples_total{job="fleet-role-agent", instance="v3:9091", result="error"} 0 0 0 0 1 1 1 1 2 2 2 2 3 3 3 3 4 4 4 4 5 5 5 5 6 6 6 6 7 7 7 7 8 8 8 8 9 9 9 9 10
`
		expect(t, "FleetRoleAgentProbeErrors", firing(t, series, "FleetRoleAgentProbeErrors", 20*time.Minute, 40*time.Minute),
			map[time.Duration][]string{20 * time.Minute: {}, 40 * time.Minute: {}})
	}},
}

// TestEachAlertFiresWhenItShouldAndOnlyThen runs the cases, then checks
// that each alert of the file was seen both firing and quiet, selects
// only the controller's and the agent's metrics, and has a summary, a description that
// points to docs/alerts.md, and a severity.
func TestEachAlertFiresWhenItShouldAndOnlyThen(t *testing.T) {
	for _, c := range cases {
		t.Run(c.name, c.run)
	}
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, parser.NewParser(parser.Options{}), promslog.NewNopLogger())
	require.Empty(t, errs)
	known := everyMetric(t)
	alerts := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			for _, n := range metricNames(t, r.Expr) {
				assert.True(t, known[n], "%s: %s is no metric of the controller or the agent", r.Alert, n)
			}
			assert.True(t, tested.fires[r.Alert], "%s: no case fires it", r.Alert)
			assert.True(t, tested.quiet[r.Alert], "%s: no case keeps it quiet", r.Alert)
			assert.NotEmpty(t, r.Annotations["summary"], r.Alert)
			assert.Contains(t, r.Annotations["description"], "docs/alerts.md#"+strings.ToLower(r.Alert), r.Alert)
			assert.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], r.Alert)
		}
	}
	assert.Positive(t, alerts)
}
