package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/controller/adapt"
	"github.com/fleet-role/fleet-role/swapplan"
)

// dryRunCluster is the fleet of docs/examples/dry-run-decision.json (three
// voters, v2 unfit, s1 a fit standby, nothing under way) in a fake
// clientset, each object changed by edit first, and the time it was read.
func dryRunCluster(t *testing.T, edit func(in *adapt.Input)) (*k8sfake.Clientset, time.Time) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "docs", "examples", "dry-run-decision.json"))
	require.NoError(t, err)
	defer f.Close()
	in, err := adapt.ReadList(f, api.Namespace)
	require.NoError(t, err)
	now := captureTime(in)
	if edit != nil {
		edit(&in)
	}
	var objs []runtime.Object
	for _, n := range in.Nodes {
		objs = append(objs, n)
	}
	for _, l := range in.NodeLeases {
		objs = append(objs, l)
	}
	if in.Lease != nil {
		objs = append(objs, in.Lease)
	}
	if in.Status != nil {
		objs = append(objs, in.Status)
	}
	return k8sfake.NewClientset(objs...), now
}

// editStatus changes the status the controller published.
func editStatus(t *testing.T, in *adapt.Input, edit func(st *api.Status)) {
	t.Helper()
	var st api.Status
	require.NoError(t, json.Unmarshal([]byte(in.Status.Data[api.StatusKey]), &st))
	edit(&st)
	b, err := json.Marshal(st)
	require.NoError(t, err)
	in.Status.Data[api.StatusKey] = string(b)
}

func pauseBy(t *testing.T, in *adapt.Input, at time.Time) {
	t.Helper()
	b, err := json.Marshal(api.Pause{By: "alice", Reason: "kernel upgrades", At: at})
	require.NoError(t, err)
	in.Status.Data[api.PauseKey] = string(b)
}

func held(t *testing.T, in *adapt.Input) {
	editStatus(t, in, func(st *api.Status) {
		st.Controller = &api.ControllerState{Leader: "c-0", Held: []string{"kured's reboot lock is held by a1"}}
	})
}

func zoned(in *adapt.Input) {
	for _, n := range in.Nodes {
		if zone, ok := map[string]string{"v1": "a", "v2": "b", "v3": "c", "s1": "a"}[n.Name]; ok {
			n.Labels["topology.kubernetes.io/zone"] = zone
		}
	}
}

// A dry run of a swap nothing holds says it would start at the next pass
// and lists the planner's steps of a live voter's swap in their order;
// it reads the cluster and writes nothing to it.
func TestSwapDryRunOfASwapNothingHoldsSaysItWouldStartAndItsStepsAndWritesNothing(t *testing.T) {
	client, now := dryRunCluster(t, nil)
	q := api.ManualRequest{Out: "v2", In: "s1", At: now.Truncate(time.Second), By: "alice"}
	p, err := previewSwap(context.Background(), client, config.DefaultController(), q, now)
	require.NoError(t, err)
	assert.True(t, p.Start, "%+v", p)
	assert.Empty(t, p.Obstacles)
	assert.Equal(t, api.ActionStart, p.Next.Type)
	assert.Contains(t, p.Next.Reason, "carrying out the manual request of alice to swap v2 for s1")
	assert.False(t, p.Dead)
	assert.Equal(t, swapplan.Steps(false), p.Steps)
	for _, a := range client.Actions() {
		assert.Contains(t, []string{"get", "list"}, a.GetVerb(), "a dry run writes nothing: %s %s", a.GetVerb(), a.GetResource().Resource)
	}

	var text strings.Builder
	require.NoError(t, writePreview(&text, p))
	out := text.String()
	assert.Contains(t, out, "dry run, nothing written: swap v2 out for s1 in, by alice\n")
	assert.Contains(t, out, "would start: yes, at the controller's next pass\n")
	assert.Contains(t, out, "steps, in order:\n   1. start\n   2. snapshot\n   3. cordon-in\n")
	assert.Contains(t, out, "  17. end\n")
}

