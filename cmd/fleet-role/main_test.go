package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestConfigDefaultControllerIsAcceptedByConfigValidate(t *testing.T) {
	code, out, _ := runCLI(t, "config", "default", "controller")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "# Dry run")
	path := filepath.Join(t.TempDir(), "controller.toml")
	require.NoError(t, os.WriteFile(path, []byte(out), 0o644))
	code, out, _ = runCLI(t, "config", "validate", path)
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "a valid controller configuration")
}

func TestConfigDefaultAgentIsAcceptedByConfigValidate(t *testing.T) {
	code, out, _ := runCLI(t, "config", "default", "agent")
	require.Equal(t, 0, code)
	path := filepath.Join(t.TempDir(), "agent.toml")
	require.NoError(t, os.WriteFile(path, []byte(out), 0o644))
	code, out, _ = runCLI(t, "config", "validate", path)
	assert.Equal(t, 0, code)
	assert.Contains(t, out, "a valid agent configuration")
	code, _, stderr := runCLI(t, "config", "validate", "--kind", "controller", path)
	assert.Equal(t, 2, code, "an agent file is no controller configuration")
	assert.Contains(t, stderr, `unknown key "node_name"`)
}

func TestConfigValidateNamesTheKeyAndExits2(t *testing.T) {
	path := filepath.Join(t.TempDir(), "controller.toml")
	require.NoError(t, os.WriteFile(path, []byte("version = 1\ncooldown = \"-5m\"\n[bounds]\nsnapshot = \"10m\"\nrunnerz = \"1h\"\n"), 0o644))
	code, _, stderr := runCLI(t, "config", "validate", path)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `line 5: unknown key "bounds.runnerz"`)

	require.NoError(t, os.WriteFile(path, []byte("version = 1\ncooldown = \"-5m\"\n"), 0o644))
	code, _, stderr = runCLI(t, "config", "validate", path)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "cooldown: must not be negative")
}

func TestBadUsageExits2(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"config", "default"},
		{"config", "default", "toaster"},
		{"config", "validate"},
		{"plan", "--nope"},
		{"version", "extra"},
	} {
		code, _, stderr := runCLI(t, args...)
		assert.Equal(t, 2, code, "args %q: %s", args, stderr)
		assert.NotEmpty(t, stderr)
	}
}

func TestVersionPrintsTheVersion(t *testing.T) {
	code, out, _ := runCLI(t, "version")
	assert.Equal(t, 0, code)
	assert.True(t, strings.HasPrefix(out, "fleet-role "))
}

func TestAgentWithABadConfigExits2NamingTheKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.toml")
	require.NoError(t, os.WriteFile(path, []byte("version = 1\nnode_name = \"h1\"\nplatfrom = \"docker\"\n[[servers]]\nname = \"h1\"\naddress = \"10.0.0.1\"\n"), 0o644))
	code, _, stderr := runCLI(t, "agent", "--config", path)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, `line 3: unknown key "platfrom"`)

	code, _, stderr = runCLI(t, "agent", "--config", filepath.Join(t.TempDir(), "missing.toml"))
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "missing.toml")
}
