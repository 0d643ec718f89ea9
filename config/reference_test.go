package config_test

import (
	"bytes"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/config/internal/refdoc"
)

func TestTheConfigurationReferenceIsWhatTheGeneratorMakesNow(t *testing.T) {
	want, err := refdoc.Render(".")
	require.NoError(t, err)
	have, err := os.ReadFile(filepath.Join("..", "docs", "config-reference.md"))
	require.NoError(t, err)
	if bytes.Equal(want, have) {
		return
	}
	wantLines, haveLines := strings.Split(string(want), "\n"), strings.Split(string(have), "\n")
	for i := 0; ; i++ {
		w, h := line(wantLines, i), line(haveLines, i)
		if w != h {
			t.Fatalf("docs/config-reference.md is not current (run go run ./config/gendoc); line %d is\n\t%s\nand would be\n\t%s", i+1, h, w)
		}
	}
}

// line is the i-th line, or a mark past the last.
func line(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(past the end of the file)"
}

func TestTheKeysTheReferenceCallsRequiredAreRequired(t *testing.T) {
	const server = "[[servers]]\nname = \"h1\"\naddress = \"10.0.0.1\"\n"
	// Each file without one of its required keys, and the problem that
	// names the key; the files with all of them are accepted.
	type without struct{ toml, problem string }
	files := map[string]struct {
		parse    func([]byte) error
		complete string
		without  map[string]without
	}{
		"agent": {
			parse:    func(b []byte) error { _, err := config.ParseAgent(b); return err },
			complete: "version = 1\nnode_name = \"h1\"\n" + server,
			without: map[string]without{
				"version":         {"node_name = \"h1\"\n" + server, "version: must be 1, got 0"},
				"node_name":       {"version = 1\n" + server, "node_name: is required"},
				"servers":         {"version = 1\nnode_name = \"h1\"\n", "servers: at least one server is required"},
				"servers.name":    {"version = 1\nnode_name = \"h1\"\n[[servers]]\naddress = \"10.0.0.1\"\n", "servers[0].name: is required"},
				"servers.address": {"version = 1\nnode_name = \"h1\"\n[[servers]]\nname = \"h1\"\n", "servers[0].address: is required"},
			},
		},
		"controller": {
			parse:    func(b []byte) error { _, err := config.ParseController(b); return err },
			complete: "version = 1\n",
			without:  map[string]without{"version": {"dry_run = true\n", "version: must be 1, got 0"}},
		},
	}
	require.Len(t, refdoc.Files, len(files))
	for _, f := range refdoc.Files {
		c, ok := files[f.Kind]
		require.True(t, ok, "no case for the %s configuration", f.Kind)
		assert.ElementsMatch(t, slices.Sorted(maps.Keys(c.without)), f.Required, "the %s configuration's required keys", f.Kind)
		require.NoError(t, c.parse([]byte(c.complete)), "the %s configuration with every required key", f.Kind)
		for key, w := range c.without {
			err := c.parse([]byte(w.toml))
			if assert.Error(t, err, "the %s configuration without %s", f.Kind, key) {
				assert.Contains(t, err.Error(), w.problem)
			}
		}
	}
}
