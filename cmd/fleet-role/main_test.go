package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
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
	code, out, _ = runCLI(t, "config", "validate", "--files=false", path)
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
		{"help", "nosuch"},
		{"help", "config", "nosuch"},
	} {
		code, _, stderr := runCLI(t, args...)
		assert.Equal(t, 2, code, "args %q: %s", args, stderr)
		assert.NotEmpty(t, stderr)
	}
}

// linked sets the values make build links in, for one test.
func linked(t *testing.T, v, c, d string) {
	old := [3]string{version, commit, date}
	version, commit, date = v, c, d
	t.Cleanup(func() { version, commit, date = old[0], old[1], old[2] })
}

func TestVersionFlagAndCommandPrintTheLinkedVersionCommitAndDate(t *testing.T) {
	linked(t, "0.4.0~rc.1+3.gabc1234", "abc1234def", "2026-11-30T12:00:00Z")
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, out, stderr := runCLI(t, args...)
		assert.Equal(t, 0, code, "%q: %s", args, stderr)
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		require.Len(t, lines, 4, "%q: %s", args, out)
		assert.Equal(t, "fleet-role 0.4.0~rc.1+3.gabc1234", lines[0])
		assert.Equal(t, "commit: abc1234def", lines[1])
		assert.Equal(t, "date: 2026-11-30T12:00:00Z", lines[2])
		assert.True(t, strings.HasPrefix(lines[3], "go: go1."), lines[3])
	}
}

func TestVersionWithNothingLinkedSaysDevelAndUnknown(t *testing.T) {
	linked(t, "", "", "")
	code, out, _ := runCLI(t, "--version")
	assert.Equal(t, 0, code)
	// A test binary carries neither a module version nor VCS stamps.
	assert.True(t, strings.HasPrefix(out, "fleet-role (devel)\ncommit: unknown\ndate: unknown\n"), out)
}

func TestVersionFallsBackToWhatTheGoToolchainStamped(t *testing.T) {
	bi := &debug.BuildInfo{Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "3dda220ac32f"},
		{Key: "vcs.time", Value: "2026-12-01T10:12:41Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	c, d := vcs(bi, "")
	assert.Equal(t, "3dda220ac32f-dirty", c)
	assert.Equal(t, "2026-12-01T10:12:41Z", d)
	_, d = vcs(bi, "2026-11-30T12:00:00Z")
	assert.Equal(t, "2026-11-30T12:00:00Z", d, "a linked date wins")
	bi.Settings[3].Value = "false"
	c, _ = vcs(bi, "")
	assert.Equal(t, "3dda220ac32f", c)
	c, d = vcs(&debug.BuildInfo{}, "")
	assert.Empty(t, c)
	assert.Empty(t, d)
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

func TestConfigValidateChecksTheFilesAnAgentsConfigurationNames(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	role, kubeconfig := write("role", "server\n"), write("kubeconfig", "apiVersion: v1\n")
	cert := write("client.crt", "")
	conf := fmt.Sprintf(`version = 1
node_name = "h1"
role_file = %q
kubeconfig = %q
token_file = %q
[[servers]]
name = "h1"
address = "10.0.0.1"
[etcd]
cert_file = %q
ca_file = %q
`, role, kubeconfig, filepath.Join(dir, "token"), cert, filepath.Join(dir, "ca.crt"))
	path := write("agent.toml", conf)

	code, out, stderr := runCLI(t, "config", "validate", path)
	assert.Equal(t, 2, code, "the token the kubeconfig reads is not there")
	assert.Contains(t, stderr, "token_file: open "+filepath.Join(dir, "token"))
	assert.NotContains(t, stderr, "role_file")
	assert.Contains(t, out, "note: etcd.ca_file: "+filepath.Join(dir, "ca.crt")+" is not there yet",
		"k3s writes etcd's certificates when a server first starts")
	assert.NotContains(t, out, "etcd.cert_file", "a certificate that is there is read")

	write("token", "t")
	code, out, stderr = runCLI(t, "config", "validate", path)
	assert.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "a valid agent configuration")

	require.NoError(t, os.Remove(cert))
	require.NoError(t, os.Mkdir(cert, 0o755))
	code, _, stderr = runCLI(t, "config", "validate", path)
	assert.Equal(t, 2, code)
	assert.Contains(t, stderr, "etcd.cert_file: "+cert+" is a directory")

	code, _, stderr = runCLI(t, "config", "validate", "--files=false", path)
	assert.Equal(t, 0, code, "a configuration made for another host: %s", stderr)
}

func TestAMistypedCommandOrFlagIsBadUsageWithASuggestion(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		suggest string
	}{
		{[]string{"sttaus"}, "Did you mean this?\n\tstatus"},
		{[]string{"swpa"}, "Did you mean this?\n\tswap"},
		{[]string{"config", "valdate"}, "Did you mean this?\n\tvalidate"},
		{[]string{"status", "--wach"}, "Did you mean this?\n\t--watch"},
		{[]string{"plan", "--fil", "x"}, "Did you mean this?\n\t--file"},
		{[]string{"status", "--out", "json"}, "Did you mean this?\n\t--output"},
		{[]string{"help", "sttaus"}, "Did you mean this?\n\tstatus"},
		{[]string{"help", "config", "valdate"}, "Did you mean this?\n\tvalidate"},
	} {
		code, _, stderr := runCLI(t, tc.args...)
		assert.Equal(t, 2, code, "%q", tc.args)
		assert.Contains(t, stderr, tc.suggest, "%q", tc.args)
	}
	code, _, stderr := runCLI(t, "frobnicate")
	assert.Equal(t, 2, code)
	assert.NotContains(t, stderr, "Did you mean", "nothing close")
}

