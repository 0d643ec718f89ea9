package main

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

func TestPlanPrintsJSONYAMLTextAndWide(t *testing.T) {
	file := filepath.Join("..", "..", "docs", "examples", "step-down.json")
	plan := func(output string) string {
		code, out, stderr := runCLI(t, "plan", "-f", file, "--now", "2026-11-30T12:00:00Z", "-o", output)
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