// With the pause, a hold and a crowded failure domain at once, the dry
// run names each reason; each override it is given takes its own off the
// list and no other, and with all three the swap would start.
func TestSwapDryRunNamesEachReasonThatHoldsOrRefusesTheSwapAndEachOverrideTakesOffOnlyItsOwn(t *testing.T) {
	var client *k8sfake.Clientset
	var now time.Time
	client, now = dryRunCluster(t, func(in *adapt.Input) {
		pauseBy(t, in, time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC))
		held(t, in)
		zoned(in)
	})
	previewWith := func(overrides ...string) swapPreview {
		q := api.ManualRequest{Out: "v2", In: "s1", At: now.Truncate(time.Second), By: "alice", Overrides: overrides}
		p, err := previewSwap(context.Background(), client, config.DefaultController(), q, now)
		require.NoError(t, err)
		return p
	}
	p := previewWith()
	assert.False(t, p.Start)
	assert.Equal(t, []string{
		"waits: paused by alice at 2026-11-30T09:00:00Z: kernel upgrades; fleet-role resume, or swap --override pause",
		"waits: held: kured's reboot lock is held by a1; or swap --override holds",
		`is refused: it would put 2 of the 3 voters in topology.kubernetes.io/zone "a", a majority: losing that domain would lose quorum; or swap --override domains`,
	}, p.Obstacles)
	assert.Equal(t, api.ActionNone, p.Next.Type)
	assert.Equal(t, "the manual request to swap v2 for s1 "+p.Obstacles[0], p.Next.Reason, "the planner waits for the first")
	require.NotNil(t, p.HoldsReadAt)

	var text strings.Builder
	require.NoError(t, writePreview(&text, p))
	assert.Contains(t, text.String(), "would start: no; held or refused, each reason:\n  - waits: paused by alice")
	assert.Contains(t, text.String(), "\n  - waits: held: kured's reboot lock is held by a1; or swap --override holds\n")
	assert.Contains(t, text.String(), "holds: as the controller last read them, at ")

	for i, o := range api.Overrides() {
		left := previewWith(o).Obstacles
		assert.Len(t, left, 2, o)
		assert.NotContains(t, left, p.Obstacles[i], o)
	}
	all := previewWith(api.Overrides()...)
	assert.True(t, all.Start, "%+v", all)
	assert.Empty(t, all.Obstacles)
	assert.Contains(t, all.Next.Reason, ", past: pause, holds, domains")
}

// A dry run whose OUT is no voter says so, and -o json and -o yaml print
// the same document.
func TestSwapDryRunOfAWrongOutSaysWhyAndPrintsTheSameDocumentAsJSONAndYAML(t *testing.T) {
	client, now := dryRunCluster(t, nil)
	p, err := previewSwap(context.Background(), client, config.DefaultController(), api.ManualRequest{Out: "s1", In: "a1", At: now, By: "alice"}, now)
	require.NoError(t, err)
	assert.False(t, p.Start)
	assert.Equal(t, []string{"is refused: s1 is not a voter"}, p.Obstacles)
	var j, y strings.Builder
	require.NoError(t, encode(&j, "json", p))
	require.NoError(t, encode(&y, "yaml", p))
	var fromJSON, fromYAML map[string]any
	require.NoError(t, json.Unmarshal([]byte(j.String()), &fromJSON))
	require.NoError(t, yaml.Unmarshal([]byte(y.String()), &fromYAML))
	assert.Equal(t, fromJSON, fromYAML)
	assert.Equal(t, false, fromJSON["start"])
	assert.Equal(t, []any{"is refused: s1 is not a voter"}, fromJSON["obstacles"])
	assert.Len(t, fromJSON["steps"], len(swapplan.Steps(false)))
}

// --force is no longer the hammer: it is a usage error that names the
// overrides; an override swap does not know, -o without --dry-run,
// --dry-run with --wait or --cancel, and --override with --cancel are
// usage errors too; none reaches for the cluster.
func TestSwapForceAndWrongOverridesAreUsageErrorsThatNameTheOverrides(t *testing.T) {
	code, _, stderr := runCLI(t, "swap", "--force", "v2", "s1")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, "--force is gone")
	assert.Contains(t, stderr, "--override pause (the controller is paused), --override holds (a hold is in force), --override domains")

	code, _, stderr = runCLI(t, "swap", "v2", "s1", "--override", "pause,quorum")
	assert.Equal(t, exitUsage, code)
	assert.Contains(t, stderr, `--override "quorum": want pause, holds, domains`)

	for _, args := range [][]string{
		{"swap", "v2", "s1", "-o", "json"},
		{"swap", "--dry-run", "v2", "s1", "-o", "table"},
		{"swap", "--dry-run", "--wait", "v2", "s1"},
		{"swap", "--dry-run", "--cancel"},
		{"swap", "--cancel", "--override", "pause"},
	} {
		code, _, stderr = runCLI(t, args...)
		assert.Equal(t, exitUsage, code, "%q: %s", args, stderr)
	}
	code, out, _ := runCLI(t, "swap", "--help")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "--override")
	assert.Contains(t, out, "--dry-run")
	assert.NotContains(t, out, "  --force", "the hammer is not offered")
}

// --override completes with the overrides not named yet, each with what
// it passes, and after a comma the rest of the list.
func TestSwapOverrideCompletesTheOverridesNotNamedYet(t *testing.T) {
	cmd := newSwapCommand()
	names := func(toComplete string) []string {
		got, _ := completeOverrides(cmd, nil, toComplete)
		var out []string
		for _, c := range got {
			out = append(out, strings.SplitN(c, "\t", 2)[0])
		}
		return out
	}
	assert.Equal(t, []string{"pause", "holds", "domains"}, names(""))
	assert.Equal(t, []string{"holds"}, names("h"))
	assert.Equal(t, []string{"pause,holds", "pause,domains"}, names("pause,"))
	require.NoError(t, cmd.Flags().Set("override", "holds"))
	assert.Equal(t, []string{"pause", "domains"}, names(""))
	got, _ := completeOverrides(cmd, nil, "d")
	require.Len(t, got, 1)
	assert.Contains(t, got[0], "failure domain")
}

