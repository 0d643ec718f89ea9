package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/fleet-role/fleet-role/api"
)

func TestStatusOfAStuckSwapNamesTheCommandThatRemovesTheMember(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	since := now.Add(-7 * time.Minute)
	stuck := &api.Stuck{Node: "s1", Member: "s1-0a1b2c3d", MemberID: "8e9e05c52164694d", Voter: "v2",
		Why: "the agent of v2 failed the removal: etcd member remove: context deadline exceeded"}
	st := api.Status{
		Swap: &api.SwapRecord{ID: "x1", Out: "v1", In: "s1", Origin: api.OriginManual, StartedAt: now.Add(-time.Hour),
			Phase: api.PhaseStuck, Reason: "the candidate s1 is not a voter within 10m0s", Stuck: stuck},
		Step: api.StepStuck, Since: &since, UpdatedAt: now,
	}
	var b strings.Builder
	renderStatus(&b, st, now, false)
	out := b.String()
	assert.Contains(t, out, "(manual, stuck)")
	assert.Contains(t, out, "STEP          stuck, since")
	assert.Contains(t, out, "the member s1-0a1b2c3d of the candidate s1 cannot be removed by fleet-role: the agent of v2 failed")
	assert.Contains(t, out, "as root on the voter v2")
	assert.Contains(t, out, "etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/var/lib/rancher/k3s/server/tls/etcd/server-ca.crt "+
		"--cert=/var/lib/rancher/k3s/server/tls/etcd/client.crt --key=/var/lib/rancher/k3s/server/tls/etcd/client.key member remove 8e9e05c52164694d")
	assert.Contains(t, out, "the Lease stays held until the member is gone")

	st.Swap.Phase, st.Swap.Stuck, st.Step = api.PhaseRollback, nil, api.StepRollback
	b.Reset()
	renderStatus(&b, st, now, false)
	assert.NotContains(t, b.String(), "etcdctl", "no command once the swap is no longer stuck")
}

func TestTheStatusTableShowsAVotersEtcdWALFsyncP99WhereItIsJudgedByItAndAStandbysProbeFsyncP99(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	st := api.Status{UpdatedAt: now, Voters: []string{"v1"}, Verdicts: map[string]api.Verdict{
		"v1": {State: api.VerdictFit, Samples: 25, FsyncP99Ms: 31, WALFsyncP99Ms: 3.9, BackendCommitP99Ms: 7.75},
		"s1": {State: api.VerdictFit, Samples: 25, FsyncP99Ms: 2.5}}}
	var b strings.Builder
	renderStatus(&b, st, now, false)
	assert.Regexp(t, `(?m)^v1 +fit +0 bad of 25 +3\.9 ms etcd `, b.String(), "the voter's etcd's own p99, not the probe's 31 ms")
	assert.Regexp(t, `(?m)^s1 \(standby\) +fit +0 bad of 25 +2\.5 ms `, b.String())
}

func TestStatusOutputsTheTableWideJSONAndYAML(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	st := api.Status{UpdatedAt: now, Voters: []string{"v1"},
		Verdicts: map[string]api.Verdict{"v1": {State: api.VerdictUnfit, Score: 3.5, Samples: 10, Bad: 9, Reason: "fsync p99 40.0 ms over 10 ms"}}}
	print := func(output string) string {
		render, err := statusRenderer(output)
		require.NoError(t, err)
		var b strings.Builder
		require.NoError(t, render(&b, st, now))
		return b.String()
	}
	assert.NotContains(t, print(""), "fsync p99 40.0 ms over 10 ms")
	wide := print("wide")
	assert.Contains(t, wide, "SCORE")
	assert.Contains(t, wide, "3.50")
	assert.Contains(t, wide, "fsync p99 40.0 ms over 10 ms")

	var back api.Status
	require.NoError(t, json.Unmarshal([]byte(print("json")), &back))
	assert.Equal(t, st.Verdicts, back.Verdicts)
	require.NoError(t, yaml.UnmarshalStrict([]byte(print("yaml")), &back), "YAML with the JSON's field names")
	assert.Equal(t, st.Verdicts, back.Verdicts)

	_, err := statusRenderer("table")
	assert.ErrorAs(t, err, new(usageError))
}

