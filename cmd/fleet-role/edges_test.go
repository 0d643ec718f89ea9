package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/tests/testhost"
)

// runMainEnv, set in its environment, makes the test binary the command
// itself: TestMain runs the command line and exits with its code.
const runMainEnv = "FLEET_ROLE_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
	}
	os.Exit(m.Run())
}

// badFiles makes, in a directory anyone may read, one file of each kind a
// command cannot use, by name. The unreadable one is mode 000: root reads
// it all the same, so the command runs as nobody (runAsCommand).
func badFiles(t *testing.T) (dir string, files map[string]string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "bad-files")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	files = map[string]string{}
	write := func(kind string, data []byte, mode os.FileMode) {
		p := filepath.Join(dir, kind)
		require.NoError(t, os.WriteFile(p, data, mode))
		require.NoError(t, os.Chmod(p, mode))
		files[kind] = p
	}
	write("empty", nil, 0o644)
	write("not-utf-8", []byte("version = 1\n\xff\xfe\xfd = \"\xc3\x28\"\n"), 0o644)
	write("unreadable", []byte("version = 1\n"), 0o000)
	big := filepath.Join(dir, "100-mb")
	f, err := os.Create(big)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(100<<20))
	require.NoError(t, f.Close())
	require.NoError(t, os.Chmod(big, 0o644))
	files["100-mb"] = big
	files["directory"] = filepath.Join(dir, "a-directory")
	require.NoError(t, os.Mkdir(files["directory"], 0o755))
	return dir, files
}

// commandBinary copies the test binary where nobody may run it.
func commandBinary(t *testing.T, dir string) string {
	t.Helper()
	self, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	bin := filepath.Join(dir, "fleet-role.test")
	require.NoError(t, os.WriteFile(bin, self, 0o755))
	return bin
}

// result is what a command run in its own process did.
type result struct {
	code           int
	stdout, stderr string
	maxRSS         int64 // bytes
	elapsed        time.Duration
}

// runAsCommand runs the command line in a process of its own, as nobody
// when the test runs as root, with no cluster to find and a deadline.
func runAsCommand(t *testing.T, bin, home string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{runMainEnv + "=1", "HOME=" + home, "PATH=" + os.Getenv("PATH"), "KUBECONFIG="}
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	require.NoError(t, ctx.Err(), "%q did not end within 30 s", args)
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.NoError(t, err)
	}
	r.code = cmd.ProcessState.ExitCode()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSS = ru.Maxrss * 1024 // Linux counts it in KiB
	}
	return r
}

func TestEveryCommandGivenAFileItCannotUseExits2WithOneLineNamingIt(t *testing.T) {
	if _, err := os.Stat(defaultControllerConfig); err == nil {
		testhost.Unavailable(t, "%s is there, and the commands given no --config would read it", defaultControllerConfig)
	}
	dir, files := badFiles(t)
	bin := commandBinary(t, dir)
	// What the binary takes to start and print an error, measured once,
	// is the floor of what a refusal may take.
	floor := runAsCommand(t, bin, dir, "frobnicate")
	require.Equal(t, 2, floor.code, floor.stderr)

	commands := []struct {
		name string
		args func(file string) []string
	}{
		{"agent --config", func(f string) []string { return []string{"agent", "--config", f} }},
		{"controller --config", func(f string) []string { return []string{"controller", "--config", f} }},
		{"controller --kubeconfig", func(f string) []string { return []string{"controller", "--kubeconfig", f} }},
		{"plan -f", func(f string) []string { return []string{"plan", "-f", f} }},
		{"plan --config", func(f string) []string { return []string{"plan", "-f", "-", "--config", f} }},
		{"config validate", func(f string) []string { return []string{"config", "validate", f} }},
		{"config validate --kind agent", func(f string) []string { return []string{"config", "validate", "--kind", "agent", f} }},
		{"status --config", func(f string) []string { return []string{"status", "--config", f} }},
		{"status --kubeconfig", func(f string) []string { return []string{"status", "--kubeconfig", f} }},
		{"swap --config", func(f string) []string { return []string{"swap", "h1", "h2", "--config", f} }},
		{"swap --kubeconfig", func(f string) []string { return []string{"swap", "h1", "h2", "--kubeconfig", f} }},
		{"swap --cancel --kubeconfig", func(f string) []string { return []string{"swap", "--cancel", "--kubeconfig", f} }},
		{"pause --kubeconfig", func(f string) []string { return []string{"pause", "--reason", "r", "--kubeconfig", f} }},
		{"resume --config", func(f string) []string { return []string{"resume", "--config", f} }},
		{"resume --kubeconfig", func(f string) []string { return []string{"resume", "--kubeconfig", f} }},
	}
	for _, c := range commands {
		for _, kind := range []string{"empty", "not-utf-8", "100-mb", "directory", "unreadable"} {
			t.Run(c.name+" given a file that is "+kind, func(t *testing.T) {
				path := files[kind]
				r := runAsCommand(t, bin, dir, c.args(path)...)
				all := r.stdout + r.stderr
				assert.Equal(t, 2, r.code, "%s", all)
				assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line of error: %q", r.stderr)
				assert.True(t, strings.HasPrefix(r.stderr, "fleet-role: "), r.stderr)
				assert.Contains(t, r.stderr, path)
				assert.NotContains(t, all, "goroutine")
				assert.NotContains(t, all, "panic")
				assert.Empty(t, r.stdout)
				// Note: a file read whole would add at least its 100 MB.
				assert.Less(t, r.maxRSS, floor.maxRSS+64<<20, "a refusal reads no more than it needs")
			})
		}
	}
}

func TestAPlanInputOverTheLimitOnStandardInputIsRefused(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"plan", "-f", "-"}, io.LimitReader(spaces{}, maxPlanInput+10), &out, &errb)
	assert.Equal(t, 2, code)
	assert.Equal(t, "fleet-role: standard input: bad input: read: larger than the 67108864 bytes (64 MiB) a plan's input may be\n", errb.String())
}

// spaces reads as an endless run of spaces.
type spaces struct{}

func (spaces) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}
