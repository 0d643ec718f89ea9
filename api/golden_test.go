package api_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
)

var update = flag.Bool("update", false, "rewrite testdata/*.json from the canonical values")

func at(hour, minute, second int) time.Time {
	return time.Date(2026, 11, 30, hour, minute, second, 0, time.UTC)
}

func ptr[T any](v T) *T { return &v }

// golden is one document as users' clusters and hosts hold it: its file
// under testdata (and testdata/v1), its canonical value, and how its
// writer encodes it.
type golden struct {
	file   string
	value  any
	indent bool // written with json.MarshalIndent(v, "", "  "), as status.json and the agent's state are
	// later: a document (or field) that came after the release that wrote
	// testdata/v1, so it has no version-1 file.
	later bool
}

// documents are the canonical values of every wire document, with V set
// as a reader sees it (1), so that what is decoded compares equal.
func documents() []golden {
	swap := "20261130-113000-v1"
	return []golden{
		{file: "node-request-promote.json", value: api.Request{V: 1, Swap: swap, Action: api.RequestPromote, At: at(11, 31, 0),
			Voters: []string{"v2", "v3"}}},
		{file: "node-request-step-down.json", value: api.Request{V: 1, Swap: swap, Action: api.RequestStepDown, At: at(11, 50, 0),
			Leader: "s1"}},
		{file: "node-request-remove-member.json", value: api.Request{V: 1, Swap: swap, Action: api.RequestRemoveMember, At: at(11, 52, 0),
			Member: "s1-0a1b2c3d", MemberID: "8e9e05c52164694d"}},
		{file: "node-report-promote.json", value: api.Report{V: 1, Swap: swap, Action: api.RequestPromote, State: api.StateDone,
			StartedAt: ptr(at(11, 31, 5)), At: at(11, 31, 7), RequestAt: ptr(at(11, 31, 0))}},
		{file: "node-report-snapshot.json", value: api.Report{V: 1, Swap: swap, Action: api.RequestSnapshot, State: api.StateDone,
			At: at(11, 30, 20), RequestAt: ptr(at(11, 30, 10)),
			Snapshot: &api.SnapshotFile{Path: "/var/lib/rancher/k3s/server/db/snapshots/fleet-role-20261130-113000-v1-1796038220", Size: 4096,
				SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}}},
		{file: "node-report-snapshot-copied.json", later: true, value: api.Report{V: 1, Swap: swap, Action: api.RequestSnapshot, State: api.StateDone,
			At: at(11, 30, 20), RequestAt: ptr(at(11, 30, 10)),
			Snapshot: &api.SnapshotFile{Path: "/var/lib/rancher/k3s/server/db/snapshots/fleet-role-20261130-113000-v1-1796038220", Size: 4096,
				SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
				Copy:   "/mnt/backup/fleet-role/v2/fleet-role-20261130-113000-v1-1796038220"}}},
		{file: "node-report-refused.json", value: api.Report{V: 1, Swap: swap, Action: api.RequestPromote, State: api.StateRefused,
			At: at(11, 31, 2), Message: "this host is not staged as a standby", RequestAt: ptr(at(11, 31, 0))}},
		{file: "node-report-finish.json", value: api.Report{V: 1, Swap: swap, Action: api.ReportFinish, State: api.StateDone,
			StartedAt: ptr(at(11, 56, 30)), At: at(11, 56, 31)}},
		{file: "node-probe-server.json", value: api.Probe{V: 1, At: at(11, 40, 0), Period: api.Duration(time.Minute), Healthy: true,
			Member: "v2-0a1b2c3d", Leader: "v1-0a1b2c3d", FsyncP99Ms: 2.5, RTTMs: 1.25,
			Members: []api.Member{{Name: "v1-0a1b2c3d", ID: "1"}, {Name: "v2-0a1b2c3d", ID: "2"}, {Name: "v3-0a1b2c3d", ID: "3"},
				{Learner: true, ID: "8e9e05c52164694d"}}}},
		{file: "node-probe-standby.json", value: api.Probe{V: 1, At: at(11, 40, 0), Period: api.Duration(time.Minute), Staged: true,
			FsyncP99Ms: 31, Error: "the disk probe did not finish within 5s"}},
		{file: "node-probe-corrupt-role-file.json", later: true, value: api.Probe{V: 1, At: at(11, 40, 0), Period: api.Duration(time.Minute), Healthy: true,
			Member: "v2-0a1b2c3d", Leader: "v1-0a1b2c3d", FsyncP99Ms: 2.5, RTTMs: 1.25,
			Members:       []api.Member{{Name: "v1-0a1b2c3d", ID: "1"}, {Name: "v2-0a1b2c3d", ID: "2"}, {Name: "v3-0a1b2c3d", ID: "3"}},
			RoleFileError: `corrupt role file: want "server" or "agent", found "sever"`, KeptRole: api.HostServer}},
		{file: "node-probe-voter-latencies.json", later: true, value: api.Probe{V: 1, At: at(11, 40, 0), Period: api.Duration(time.Minute), Healthy: true,
			Member: "v2-0a1b2c3d", Leader: "v1-0a1b2c3d", FsyncP99Ms: 2.5, RTTMs: 1.25,
			Members: []api.Member{{Name: "v1-0a1b2c3d", ID: "1"}, {Name: "v2-0a1b2c3d", ID: "2"}, {Name: "v3-0a1b2c3d", ID: "3"}},
			EtcdLatencies: &api.EtcdLatencies{
				WALFsync: &api.Histogram{Count: 5210, Sum: 9.75, Buckets: []api.Bucket{{LE: 0.001, Count: 3102}, {LE: 0.002, Count: 4870}, {LE: 0.004, Count: 5150},
					{LE: 0.008, Count: 5199}, {LE: 0.016, Count: 5208}, {LE: 0.032, Count: 5210}}},
				BackendCommit: &api.Histogram{Count: 1730, Sum: 7.5, Buckets: []api.Bucket{{LE: 0.001, Count: 12}, {LE: 0.002, Count: 640}, {LE: 0.004, Count: 1500},
					{LE: 0.008, Count: 1702}, {LE: 0.016, Count: 1728}, {LE: 0.032, Count: 1730}}}}}},
		{file: "node-probe-k3s-config.json", later: true, value: api.Probe{V: 1, At: at(11, 40, 0), Period: api.Duration(time.Minute), Healthy: true,
			Member: "v2-0a1b2c3d", Leader: "v1-0a1b2c3d", FsyncP99Ms: 2.5, RTTMs: 1.25,
			K3sConfig: &api.K3sConfig{
				Critical: map[string]string{"cluster-cidr": "10.42.0.0/16", "cluster-dns": "10.43.0.10", "disable-network-policy": "false",
					"egress-selector-mode": "agent", "flannel-backend": "vxlan", "service-cidr": "10.43.0.0/16"},
				TokenCAHash:  "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
				ServerCAHash: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}}},
		{file: "node-probe-k3s-config-unread.json", later: true, value: api.Probe{V: 1, At: at(11, 40, 0), Period: api.Duration(time.Minute), Staged: true,
			FsyncP99Ms: 31, K3sConfig: &api.K3sConfig{Error: "/etc/rancher/k3s/config.yaml: yaml: line 3: mapping values are not allowed in this context"}}},
		{file: "node-probe-voter-latencies-unread.json", later: true, value: api.Probe{V: 1, At: at(11, 40, 0), Period: api.Duration(time.Minute), Healthy: true,
			Member: "v2-0a1b2c3d", Leader: "v1-0a1b2c3d", FsyncP99Ms: 2.5, RTTMs: 1.25,
			EtcdLatencies: &api.EtcdLatencies{Error: "etcd metrics: Get \"https://127.0.0.1:2379/metrics\": context deadline exceeded"}}},
		{file: "status-voter-latencies.json", indent: true, later: true, value: api.Status{V: 1,
			Reason: "no swap: no voter is unfit",
			Voters: []string{"v1", "v2", "v3"},
			Verdicts: map[string]api.Verdict{
				"v1": {State: api.VerdictUnfit, Score: 34.5, Samples: 25, FsyncP99Ms: 2.5, RTTMs: 4.5, WALFsyncP99Ms: 34.5, BackendCommitP99Ms: 41, Writes: 1520,
					Reason: "etcd's WAL fsync p99 34.5 ms over 10ms, backend commit p99 41.0 ms over 25ms, over 1520 writes; 0 of 25 samples bad"},
				"v2": {State: api.VerdictFit, Score: 3.9, Samples: 25, FsyncP99Ms: 2.5, RTTMs: 1.25, WALFsyncP99Ms: 3.9, BackendCommitP99Ms: 7.75, Writes: 1522,
					Reason: "etcd's WAL fsync p99 3.9 ms, backend commit p99 7.8 ms, over 1522 writes; 0 of 25 samples bad"},
			},
			UpdatedAt: at(11, 41, 0),
		}},
		{file: "lease-swap.json", value: api.SwapRecord{V: 1, ID: swap, Out: "v1", In: "s1", Origin: api.OriginManual,
			StartedAt: at(11, 30, 0), RequestAt: ptr(at(11, 29, 50))}},
		{file: "lease-swap-stuck.json", value: api.SwapRecord{V: 1, ID: swap, Out: "v1", In: "s1", Origin: api.OriginAutomatic,
			StartedAt: at(11, 30, 0), Phase: api.PhaseStuck, Reason: "the candidate s1 is not a voter within 10m0s: s1's EtcdIsVoter is \"False\"/\"MemberIsLearner\"",
			Stuck: &api.Stuck{Node: "s1", Member: "s1-0a1b2c3d", MemberID: "8e9e05c52164694d", Voter: "v2",
				Why: "the agent of v2 did not remove it within 5m0s"}}},
		{file: "lease-swap-overrides.json", later: true, value: api.SwapRecord{V: 1, ID: swap, Out: "v1", In: "s1", Origin: api.OriginManual,
			StartedAt: at(11, 30, 0), RequestAt: ptr(at(11, 29, 50)), Overrides: []string{api.OverridePause, api.OverrideDomains}}},
		{file: "lease-swap-end.json", value: api.SwapRecord{V: 1, ID: swap, Out: "v1", In: "s1", Origin: api.OriginManual,
			StartedAt: at(11, 30, 0), RequestAt: ptr(at(11, 29, 50)), Phase: api.PhaseEnd, Reason: "v1 did not finish its demotion: it is left to node recovery",
			Result: api.ResultCompleted, EndedAt: ptr(at(12, 10, 0)), Pending: []string{"v1"}}},
		{file: "request.json", value: api.ManualRequest{V: 1, Out: "v1", In: "s1", At: at(11, 29, 50), By: "alice@ops-1"}},
		{file: "request-overrides.json", later: true, value: api.ManualRequest{V: 1, Out: "v1", In: "s1", At: at(11, 29, 50), By: "alice",
			Overrides: []string{api.OverridePause, api.OverrideHolds}}},
		{file: "cancel.json", later: true, value: api.Cancel{V: 1, Swap: swap, By: "alice", At: at(11, 35, 0)}},
		{file: "pause.json", later: true, value: api.Pause{V: 1, By: "alice", Reason: "kernel upgrades this week", At: at(9, 0, 0)}},
		{file: "notify-queue.json", indent: true, later: true, value: api.NotifyQueue{V: 1, Queued: []api.QueuedNotification{
			{To: "3f9a1c0b7d2e", Message: "fleet-role: swap " + swap + " (v1 out, s1 in, manual) started: swapping v1 for s1", At: at(11, 30, 0), Attempts: 3},
			{To: "3f9a1c0b7d2e", Message: "fleet-role: paused by alice: kernel upgrades this week", At: at(11, 31, 0)}},
			DryRunTold: &api.Decision{Out: "v2", In: "s2"}, Pause: &api.Pause{V: 1, By: "alice", Reason: "kernel upgrades this week", At: at(9, 0, 0)}}},
		{file: "status.json", indent: true, value: api.Status{V: 1,
			Swap: &api.SwapRecord{V: 1, ID: swap, Out: "v1", In: "s1", Origin: api.OriginManual, StartedAt: at(11, 30, 0),
				RequestAt: ptr(at(11, 29, 50))},
			Step:   api.StepGates,
			Since:  ptr(at(11, 40, 0)),
			Bound:  api.Duration(30 * time.Minute),
			Reason: "gates held, the outgoing voter v1 is not touched: v3's probe says unhealthy: fsync p99 31.0 ms",
			Last: &api.SwapResult{ID: "20261129-080000-v2", Out: "v2", In: "s2", Origin: api.OriginAutomatic, Result: api.ResultCompleted,
				Reason: "v2 did not finish its demotion: it is left to node recovery", StartedAt: time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC),
				EndedAt: time.Date(2026, 11, 29, 8, 40, 0, 0, time.UTC), Pending: []string{"v2"}},
			CooldownUntil: ptr(time.Date(2026, 11, 29, 14, 40, 0, 0, time.UTC)),
			Verdicts: map[string]api.Verdict{
				"v1": {State: api.VerdictUnfit, Score: 21031, Samples: 25, Bad: 21, FsyncP99Ms: 31, RTTMs: 4.5,
					Reason: "fsync p99 over 10ms in 21 of 25 samples; fsync p99 median 31.0 ms"},
				"s1": {State: api.VerdictFit, Score: 2.5, Samples: 25, FsyncP99Ms: 2.5, RTTMs: 1.25,
					Reason: "0 of 25 samples bad; fsync p99 median 2.5 ms"},
				"s2": {State: api.VerdictPartial, Samples: 3, Reason: "3 of 25 samples: no verdict on a partial window"},
			},
			Decision: &api.Decision{Out: "v1", In: "s1", Reason: "v1 is unfit (fsync p99 over 10ms in 21 of 25 samples); s1 is the fittest eligible standby"},
			Request:  &api.ManualRequest{V: 1, Out: "v1", In: "s1", At: at(11, 29, 50), By: "alice@ops-1"},
			Voters:   []string{"s1", "v1", "v2", "v3"},
			Members: map[string][]api.Member{
				"v2": {{Name: "v1-0a1b2c3d", ID: "1"}, {Name: "v2-0a1b2c3d", ID: "2"}, {Name: "v3-0a1b2c3d", ID: "3"}, {Name: "s1-0a1b2c3d", ID: "8e9e05c52164694d"}},
			},
			LastAction: &api.LastAction{Type: api.ActionCordonOut, Node: "v1", At: at(11, 39, 30), Error: "the server is currently unable to handle the request"},
			Pending:    []string{"v2"},
			Problems:   []string{`node/v3: annotation fleet-role.io/probe: field "period": must be a positive duration`},
			UpdatedAt:  at(11, 41, 0),
		}},
		{file: "status-unfinished.json", indent: true, later: true, value: api.Status{V: 1,
			Reason: "no swap: no voter is unfit",
			Last: &api.SwapResult{ID: swap, Out: "v1", In: "s1", Origin: api.OriginManual, Result: api.ResultPending,
				Reason: "the candidate's Node s1 was deleted after the outgoing voter stepped down: k3s removed its member, so the fleet has one voter fewer until another swap; " +
					"v1 did not finish its demotion within 15m0s: its step-down and member-gone stay on its Node until its agent reports the finish",
				StartedAt: at(11, 30, 0), EndedAt: at(12, 20, 0), Pending: []string{"s1", "v1"}},
			Voters:     []string{"v2", "v3"},
			Pending:    []string{"s1", "v1"},
			Unfinished: []api.UnfinishedDemotion{{Node: "s1", Swap: swap, NodeGone: true}, {Node: "v1", Swap: swap}},
			UpdatedAt:  at(12, 21, 0),
		}},
		{file: "status-runners.json", indent: true, later: true, value: api.Status{V: 1,
			Swap:  &api.SwapRecord{V: 1, ID: swap, Out: "v1", In: "s1", Origin: api.OriginAutomatic, StartedAt: at(11, 30, 0)},
			Step:  api.StepRunnersOut,
			Since: ptr(at(11, 35, 0)),
			Bound: api.Duration(time.Hour),
			Reason: "waiting past its bound 1h0m0s for 2 runner pod(s) on the outgoing voter v1 to finish " +
				"(runners_bound_action is wait; fleet-role swap --cancel rolls the swap back): arc-runners/runner-7kq2p, arc-runners/runner-x9c4d",
			WaitingOn: []string{"arc-runners/runner-7kq2p", "arc-runners/runner-x9c4d"},
			Voters:    []string{"v1", "v2", "v3"},
			UpdatedAt: at(12, 40, 0),
		}},
		{file: "status-history-overrides.json", indent: true, later: true, value: api.Status{V: 1,
			Reason: "no swap: no voter is unfit",
			Last: &api.SwapResult{ID: swap, Out: "v1", In: "s1", Origin: api.OriginManual, Result: api.ResultCompleted,
				StartedAt: at(11, 30, 0), EndedAt: at(12, 10, 0), RequestAt: ptr(at(11, 29, 50)), By: "alice",
				Overrides: []string{api.OverridePause, api.OverrideHolds}},
			History: []api.SwapResult{{ID: swap, Out: "v1", In: "s1", Origin: api.OriginManual, Result: api.ResultCompleted,
				StartedAt: at(11, 30, 0), EndedAt: at(12, 10, 0), RequestAt: ptr(at(11, 29, 50)), By: "alice",
				Overrides: []string{api.OverridePause, api.OverrideHolds}}},
			Voters:    []string{"s1", "v2", "v3"},
			UpdatedAt: at(12, 11, 0),
		}},
		{file: "status-holds.json", indent: true, later: true, value: api.Status{V: 1,
			Reason: "gates held, the outgoing voter v1 is not touched: held: kured's reboot lock is held by v3",
			Voters: []string{"s1", "v1", "v2", "v3"},
			Controller: &api.ControllerState{Leader: "fleet-role-controller-7d9f-x2k4q", DryRun: false,
				Holds:    []string{"kured's reboot lock (kube-system/kured, found by itself)"},
				HoldsOff: []string{"an upgrade Plan applying (the CRD plans.upgrade.cattle.io is not installed)", "an alert active (holds.prometheus_url is empty)"},
				Held:     []string{"kured's reboot lock is held by v3"}},
			UpdatedAt: at(11, 45, 0),
		}},
		{file: "agent-state.json", indent: true, value: api.AgentState{V: 1,
			Handled:  &api.Request{V: 1, Swap: swap, Action: api.RequestStepDown, At: at(11, 50, 0)},
			Finished: "20261129-080000-v2",
			Pending: &api.Report{V: 1, Swap: swap, Action: api.ReportFinish, State: api.StateDone,
				StartedAt: ptr(at(11, 56, 30)), At: at(11, 56, 31)},
			Voters: []string{"s1", "v2", "v3"},
		}},
	}
}

