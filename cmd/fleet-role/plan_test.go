package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

func TestPlanPrintsJSONYAMLTextAndWide(t *testing.T) {
	file := filepath.Join("..", "..", "docs", "examples", "step-down.json")
	plan := func(output string) string {
		code, out, stderr := runCLI(t, "plan", "-f", file, "--at", "2026-11-30T12:00:00Z", "-o", output)
		require.Equal(t, 0, code, stderr)
		return out
	}
	var fromJSON, fromYAML map[string]any
	require.NoError(t, json.Unmarshal([]byte(plan("json")), &fromJSON))
	require.NoError(t, yaml.Unmarshal([]byte(plan("yaml")), &fromYAML))
	assert.Equal(t, fromJSON, fromYAML, "the same document, the same field names")

	text, wide := plan("text"), plan("wide")
	assert.NotContains(t, text, "request:")
	assert.Contains(t, wide, text[:len(text)-1], "wide is the text and more")
	assert.Contains(t, wide, `request: {"v":1,"swap":"20261130-113000-v1","action":"step-down","at":"2026-11-30T12:00:00Z","leader":"s1"}`)

	code, _, stderr := runCLI(t, "plan", "-f", file, "-o", "table")
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "want json, yaml, text or wide")
}

func TestPlanTextNamesTheUnfinishedDemotionsAndWideWhatAClearFinishedClears(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	p := swapplan.Plan{Action: swapplan.Action{Type: api.ActionClearFinished, Node: "v1", Swap: "20261130-113000-v1", Uncordon: true},
		Reason: "v1 finished its demotion", Voters: []string{"s1", "v2", "v3"},
		Pending: []api.UnfinishedDemotion{{Node: "s2", Swap: "20261129-080000-v2", NodeGone: true}}}
	var text, wide strings.Builder
	require.NoError(t, writePlanText(&text, p, now, false))
	require.NoError(t, writePlanText(&wide, p, now, true))
	assert.Contains(t, text.String(), "action:  clear-finished v1\n")
	assert.Contains(t, text.String(), "unfinished: s2 (swap 20261129-080000-v2, its Node gone)\n")
	assert.NotContains(t, text.String(), "clears:")
	assert.Contains(t, wide.String(), "clears:  the annotations of swap 20261130-113000-v1, its cordon lifted first\n")
}
