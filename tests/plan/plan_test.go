package plan_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

var binary string

func TestMain(m *testing.M) {
	os.Exit(testhost.RunWithFleetRole(m, &binary))
}

// planOf runs `fleet-role plan` on the cluster's List and decodes its answer.
func planOf(t *testing.T, c *cluster, extra ...string) swapplan.Plan {
	t.Helper()
	out, stderr, code := run(t, c.list(), extra...)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	var p swapplan.Plan
	require.NoError(t, json.Unmarshal(out, &p), "output: %s", out)
	return p
}

// run plans list at now.
func run(t *testing.T, list []byte, extra ...string) (stdout, stderr []byte, code int) {
	t.Helper()
	return runAt(t, list, append([]string{"--at", now.Format(time.RFC3339)}, extra...)...)
}

// runAt plans list at the time extra says, the List's own where it says none.
func runAt(t *testing.T, list []byte, extra ...string) (stdout, stderr []byte, code int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.json")
	require.NoError(t, os.WriteFile(path, list, 0o644))
	args := append([]string{"plan", "-f", path}, extra...)
	cmd := exec.Command(binary, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run fleet-role: %v", err)
	}
	return o.Bytes(), e.Bytes(), code
}

func liveConfig(t *testing.T) []string {
	path := filepath.Join(t.TempDir(), "controller.toml")
	require.NoError(t, os.WriteFile(path, []byte("version = 1\ndry_run = false\n"), 0o644))
	return []string{"--config", path}
}

func assertAction(t *testing.T, p swapplan.Plan, typ, node, step, reason string) {
	t.Helper()
	assert.Equal(t, typ, p.Action.Type, p.Reason)
	assert.Equal(t, node, p.Action.Node, p.Reason)
	assert.Equal(t, step, p.Step, p.Reason)
	assert.Contains(t, p.Reason, reason)
}

// atStepDown: the swap has promoted s1, cordoned and drained v1, and asked
// it to step down.
func atStepDown(c *cluster) *api.SwapRecord {
	rec := c.swap("v1", "s1", api.StepStepDown, time.Minute)
	c.promoted(rec, "s1", 10*time.Minute)
	c.lists([]string{"v1", "v2", "v3", "s1"}, "v1", "v2", "v3", "s1")
	c.cordon("v1", rec.ID)
	c.request(rec, "v1", api.RequestStepDown, time.Minute)
	return rec
}

func TestPlanPlansWithTheDefaultConfigurationUnlessOneIsGiven(t *testing.T) {
	c := newCluster()
	c.status.Verdicts = map[string]api.Verdict{
		"v2": {State: api.VerdictUnfit, Score: 3, Reason: "fsync p99 31 ms in 20 of 25 samples"},
		"s1": {State: api.VerdictFit, Score: 0.2},
	}
	p := planOf(t, c)
	assertAction(t, p, api.ActionNone, "", "", "dry run: would swap v2 for s1")
	require.NotNil(t, p.Decision, "dry run is on by default")
	assert.Nil(t, p.Swap)

	p = planOf(t, c, liveConfig(t)...)
	assertAction(t, p, api.ActionStart, "", api.StepStart, "swapping v2 for s1")
	assert.Equal(t, api.OriginAutomatic, p.Swap.Origin)
}

func TestPlanWaitsForThePodsTheDefaultRunnerSelectorPicksForTheDefaultRunnerWait(t *testing.T) {
	c := newCluster()
	rec := c.swap("v1", "s1", api.StepRunnersIn, 59*time.Minute)
	c.snapshotDone(rec, "v2")
	c.cordon("s1", rec.ID)
	c.runner("runner-7x2", "s1")
	assertAction(t, planOf(t, c), api.ActionNone, "", api.StepRunnersIn, "arc-runners/runner-7x2")

	c.status.Since = ptr.To(now.Add(-61 * time.Minute))
	assertAction(t, planOf(t, c), api.ActionAbandon, "", api.StepAbandon, "did not finish within the runner wait 1h0m0s")
}

func TestPlanTextOutputReadsAtAGlance(t *testing.T) {
	c := newCluster()
	atStepDown(c)
	out, _, code := run(t, c.list(), "-o", "text")
	require.Equal(t, 0, code)
	text := string(out)
	for _, want := range []string{
		"step:    step-down  since 2026-11-30T11:59:00Z (1m0s ago, bound 5m0s)",
		"action:  none  (renewing the Lease)",
		"reason:  the removal waits for the step-down while v1 is Ready",
		"swap:    20261130-113000-v1: v1 out, s1 in (manual, started 2026-11-30T11:30:00Z)",
		"voters:  s1 v1 v2 v3",
	} {
		assert.Contains(t, text, want)
	}
}

func TestPlanWithoutATimePlansAtTheListsNewestLeaseRenewalAndWithNowAtTheCurrentTime(t *testing.T) {
	c := newCluster()
	atStepDown(c)
	c.beats["v2"] = now // the newest renewal in the List
	out, stderr, code := runAt(t, c.list(), "-o", "text")
	require.Equal(t, 0, code, "stderr: %s", stderr)
	assert.Contains(t, string(out), "at:      2026-11-30T12:00:00Z\n")
	assert.Contains(t, string(out), "step:    step-down  since 2026-11-30T11:59:00Z (1m0s ago, bound 5m0s)")
	at, _, _ := run(t, c.list(), "-o", "text")
	assert.Equal(t, string(at), string(out), "the List's time is the time --at gives")

	out, stderr, code = runAt(t, c.list(), "--now", "-o", "json")
	require.Equal(t, 0, code, "stderr: %s", stderr)
	var p swapplan.Plan
	require.NoError(t, json.Unmarshal(out, &p))
	assert.NotEqual(t, api.StepStepDown, p.Step, "days past the capture, the step-down is past its bound: %+v", p)
}

