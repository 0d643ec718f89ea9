package systemd_test

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/platform"
	"github.com/fleet-role/fleet-role/platform/platformtest"
	"github.com/fleet-role/fleet-role/platform/systemd"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// newHarness starts a Debian host with systemd as PID 1 in a container
// and drives it from this test binary over the host's system bus. The
// image's units are enabled, as k3s's installer leaves them; the harness
// stops and disables them, for a host whose units neither run nor start
// at boot.
func newHarness(t *testing.T) (platformtest.Harness, *testhost.SystemdHost, *systemd.Platform) {
	h := testhost.StartSystemdHost(t)
	h.Exec(t, "systemctl", "disable", "--now", "k3s.service", "k3s-agent.service")
	p, err := systemd.New(systemd.Config{
		ServerUnit:   "k3s.service",
		AgentUnit:    "k3s-agent.service",
		AgentEnvFile: filepath.Join(h.Shared, "k3s-agent.env"),
		StateDir:     t.TempDir(),
		Bus:          h.Bus,
		JobTimeout:   time.Minute,
	})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	units := map[platform.Unit]string{platform.Server: "k3s.service", platform.Agent: "k3s-agent.service"}
	return platformtest.Harness{
		Platform: p,
		AgentServerURL: func(t *testing.T) string {
			env := h.Exec(t, "sh", "-c", `tr '\0' '\n' </proc/$(systemctl show -p MainPID --value k3s-agent.service)/environ`)
			for _, line := range strings.Split(env, "\n") {
				if v, ok := strings.CutPrefix(line, "K3S_URL="); ok {
					return v
				}
			}
			return ""
		},
		Restart: func(t *testing.T, u platform.Unit) { h.Exec(t, "systemctl", "restart", units[u]) },
		Enable:  func(t *testing.T, u platform.Unit) { h.Exec(t, "systemctl", "enable", "--now", units[u]) },
	}, h, p
}

func TestConformance(t *testing.T) {
	platformtest.Suite(t, func(t *testing.T) platformtest.Harness {
		h, _, _ := newHarness(t)
		return h
	})
}

func TestAFailingUnitIsAnErrorNamingTheUnit(t *testing.T) {
	_, host, p := newHarness(t)
	// Note: it fails before its main process runs; a start is taken as
	// made once that runs (activating/start), however soon it exits.
	host.Exec(t, "sh", "-c", "mkdir -p /run/systemd/system/k3s.service.d && printf '[Service]\\nExecStartPre=/bin/false\\nRestart=no\\n' > /run/systemd/system/k3s.service.d/fail.conf && systemctl daemon-reload")
	_, err := p.Start(context.Background(), platform.Server, platform.StartOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "k3s.service")
	assert.ErrorIs(t, err, systemd.ErrJob)
}

func TestAMissingUnitIsNotInstalledAndStopsCleanly(t *testing.T) {
	_, host, _ := newHarness(t)
	p, err := systemd.New(systemd.Config{ServerUnit: "k3s-missing.service", AgentUnit: "k3s-agent.service",
		AgentEnvFile: filepath.Join(host.Shared, "env"), StateDir: t.TempDir(), Bus: host.Bus})
	require.NoError(t, err)
	defer p.Close()
	ok, err := p.Installed(context.Background(), platform.Server)
	require.NoError(t, err)
	assert.False(t, ok)
	require.NoError(t, p.Stop(context.Background(), platform.Server))
}

func TestTheBackendReconnectsWhenDBusDrops(t *testing.T) {
	_, host, p := newHarness(t)
	ctx := context.Background()
	_, err := p.State(ctx, platform.Server)
	require.NoError(t, err)
	host.Exec(t, "systemctl", "restart", "dbus.service")
	require.Eventually(t, func() bool {
		_, err := p.Start(ctx, platform.Server, platform.StartOptions{})
		return err == nil
	}, 30*time.Second, 500*time.Millisecond)
	st, err := p.State(ctx, platform.Server)
	require.NoError(t, err)
	assert.True(t, st.Active)
}

func TestTheStartReturnedIsTheMainProcesssStart(t *testing.T) {
	_, host, p := newHarness(t)
	started, err := p.Start(context.Background(), platform.Server, platform.StartOptions{})
	require.NoError(t, err)
	show := host.Exec(t, "systemctl", "show", "-p", "ExecMainStartTimestamp", "--timestamp=unix", "k3s.service")
	assert.Equal(t, fmt.Sprintf("ExecMainStartTimestamp=@%d", started.Unix()), show)
}