func TestStatusNamesEachDeadVoterWithEverySign(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	st := api.Status{UpdatedAt: now, Dead: []api.DeadVoter{{Node: "v2", Member: "v2-4f59c04e", Heartbeat: now.Add(-6 * time.Minute),
		Reason: "no probe sample since 2026-12-06T11:54:00Z, 3 periods of 1m0s; not Ready, its kubelet's last heartbeat at 2026-12-06T11:54:00Z (6m0s ago, dead_after 5m0s); its member v2-4f59c04e unreachable from v1, v3"}}}
	var b strings.Builder
	renderStatus(&b, st, now, false)
	assert.Contains(t, b.String(), "DEAD     v2: no probe sample since 2026-12-06T11:54:00Z, 3 periods of 1m0s; not Ready, its kubelet's last heartbeat at 2026-12-06T11:54:00Z "+
		"(6m0s ago, dead_after 5m0s); its member v2-4f59c04e unreachable from v1, v3; etcd tolerates one failure less until it is replaced or its member removed\n")
}

func TestStatusNamesEveryRunnerPodTheSwapWaitsOnAndTheJobOfEachWhoseRunnerNamesOne(t *testing.T) {
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	since := now.Add(-70 * time.Minute)
	st := api.Status{UpdatedAt: now, Step: api.StepRunnersOut, Since: &since, Bound: api.Duration(time.Hour),
		Swap:      &api.SwapRecord{ID: "20261206-104500-v1", Out: "v1", In: "s1", Origin: api.OriginAutomatic, StartedAt: now.Add(-75 * time.Minute)},
		WaitingOn: []string{"arc/runner-a", "arc/runner-b", "arc/runner-c", "arc/runner-d"},
		Jobs:      map[string]string{"arc/runner-b": "octo-org/app: build (run 42)"}}
	var b strings.Builder
	renderStatus(&b, st, now, false)
	assert.Contains(t, b.String(), "WAITING ON  4 runner pod(s), each running a job: arc/runner-a, arc/runner-b (octo-org/app: build (run 42)), arc/runner-c, arc/runner-d\n")
	st.WaitingOn = nil
	b.Reset()
	renderStatus(&b, st, now, false)
	assert.NotContains(t, b.String(), "WAITING ON")
}

func TestStatusSaysOfEachUnfinishedDemotionWhatStaysOnItsNodeOrThatItsNodeIsGone(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	st := api.Status{UpdatedAt: now, Pending: []string{"s1", "v9"}, Unfinished: []api.UnfinishedDemotion{
		{Node: "s1", Swap: "20261130-113000-v1"}, {Node: "v9", Swap: "20261130-113000-v1", NodeGone: true}}}
	var b strings.Builder
	renderStatus(&b, st, now, false)
	out := b.String()
	assert.Contains(t, out, "PENDING  s1: swap 20261130-113000-v1 ended before its agent reported the finish of its demotion: "+
		"its step-down and member-gone stay on its Node until the agent does, then they are cleared")
	assert.Contains(t, out, "PENDING  v9: swap 20261130-113000-v1 ended without it and its Node was deleted, so nothing is kept for its agent")
	assert.NotContains(t, out, "node recovery")

	b.Reset()
	renderStatus(&b, api.Status{UpdatedAt: now, Pending: []string{"v2"}}, now, false)
	assert.Contains(t, b.String(), "PENDING  v2 (named by the last swap's end: see its reason)", "a status an earlier controller wrote")
}