// roleFiles are the role file's contents for each word.
var roleFiles = []struct {
	file string
	role api.HostRole
}{{"role-server", api.HostServer}, {"role-agent", api.HostAgent}}

func encode(t *testing.T, g golden) []byte {
	t.Helper()
	var b []byte
	var err error
	if g.indent {
		b, err = json.MarshalIndent(g.value, "", "  ")
	} else {
		b, err = json.Marshal(g.value)
	}
	require.NoError(t, err)
	return b
}

// decode reads data into a new value of the canonical value's type.
func decode(t *testing.T, g golden, data []byte) any {
	t.Helper()
	v := reflect.New(reflect.TypeOf(g.value))
	require.NoError(t, json.Unmarshal(data, v.Interface()), "%s", g.file)
	return v.Elem().Interface()
}

// read returns a golden file's document: the file without its final
// newline.
func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err, "go test ./api -update writes testdata/*")
	return bytes.TrimSuffix(b, []byte("\n"))
}

// The documents this build writes are the golden files, byte for byte,
// and read back as the values written.
func TestTheWireDocumentsAreTheGoldenFiles(t *testing.T) {
	for _, g := range documents() {
		t.Run(g.file, func(t *testing.T) {
			got := encode(t, g)
			path := filepath.Join("testdata", g.file)
			if *update {
				require.NoError(t, os.WriteFile(path, append(got, '\n'), 0o644))
			}
			assert.Equal(t, string(read(t, path)), string(got), "%s is not what this build writes: a change to the wire format? go test ./api -update rewrites it", path)
			assert.Equal(t, g.value, decode(t, g, got))
		})
	}
	for _, rf := range roleFiles {
		path := filepath.Join("testdata", rf.file)
		if *update {
			require.NoError(t, os.WriteFile(path, rf.role.Bytes(), 0o644))
		}
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		assert.Equal(t, string(b), string(rf.role.Bytes()))
		got, err := api.ParseHostRole(b)
		require.NoError(t, err)
		assert.Equal(t, rf.role, got)
	}
}