func TestPlanOfAListThatTellsNoTimeAsksForOneWithExitCode2(t *testing.T) {
	list := []byte(`{"apiVersion":"v1","kind":"List","items":[]}`)
	_, stderr, code := runAt(t, list)
	assert.Equal(t, 2, code)
	assert.Contains(t, string(stderr), "it tells no time it was read at (no Lease renewal, Node heartbeat or published status): give --at TIME or --now")
	_, stderr, code = runAt(t, list, "--now")
	assert.Equal(t, 0, code, "stderr: %s", stderr)
}

func TestPlanRefusesBadInputWithExitCode2(t *testing.T) {
	bad := func(edit func(c *cluster)) []byte {
		c := newCluster()
		edit(c)
		return c.list()
	}
	for _, tc := range []struct {
		name string
		list []byte
		want string
	}{
		{"bad JSON says where", []byte("{\"kind\": \"List\",\n \"items\": [\n {\"kind\": }]}"), "invalid JSON at line 3, column 11"},
		{"not a List", []byte(`{"kind":"Node"}`), `missing field "items"`},
		{"an item without a kind", []byte(`{"items":[{"apiVersion":"v1","metadata":{"name":"x"}}]}`), `items[0]: missing field "kind"`},
		{"a Node without a name", []byte(`{"items":[{"apiVersion":"v1","kind":"Node","metadata":{}}]}`), `items[0] (Node): missing field "metadata.name"`},
		{"a Pod without a namespace", []byte(`{"items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}]}`), `items[0] (pod/p): missing field "metadata.namespace"`},
		{"a field of the wrong type", []byte(`{"items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"},"spec":{"unschedulable":"yes"}}]}`),
			`node/n: field "spec.unschedulable": want bool, got a JSON string`},
		{"a malformed report", bad(func(c *cluster) {
			c.annotate("v2", api.AnnotationReport, `{"swap":"x","action":"promote","state":"maybe","at":"2026-11-30T11:00:00Z"}`)
		}),
			`node/v2: annotation fleet-role.io/report: field "state": "maybe" is not one of done, refused, failed`},
		{"a probe that is not JSON", bad(func(c *cluster) { c.probes["v3"] = nil; c.annotate("v3", api.AnnotationProbe, "fast") }),
			"node/v3: annotation fleet-role.io/probe: invalid JSON"},
		{"a request without its swap", bad(func(c *cluster) {
			c.annotate("s1", api.AnnotationRequest, `{"action":"promote","at":"2026-11-30T11:00:00Z"}`)
		}),
			`node/s1: annotation fleet-role.io/request: field "swap": missing`},
		{"a swap record with a bad origin", bad(func(c *cluster) {
			c.holdLease(api.ControllerHolder, &api.SwapRecord{ID: "x", Out: "v1", In: "s1", Origin: "robot", StartedAt: now})
		}), `lease/fleet-role/regrade: annotation fleet-role.io/swap: field "origin": "robot" is not one of manual, automatic`},
		{"a manual request naming one node twice", bad(func(c *cluster) { c.manual = &api.ManualRequest{Out: "v1", In: "v1", At: now} }),
			`configmap/fleet-role/fleet-role-status: key request.json: fields "out" and "in": name the same node "v1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := run(t, tc.list)
			assert.Equal(t, 2, code, "stdout: %s", out)
			assert.Empty(t, out)
			assert.Contains(t, string(stderr), tc.want)
		})
	}
}

func TestPlanRefusesBadUsageWithExitCode2(t *testing.T) {
	c := newCluster()
	_, stderr, code := run(t, c.list(), "--at", "yesterday")
	assert.Equal(t, 2, code)
	assert.Contains(t, string(stderr), `--at "yesterday": want an RFC 3339 time`)
	_, stderr, code = runAt(t, c.list(), "--now", "2026-11-30T12:00:00Z")
	assert.Equal(t, 2, code, "--now takes no time")
	assert.Contains(t, string(stderr), `"2026-11-30T12:00:00Z" is a time: give it as --at 2026-11-30T12:00:00Z (--now takes no value)`)
	_, stderr, code = runAt(t, c.list(), "--now", "--at", "2026-11-30T12:00:00Z")
	assert.Equal(t, 2, code)
	assert.Contains(t, string(stderr), "--at and --now: one or the other")

	cfg := filepath.Join(t.TempDir(), "bad.toml")
	require.NoError(t, os.WriteFile(cfg, []byte("version = 1\n[bounds]\njion = \"1m\"\n"), 0o644))
	_, stderr, code = run(t, c.list(), "--config", cfg)
	assert.Equal(t, 2, code)
	assert.Contains(t, string(stderr), `line 3: unknown key "bounds.jion"`)

	_, stderr, code = run(t, c.list(), "-o", "table")
	assert.Equal(t, 2, code)
	assert.True(t, strings.Contains(string(stderr), "want json, yaml, text or wide"))
}