func TestStatusSaysWhoLeadsTheDryRunTheWindowTheHoldsAndTheDomainsOfAQuietFleet(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	opens := now.Add(14 * time.Hour)
	st := api.Status{UpdatedAt: now, Reason: "no swap: no voter is unfit",
		Controller: &api.ControllerState{Leader: "fleet-role-controller-7d4b9-x2x9q", DryRun: true,
			Window: &api.WindowState{Spec: "mon,tue,wed,thu,fri 02:00-05:00 UTC", Open: false, Next: &opens},
			Holds:  []string{"kured's reboot lock (kube-system/kured)"}},
		Domains: &api.Domains{Label: "topology.kubernetes.io/zone", Voters: map[string]int{"a": 1, "b": 2}, Span: 2, Survives: 0},
	}
	var b strings.Builder
	renderStatus(&b, st, now, false)
	out := b.String()
	assert.Contains(t, out, "CONTROLLER  fleet-role-controller-7d4b9-x2x9q leads; dry run on: its own decisions are only reported; a manual swap is carried out\n")
	assert.Contains(t, out, "WINDOW      closed (mon,tue,wed,thu,fri 02:00-05:00 UTC); opens at 2026-12-05 02:00:00Z (in 14h0m0s)\n")
	assert.Contains(t, out, "HOLDS       watching kured's reboot lock (kube-system/kured); nothing holds now\n")
	assert.Contains(t, out, "DOMAINS     the voters span 2 of topology.kubernetes.io/zone (a 1, b 2); quorum survives the loss of no domain\n")

	st.Controller.DryRun, st.Controller.Window.Open, st.Controller.Held = false, true, []string{"kured's reboot lock is held by v2"}
	st.Domains = &api.Domains{Label: "topology.kubernetes.io/zone", Unlabelled: []string{"v1", "v3"}}
	b.Reset()
	renderStatus(&b, st, now, false)
	out = b.String()
	assert.Contains(t, out, "dry run off: it carries out its own decisions\n")
	assert.Contains(t, out, "open (mon,tue,wed,thu,fri 02:00-05:00 UTC); closes at ")
	assert.Contains(t, out, "; holding now: kured's reboot lock is held by v2\n")
	assert.Contains(t, out, "DOMAINS     not known: the voters v1 v3 have no topology.kubernetes.io/zone label\n")
}

func TestStatusAlwaysHasAHoldsLineSayingWhatIsWatchedWhatIsOffAndWhyAndWhatHoldsNow(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	line := func(c *api.ControllerState) string {
		var b strings.Builder
		renderStatus(&b, api.Status{UpdatedAt: now, Controller: c}, now, false)
		for _, l := range strings.Split(b.String(), "\n") {
			if strings.HasPrefix(l, "HOLDS") {
				return strings.Join(strings.Fields(l), " ")
			}
		}
		return ""
	}
	assert.Equal(t, "HOLDS watching kured's reboot lock (kube-system/kured, found by itself), an upgrade Plan applying (in every namespace); "+
		"off: an alert active (holds.prometheus_url is empty); holding now: kured's reboot lock is held by v3; the Plan system-upgrade/k3s-server is applying to v2",
		line(&api.ControllerState{Leader: "r",
			Holds:    []string{"kured's reboot lock (kube-system/kured, found by itself)", "an upgrade Plan applying (in every namespace)"},
			HoldsOff: []string{"an alert active (holds.prometheus_url is empty)"},
			Held:     []string{"kured's reboot lock is held by v3", "the Plan system-upgrade/k3s-server is applying to v2"}}))
	assert.Equal(t, "HOLDS watching nothing; off: kured's reboot lock (no kured DaemonSet found: none labelled app.kubernetes.io/name=kured or named kured), "+
		`an upgrade Plan applying (holds.upgrade_plans_namespace is "off"), an alert active (holds.prometheus_url is empty); nothing holds now`,
		line(&api.ControllerState{Leader: "r", HoldsOff: []string{
			"kured's reboot lock (no kured DaemonSet found: none labelled app.kubernetes.io/name=kured or named kured)",
			`an upgrade Plan applying (holds.upgrade_plans_namespace is "off")`, "an alert active (holds.prometheus_url is empty)"}}),
		"every hold off says so, and is not silent")
	assert.Equal(t, "HOLDS not known: the controller has written no state of its own yet", line(nil))
}