// The documents of version 1, as releases before the version field wrote
// them (testdata/v1, written from these values by the release before it),
// read as the same values, with V 1; and the fields they share with this
// build's are the same bytes.
func TestVersion1DocumentsReadAsTheSameValues(t *testing.T) {
	version := regexp.MustCompile(`"v": ?1,\n? *`)
	for _, g := range documents() {
		if g.later {
			continue
		}
		t.Run(g.file, func(t *testing.T) {
			old := read(t, filepath.Join("testdata", "v1", g.file))
			assert.NotContains(t, string(old), `"v"`, "version 1 as written before the version field")
			assert.Equal(t, g.value, decode(t, g, old))
			assert.Equal(t, string(old), version.ReplaceAllString(string(encode(t, g)), ""), "today's fields are written as version 1 wrote them")
		})
	}
	for _, rf := range roleFiles {
		b, err := os.ReadFile(filepath.Join("testdata", "v1", rf.file))
		require.NoError(t, err)
		got, err := api.ParseHostRole(b)
		require.NoError(t, err)
		assert.Equal(t, rf.role, got)
		assert.Equal(t, string(b), string(rf.role.Bytes()))
	}
}

// A request an older CLI wrote with --force (testdata/request-forced.json,
// "force": true) is read as one with every override, and written back
// with them named, not as force.
func TestARequestAnOlderCLIWroteWithForceReadsAsEveryOverride(t *testing.T) {
	var q api.ManualRequest
	require.NoError(t, json.Unmarshal(read(t, filepath.Join("testdata", "request-forced.json")), &q))
	assert.Equal(t, api.ManualRequest{V: 1, Out: "v1", In: "s1", At: at(11, 29, 50), By: "alice",
		Overrides: []string{api.OverridePause, api.OverrideHolds, api.OverrideDomains}}, q)
	assert.NoError(t, q.Validate())
	for _, o := range api.Overrides() {
		assert.True(t, q.Overridden(o), o)
	}
	b, err := json.Marshal(q)
	require.NoError(t, err)
	assert.JSONEq(t, `{"v":1,"out":"v1","in":"s1","at":"2026-11-30T11:29:50Z","by":"alice","overrides":["pause","holds","domains"]}`, string(b))

	require.NoError(t, json.Unmarshal([]byte(`{"out":"v1","in":"s1","at":"2026-11-30T11:29:50Z","force":true,"overrides":["domains","holds"]}`), &q))
	assert.Equal(t, []string{api.OverridePause, api.OverrideHolds, api.OverrideDomains}, q.Overrides, "force with overrides: every one, each once")
	require.NoError(t, json.Unmarshal([]byte(`{"out":"v1","in":"s1","at":"2026-11-30T11:29:50Z","force":false,"overrides":["holds"]}`), &q))
	assert.Equal(t, []string{api.OverrideHolds}, q.Overrides, "force false adds none")
}