// k3s says READY=1 only once it is up, and a joining server is up only
// once its etcd member votes; its unit has TimeoutStartSec=0, so the start
// job may last for ever. A start returns once the main process runs.
func TestAStartOfANotifyUnitThatIsNotReadyYetReturnsOnceItsProcessRuns(t *testing.T) {
	_, host, p := newHarness(t)
	host.Exec(t, "sh", "-c", "mkdir -p /run/systemd/system/k3s.service.d && printf '[Service]\\nType=notify\\nTimeoutStartSec=0\\nExecStart=\\nExecStart=/bin/sleep infinity\\n' > /run/systemd/system/k3s.service.d/never-ready.conf && systemctl daemon-reload")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	started, err := p.Start(ctx, platform.Server, platform.StartOptions{})
	require.NoError(t, err, "the start does not wait for READY=1")
	assert.Equal(t, "activating", host.Exec(t, "sh", "-c", "systemctl is-active k3s.service || true"))
	st, err := p.State(ctx, platform.Server)
	require.NoError(t, err)
	assert.True(t, st.Active, "a starting unit counts as running")
	assert.True(t, st.Enabled)
	assert.Equal(t, started, st.StartedAt)
	require.NoError(t, p.Stop(ctx, platform.Server))
	st, err = p.State(ctx, platform.Server)
	require.NoError(t, err)
	assert.False(t, st.Active)
}

func TestAUnitWithoutAnInstallSectionStartsAndStopsAndIsNeverEnabled(t *testing.T) {
	_, host, _ := newHarness(t)
	host.Exec(t, "sh", "-c", "printf '[Service]\\nExecStart=/bin/sleep infinity\\n' >/etc/systemd/system/k3s-static.service && systemctl daemon-reload")
	p, err := systemd.New(systemd.Config{ServerUnit: "k3s-static.service", AgentUnit: "k3s-agent.service",
		AgentEnvFile: filepath.Join(host.Shared, "env"), StateDir: t.TempDir(), Bus: host.Bus})
	require.NoError(t, err)
	defer p.Close()
	ctx := context.Background()
	_, err = p.Start(ctx, platform.Server, platform.StartOptions{})
	require.NoError(t, err, "a static unit has nothing to enable: no error")
	st, err := p.State(ctx, platform.Server)
	require.NoError(t, err)
	assert.True(t, st.Active)
	assert.False(t, st.Enabled, "a static unit does not start at boot")
	assert.Equal(t, "static", host.Exec(t, "systemctl", "is-enabled", "k3s-static.service"))
	require.NoError(t, p.Stop(ctx, platform.Server))
	st, err = p.State(ctx, platform.Server)
	require.NoError(t, err)
	assert.False(t, st.Active)
}

func TestAUnitEnabledOnlyUntilTheNextBootIsDisabledByStop(t *testing.T) {
	_, host, p := newHarness(t)
	ctx := context.Background()
	host.Exec(t, "systemctl", "enable", "--runtime", "k3s.service")
	st, err := p.State(ctx, platform.Server)
	require.NoError(t, err)
	require.True(t, st.Enabled, "enabled-runtime starts at boot")
	require.NoError(t, p.Stop(ctx, platform.Server))
	st, err = p.State(ctx, platform.Server)
	require.NoError(t, err)
	assert.False(t, st.Enabled)
	out, _ := exec.Command("docker", "exec", host.Name, "systemctl", "is-enabled", "k3s.service").Output()
	assert.Equal(t, "disabled", strings.TrimSpace(string(out)))
}

// TestADemotedHostThatRebootsComesBackAsAnAgent is the bug of k3s's
// installer: k3s.service enabled with WantedBy=multi-user.target starts
// again at boot on a host that stepped down. The host's container is
// restarted: systemd boots again from the same /etc.
func TestADemotedHostThatRebootsComesBackAsAnAgent(t *testing.T) {
	_, host, p := newHarness(t)
	ctx := context.Background()
	host.Exec(t, "systemctl", "enable", "--now", "k3s.service")
	// The step-down and the finish, as the agent carries them out.
	require.NoError(t, p.Stop(ctx, platform.Server))
	_, err := p.Start(ctx, platform.Agent, platform.StartOptions{ServerURL: "https://10.0.0.2:6443"})
	require.NoError(t, err)

	testhost.Docker(t, "restart", host.Name)
	deadline := time.Now().Add(60 * time.Second)
	for {
		out, _ := exec.Command("docker", "exec", host.Name, "systemctl", "is-system-running").Output()
		if s := strings.TrimSpace(string(out)); s == "running" || s == "degraded" {
			break
		}
		require.True(t, time.Now().Before(deadline), "systemd did not come up after the reboot")
		time.Sleep(200 * time.Millisecond)
	}
	require.Eventually(t, func() bool {
		_, err := p.State(ctx, platform.Server)
		return err == nil
	}, 30*time.Second, 200*time.Millisecond, "the backend reconnects to the rebooted host's bus")
	server, err := p.State(ctx, platform.Server)
	require.NoError(t, err)
	assert.False(t, server.Active, "the server did not start at boot: %s", server.Status)
	agent, err := p.State(ctx, platform.Agent)
	require.NoError(t, err)
	assert.True(t, agent.Active, "the agent started at boot: %s", agent.Status)
	assert.True(t, agent.Enabled)
}