func TestHistoryListsTheSwapsThatEndedTheNewestFirstTheirWriteGapsAndWideTheirSteps(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	history := []api.SwapResult{
		{ID: "20261204-130000-v2", Out: "v2", In: "s1", Origin: api.OriginAutomatic, Result: api.ResultCompleted, Dead: true,
			StartedAt: t0.Add(time.Hour), EndedAt: t0.Add(time.Hour + 83*time.Second),
			Steps: []api.StepSpan{{Step: api.StepSnapshot, Start: t0.Add(time.Hour), End: t0.Add(time.Hour + 3*time.Second)},
				{Step: api.StepJoin, Start: t0.Add(time.Hour + 3*time.Second), End: t0.Add(time.Hour + 83*time.Second)}},
			Writes: &api.WriteCost{Writes: 40, Failed: 2, LongestGap: api.Duration(1234567 * time.Microsecond)}},
		{ID: "20261204-120000-v1", Out: "v1", In: "s2", Origin: api.OriginManual, By: "alice", Result: api.ResultRolledBack,
			Reason: "the candidate s2 is not a voter within 10m0s", StartedAt: t0, EndedAt: t0.Add(11 * time.Minute)},
	}
	var b strings.Builder
	renderHistory(&b, history, false)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 3)
	assert.Regexp(t, `^SWAP +OUT +IN +ASKED +RESULT +STARTED +TOOK +WRITE GAP +REASON$`, lines[0])
	assert.Regexp(t, `^20261204-130000-v2 +v2 +s1 +automatic, OUT dead +completed +2026-12-04 13:00:00Z +1m23s +1.235s \(2 of 40 failed\) +-$`, lines[1])
	assert.Regexp(t, `^20261204-120000-v1 +v1 +s2 +manual by alice +rolled-back +2026-12-04 12:00:00Z +11m0s +- +the candidate s2 is not a voter within 10m0s$`, lines[2])
	b.Reset()
	renderHistory(&b, history, true)
	assert.Contains(t, b.String(), "  snapshot 3s, join 1m20s\n")
	b.Reset()
	renderHistory(&b, nil, false)
	assert.Equal(t, "No swap has ended yet.\n", b.String())
}

func TestMembersListsEachMemberAsItsHostSampledItAndStatusTheLearnersCatchUpDuringTheJoin(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	st := api.Status{UpdatedAt: now,
		Swap: &api.SwapRecord{ID: "x", Out: "v1", In: "s1", Origin: api.OriginManual, StartedAt: now}, Step: api.StepJoin,
		Members: map[string][]api.Member{"v1": {{Name: "v1-aa", ID: "a1"}, {Name: "v2-bb", ID: "b2"}, {Name: "s1-cc", ID: "c3", Learner: true}}},
		Etcd: map[string]api.EtcdStatus{
			"v1": {ID: "a1", Leader: "a1", RaftIndex: 9120, RaftTerm: 4, DBSize: 24 << 20, DBSizeInUse: 12 << 20},
			"v2": {ID: "b2", Leader: "a1", RaftIndex: 9118, RaftTerm: 4, DBSize: 24 << 20, DBSizeInUse: 12 << 20, Errors: []string{"NOSPACE"}},
			"s1": {ID: "c3", Leader: "a1", Learner: true, RaftIndex: 4000, RaftTerm: 4, DBSize: 8 << 20, DBSizeInUse: 8 << 20},
		},
		Verdicts: map[string]api.Verdict{"v1": {State: api.VerdictFit, Samples: 5, FsyncP99Ms: 1.25}},
	}
	var b strings.Builder
	renderMembers(&b, st, false)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 4)
	assert.Regexp(t, `^HOST +ID +NAME +ROLE +LEADER +RAFT INDEX +BEHIND +DB SIZE +IN USE +FSYNC P99 +ALARMS$`, lines[0])
	assert.Regexp(t, `^s1 +c3 +s1-cc +learner +4000 +5120 +8\.0 MiB +8\.0 MiB +- +-$`, lines[1])
	assert.Regexp(t, `^v1 +a1 +v1-aa +voter +\* +9120 +0 +24\.0 MiB +12\.0 MiB +1\.2 ms +-$`, lines[2])
	assert.Regexp(t, `^v2 +b2 +v2-bb +voter +9118 +2 +24\.0 MiB +12\.0 MiB +- +NOSPACE$`, lines[3])

	b.Reset()
	renderStatus(&b, st, now, false)
	assert.Contains(t, b.String(), "CATCH-UP  s1, a learner, at raft index 4000; the leader v1 at 9120: 5120 behind\n")
	st.Step = api.StepGates
	b.Reset()
	renderStatus(&b, st, now, false)
	assert.NotContains(t, b.String(), "CATCH-UP", "only while it joins")
	b.Reset()
	renderMembers(&b, api.Status{}, false)
	assert.Equal(t, "No member has been sampled yet.\n", b.String())
}