// An override the controller does not know is an error of the request and
// of the record, named with the ones it knows; the known ones are not.
func TestAnUnknownOverrideIsAnErrorOfTheRequestAndTheRecord(t *testing.T) {
	q := api.ManualRequest{Out: "v1", In: "s1", At: at(11, 29, 50), Overrides: []string{api.OverrideHolds, "quorum"}}
	assert.EqualError(t, q.Validate(), `field "overrides": "quorum" is not one of pause, holds, domains`)
	q.Overrides = api.Overrides()
	assert.NoError(t, q.Validate())
	rec := api.SwapRecord{ID: "x", Out: "v1", In: "s1", Origin: api.OriginManual, StartedAt: at(11, 30, 0), Overrides: []string{"everything"}}
	assert.EqualError(t, rec.Validate(), `field "overrides": "everything" is not one of pause, holds, domains`)
	rec.Overrides = []string{api.OverridePause}
	assert.NoError(t, rec.Validate())
}

// NormalOverrides names each once, the known ones in their order, the
// unknown ones after as they came.
func TestNormalOverridesNamesEachOnceKnownOnesInTheirOrderThenUnknownOnes(t *testing.T) {
	assert.Equal(t, []string{"pause", "domains", "x"}, api.NormalOverrides([]string{"x", "domains", "pause", "domains", "x"}))
	assert.Nil(t, api.NormalOverrides(nil))
}