// A dry run of the swap of a voter dead by every sign lists the dead
// voter's steps, its member removed before the candidate's promotion, and
// says so.
func TestSwapDryRunOfADeadVoterListsTheDeadVotersSteps(t *testing.T) {
	gone := time.Date(2026, 11, 30, 11, 40, 0, 0, time.UTC)
	client, now := dryRunCluster(t, func(in *adapt.Input) {
		for _, n := range in.Nodes {
			var p map[string]any
			require.NoError(t, json.Unmarshal([]byte(n.Annotations[api.AnnotationProbe]), &p))
			switch n.Name {
			case "v2":
				p["at"] = gone.Format(time.RFC3339)
				for i := range n.Status.Conditions {
					if n.Status.Conditions[i].Type == "Ready" {
						n.Status.Conditions[i].Status = "False"
						n.Status.Conditions[i].LastHeartbeatTime.Time = gone
					}
				}
			case "v1", "v3":
				p["unreachable"] = []string{"v2-0a1b2c3d"}
			default:
				continue
			}
			b, err := json.Marshal(p)
			require.NoError(t, err)
			n.Annotations[api.AnnotationProbe] = string(b)
		}
		for _, l := range in.NodeLeases {
			if l.Name == "v2" {
				l.Spec.RenewTime.Time = gone
			}
		}
	})
	p, err := previewSwap(context.Background(), client, config.DefaultController(), api.ManualRequest{Out: "v2", In: "s1", At: now, By: "alice"}, now)
	require.NoError(t, err)
	require.True(t, p.Start, "%+v", p)
	assert.True(t, p.Dead)
	assert.Equal(t, swapplan.Steps(true), p.Steps)
	var text strings.Builder
	require.NoError(t, writePreview(&text, p))
	assert.Contains(t, text.String(), "steps, in order (v2 is dead by every sign: its member is removed before s1 is promoted):\n")
}

// withK3sConfig gives the Nodes' probes the k3s server config each
// host's agent publishes.
func withK3sConfig(t *testing.T, in *adapt.Input, configs map[string]api.K3sConfig) {
	t.Helper()
	for _, n := range in.Nodes {
		c, ok := configs[n.Name]
		if !ok {
			continue
		}
		var p map[string]any
		require.NoError(t, json.Unmarshal([]byte(n.Annotations[api.AnnotationProbe]), &p))
		p["k3sConfig"] = c
		b, err := json.Marshal(p)
		require.NoError(t, err)
		n.Annotations[api.AnnotationProbe] = string(b)
	}
}

// A dry run of a swap to a standby whose staged k3s setting differs from
// the voters' is refused naming the setting and both values; one whose
// agent publishes no config would start, and the dry run says what was not
// compared.
func TestSwapDryRunRefusesAStandbyWhoseStagedK3sSettingDiffersAndSaysWhatItCouldNotCompare(t *testing.T) {
	voters := api.K3sConfig{Critical: map[string]string{"cluster-cidr": "10.42.0.0/16"}}
	staged := api.K3sConfig{Critical: map[string]string{"cluster-cidr": "10.44.0.0/16"}}
	client, now := dryRunCluster(t, func(in *adapt.Input) {
		withK3sConfig(t, in, map[string]api.K3sConfig{"v1": voters, "v2": voters, "v3": voters, "s1": staged})
	})
	q := api.ManualRequest{Out: "v2", In: "s1", At: now.Truncate(time.Second), By: "alice"}
	p, err := previewSwap(context.Background(), client, config.DefaultController(), q, now)
	require.NoError(t, err)
	assert.False(t, p.Start)
	const why = "is refused: s1's staged cluster-cidr 10.44.0.0/16 differs from the voters' 10.42.0.0/16: k3s would refuse its join"
	assert.Equal(t, []string{why}, p.Obstacles)
	assert.Empty(t, p.Preflight)
	var text strings.Builder
	require.NoError(t, writePreview(&text, p))
	assert.Contains(t, text.String(), "would start: no; held or refused, each reason:\n  - "+why+"\n")

	client, now = dryRunCluster(t, nil) // no agent publishes a config
	q.At = now.Truncate(time.Second)
	p, err = previewSwap(context.Background(), client, config.DefaultController(), q, now)
	require.NoError(t, err)
	assert.True(t, p.Start, "%+v", p)
	assert.Equal(t, "s1's agent publishes no k3s server config (an older agent): its settings are not compared with the voters'", p.Preflight)
	text.Reset()
	require.NoError(t, writePreview(&text, p))
	assert.Contains(t, text.String(), "\npreflight: "+p.Preflight+"\n")
}