func TestTheLastActionIsNamedWithItsNodeOrAloneWhenItHasNone(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	var b strings.Builder
	renderStatus(&b, api.Status{UpdatedAt: now, LastAction: &api.LastAction{Type: api.ActionPromote, Node: "s1", At: now}}, now, false)
	assert.Contains(t, b.String(), "LAST ACTION  promote s1 at 2026-12-04 12:00:00Z (0s ago): ok\n")
	b.Reset()
	renderStatus(&b, api.Status{UpdatedAt: now, LastAction: &api.LastAction{Type: api.ActionEnd, At: now}}, now, false)
	assert.Contains(t, b.String(), "LAST ACTION  end at 2026-12-04 12:00:00Z (0s ago): ok\n")
}

// The overrides a request names, and those a swap under way, the last one
// and each in the history were started past, are said where each is.
func TestStatusAndHistorySayTheOverridesOfTheRequestAndOfEachSwap(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	past := []string{api.OverridePause, api.OverrideHolds}
	st := api.Status{UpdatedAt: now,
		Swap:    &api.SwapRecord{ID: "x2", Out: "v2", In: "s2", Origin: api.OriginManual, StartedAt: now.Add(-time.Minute), Overrides: []string{api.OverrideDomains}},
		Request: &api.ManualRequest{Out: "v3", In: "s3", At: now, By: "bob", Overrides: past},
		Last: &api.SwapResult{ID: "x1", Out: "v1", In: "s1", Origin: api.OriginManual, Result: api.ResultCompleted,
			StartedAt: now.Add(-time.Hour), EndedAt: now.Add(-30 * time.Minute), By: "alice", Overrides: past},
	}
	var b strings.Builder
	renderStatus(&b, st, now, false)
	out := b.String()
	assert.Contains(t, out, "(manual), started 2026-11-30 11:59:00Z (1m0s ago); started past: domains\n")
	assert.Contains(t, out, "swap v3 for s3, by bob at 2026-11-30 12:00:00Z, overrides: pause, holds\n")
	assert.Contains(t, out, "x1: v1 out, s1 in, completed at 2026-11-30 11:30:00Z; started past: pause, holds\n")

	b.Reset()
	renderHistory(&b, []api.SwapResult{*st.Last, {ID: "x0", Out: "v2", In: "s2", Origin: api.OriginAutomatic, Result: api.ResultCompleted}}, false)
	lines := strings.Split(b.String(), "\n")
	require.GreaterOrEqual(t, len(lines), 3)
	assert.Contains(t, lines[1], "manual by alice, started past: pause, holds")
	assert.NotContains(t, lines[2], "started past", "an automatic swap passes nothing")
}