func TestDashVIsNotTheVersionAsKubectlsIsVerbosity(t *testing.T) {
	code, out, stderr := runCLI(t, "-v")
	assert.Equal(t, 2, code, stderr)
	assert.Empty(t, out)
	assert.Contains(t, stderr, "unknown shorthand flag: 'v' in -v")
}

func TestAnArgumentErrorNamesWhatTheCommandTakes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"config", "default"}, "fleet-role: config default: accepts 1 arg(s), received 0\n\nUsage: fleet-role config default agent|controller [flags]\n"},
		{[]string{"config", "default", "toaster"}, "fleet-role: config default: \"toaster\" is not one of agent, controller\n\nUsage: fleet-role config default agent|controller [flags]\n"},
		{[]string{"resume", "extra"}, "fleet-role: resume takes no arguments: got [\"extra\"]\n\nUsage: fleet-role resume [flags]\n"},
		{[]string{"swap", "v1"}, "fleet-role: swap: want OUT, the voter to swap out, and IN, the standby to swap in: got 1 argument(s) [\"v1\"]\n\nUsage: fleet-role swap OUT IN [--override pause|holds|domains]... [--dry-run] | swap --cancel [flags]\n"},
	} {
		code, stdout, stderr := runCLI(t, tc.args...)
		assert.Equal(t, 2, code, "%q", tc.args)
		assert.Equal(t, tc.want, stderr, "%q", tc.args)
		assert.Empty(t, stdout, "%q", tc.args)
	}
}

func TestHelpOfACommandIsItsHelpOnStandardOutput(t *testing.T) {
	for _, args := range [][]string{{"status"}, {"config", "validate"}, {}} {
		code, help, stderr := runCLI(t, append([]string{"help"}, args...)...)
		require.Equal(t, 0, code, "help %q: %s", args, stderr)
		_, flag, _ := runCLI(t, append(args, "--help")...)
		assert.Equal(t, flag, help, "help %q is what --help prints", args)
		assert.Empty(t, stderr)
	}
}

func TestCompletionScriptsForEachShell(t *testing.T) {
	for shell, want := range map[string]string{"bash": "complete -o default -F __start_fleet-role fleet-role", "zsh": "#compdef fleet-role", "fish": "complete -c fleet-role"} {
		code, out, stderr := runCLI(t, "completion", shell)
		assert.Equal(t, 0, code, "%s: %s", shell, stderr)
		assert.Contains(t, out, want, shell)
	}
	code, _, _ := runCLI(t, "completion", "tcsh")
	assert.NotEqual(t, 0, code)
}