// A reader takes a document of a later version as far as it knows it: the
// fields it knows, the version as written, the fields it does not know
// ignored.
func TestALaterVersionIsReadAsFarAsItIsKnown(t *testing.T) {
	var q api.Request
	require.NoError(t, json.Unmarshal([]byte(`{"v":2,"swap":"s","action":"promote","at":"2026-11-30T11:31:00Z","voters":["v2"],"joinToken":{"kind":"new"}}`), &q))
	assert.Equal(t, api.Request{V: 2, Swap: "s", Action: api.RequestPromote, At: at(11, 31, 0), Voters: []string{"v2"}}, q)
	assert.NoError(t, q.Validate())
	b, err := json.Marshal(q)
	require.NoError(t, err)
	assert.JSONEq(t, `{"v":1,"swap":"s","action":"promote","at":"2026-11-30T11:31:00Z","voters":["v2"]}`, string(b), "written back in this build's format")

	var st api.Status
	require.NoError(t, json.Unmarshal([]byte(`{"v":3,"swap":{"v":3,"id":"x","out":"a","in":"b","origin":"manual","startedAt":"2026-11-30T11:30:00Z","eta":"soon"},"updatedAt":"2026-11-30T11:41:00Z","health":{}}`), &st))
	assert.Equal(t, 3, st.V)
	assert.Equal(t, 3, st.Swap.V)
	assert.Equal(t, "x", st.Swap.ID)
	assert.NoError(t, st.Validate())
}

// What a version writes is Version, whatever V holds.
func TestWritersWriteTheCurrentVersion(t *testing.T) {
	for _, v := range []any{api.Request{}, api.Report{}, api.Probe{}, api.SwapRecord{}, api.ManualRequest{}, api.Status{}, api.AgentState{}, api.NotifyQueue{}} {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		var head struct{ V int }
		require.NoError(t, json.Unmarshal(b, &head))
		assert.Equal(t, api.Version, head.V, "%T: %s", v, b)
	}
	b, err := json.Marshal(api.Report{V: 7})
	require.NoError(t, err)
	assert.Contains(t, string(b), `"v":1`)
}

// A wrong type deep in a document names its field by its path, and a
// field's own error is the reader's error, as the controller's messages
// about a malformed annotation say them.
func TestAMalformedDocumentSaysWhereAndWhy(t *testing.T) {
	var st api.Status
	err := json.Unmarshal([]byte(`{"swap":{"id":7}}`), &st)
	var te *json.UnmarshalTypeError
	if assert.ErrorAs(t, err, &te) {
		assert.Equal(t, "swap.id", te.Field)
	}
	var r api.Report
	err = json.Unmarshal([]byte(`{"swap":"x","state":7}`), &r)
	if assert.ErrorAs(t, err, &te) {
		assert.Equal(t, "state", te.Field)
	}
	err = json.Unmarshal([]byte(`{"swap":"x","startedAt":"yesterday"}`), &r)
	var pe *time.ParseError
	assert.ErrorAs(t, err, &pe)
	var p api.Probe
	err = json.Unmarshal([]byte(`{"at":"2026-11-30T11:59:50Z","period":60}`), &p)
	assert.EqualError(t, err, `want a duration string such as "60s", got 60`)
}
