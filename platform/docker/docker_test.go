package docker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/platform"
	"github.com/fleet-role/fleet-role/platform/docker"
	"github.com/fleet-role/fleet-role/platform/platformtest"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

func newPlatform(t *testing.T) (*docker.Platform, docker.Config) {
	standinImage := testhost.Standin(t)
	id := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	cfg := docker.Config{
		Image:           standinImage,
		ServerContainer: "fleet-role-test-server-" + id,
		AgentContainer:  "fleet-role-test-agent-" + id,
		ServerArgs:      []string{"server", "--cluster-init"},
		AgentArgs:       []string{"agent"},
		Volumes:         []string{"fleet-role-test-data-" + id + ":/var/lib/rancher/k3s"},
		Network:         "none",
		Env:             []string{"K3S_KUBECONFIG_MODE=600"},
		StopTimeout:     5 * time.Second,
		Labels:          map[string]string{"fleet-role-test": "1"},
	}
	p, err := docker.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		p.Close()
		_ = exec.Command("docker", "rm", "-f", cfg.ServerContainer, cfg.AgentContainer).Run()
		_ = exec.Command("docker", "volume", "rm", "-f", "fleet-role-test-data-"+id).Run()
	})
	return p, cfg
}

func TestConformance(t *testing.T) {
	platformtest.Suite(t, func(t *testing.T) platformtest.Harness {
		p, cfg := newPlatform(t)
		names := map[platform.Unit]string{platform.Server: cfg.ServerContainer, platform.Agent: cfg.AgentContainer}
		return platformtest.Harness{
			Platform: p,
			AgentServerURL: func(t *testing.T) string {
				// Note: the stand-in prints what it was given once it
				// runs, a moment after its start returns.
				var url string
				require.Eventually(t, func() bool {
					logs := testhost.Docker(t, "logs", "--tail", "1", cfg.AgentContainer)
					var ok bool
					_, url, ok = strings.Cut(logs, "K3S_URL=")
					return ok
				}, 10*time.Second, 50*time.Millisecond, "the agent container prints its K3S_URL")
				return url
			},
			Restart: func(t *testing.T, u platform.Unit) { testhost.Docker(t, "restart", "-t", "1", names[u]) },
			// As an installer that runs k3s's container with --restart
			// always: revived by the engine's next start, stopped or not.
			Enable: func(t *testing.T, u platform.Unit) {
				testhost.Docker(t, "run", "-d", "--name", names[u], "--label", testhost.Label, "--network", "none",
					"--restart", "always", cfg.Image, string(u))
			},
		}
	})
}

func TestTheServerAndTheAgentShareTheDataVolume(t *testing.T) {
	p, cfg := newPlatform(t)
	ctx := context.Background()
	_, err := p.Start(ctx, platform.Server, platform.StartOptions{})
	require.NoError(t, err)
	_, err = p.Start(ctx, platform.Agent, platform.StartOptions{ServerURL: "https://10.0.0.9:6443"})
	require.NoError(t, err)
	mounts := func(name string) string {
		return testhost.Docker(t, "inspect", "-f", "{{range .Mounts}}{{.Name}}:{{.Destination}}{{end}}", name)
	}
	assert.Equal(t, mounts(cfg.ServerContainer), mounts(cfg.AgentContainer))
	assert.Contains(t, mounts(cfg.AgentContainer), ":/var/lib/rancher/k3s")
	assert.Equal(t, "[agent]", testhost.Docker(t, "inspect", "-f", "{{.Config.Cmd}}", cfg.AgentContainer))
	assert.Equal(t, "[server --cluster-init]", testhost.Docker(t, "inspect", "-f", "{{.Config.Cmd}}", cfg.ServerContainer))
}

func TestAStoppedAgentIsCreatedAnewForANewServer(t *testing.T) {
	p, cfg := newPlatform(t)
	ctx := context.Background()
	_, err := p.Start(ctx, platform.Agent, platform.StartOptions{ServerURL: "https://10.0.0.1:6443"})
	require.NoError(t, err)
	first := testhost.Docker(t, "inspect", "-f", "{{.Id}}", cfg.AgentContainer)
	require.NoError(t, p.Stop(ctx, platform.Agent))
	_, err = p.Start(ctx, platform.Agent, platform.StartOptions{ServerURL: "https://10.0.0.1:6443"})
	require.NoError(t, err)
	assert.Equal(t, first, testhost.Docker(t, "inspect", "-f", "{{.Id}}", cfg.AgentContainer), "the same container, started again")
	require.NoError(t, p.Stop(ctx, platform.Agent))
	_, err = p.Start(ctx, platform.Agent, platform.StartOptions{ServerURL: "https://10.0.0.2:6443"})
	require.NoError(t, err)
	assert.NotEqual(t, first, testhost.Docker(t, "inspect", "-f", "{{.Id}}", cfg.AgentContainer), "created anew with the new server")
}

func TestAMissingImageIsNotInstalled(t *testing.T) {
	testhost.RequireDocker(t)
	id := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	p, err := docker.New(docker.Config{Image: "fleet-role-test/absent:none",
		ServerContainer: "fleet-role-test-absent-server-" + id, AgentContainer: "fleet-role-test-absent-agent-" + id})
	require.NoError(t, err)
	defer p.Close()
	ok, err := p.Installed(context.Background(), platform.Server)
	require.NoError(t, err)
	assert.False(t, ok)
	st, err := p.State(context.Background(), platform.Server)
	require.NoError(t, err)
	assert.Equal(t, platform.State{Status: "missing"}, st)
}

// TestAContainerStoppedByTheBackendIsNotRevivedByTheEngine checks what
// the engine consults when it starts again (a host reboot): the restart
// policy, and whether the container was stopped by hand. Where the
// engine's data root is readable (the engine runs on this machine), its
// own record of the container, config.v2.json, is read too; the engine
// itself is not restarted (other suites share it).
func TestAContainerStoppedByTheBackendIsNotRevivedByTheEngine(t *testing.T) {
	p, cfg := newPlatform(t)
	ctx := context.Background()
	testhost.Docker(t, "run", "-d", "--name", cfg.ServerContainer, "--label", testhost.Label, "--network", "none",
		"--restart", "always", cfg.Image, "server")
	st, err := p.State(ctx, platform.Server)
	require.NoError(t, err)
	require.True(t, st.Enabled, "under always, the engine revives it")

	require.NoError(t, p.Stop(ctx, platform.Server))
	assert.Equal(t, "unless-stopped false", testhost.Docker(t, "inspect", "-f", "{{.HostConfig.RestartPolicy.Name}} {{.State.Running}}", cfg.ServerContainer))
	st, err = p.State(ctx, platform.Server)
	require.NoError(t, err)
	assert.False(t, st.Enabled)

	root := testhost.Docker(t, "info", "-f", "{{.DockerRootDir}}")
	id := testhost.Docker(t, "inspect", "-f", "{{.Id}}", cfg.ServerContainer)
	data, err := os.ReadFile(filepath.Join(root, "containers", id, "config.v2.json"))
	if err != nil {
		t.Logf("the engine's record is not readable here (%v): checked through inspect only", err)
		return
	}
	var record struct{ HasBeenManuallyStopped bool }
	require.NoError(t, json.Unmarshal(data, &record))
	assert.True(t, record.HasBeenManuallyStopped, "the engine remembers the stop: unless-stopped does not revive it")

	_, err = p.Start(ctx, platform.Server, platform.StartOptions{})
	require.NoError(t, err)
	st, err = p.State(ctx, platform.Server)
	require.NoError(t, err)
	assert.True(t, st.Enabled, "started again, it is revived again")
}

func TestAContainerOfOtherMountsIsCreatedAnew(t *testing.T) {
	p, cfg := newPlatform(t)
	ctx := context.Background()
	_, err := p.Start(ctx, platform.Server, platform.StartOptions{})
	require.NoError(t, err)
	first := testhost.Docker(t, "inspect", "-f", "{{.Id}}", cfg.ServerContainer)
	require.NoError(t, p.Stop(ctx, platform.Server))

	dir := t.TempDir()
	cfg.Volumes = append(cfg.Volumes, dir+":/etc/rancher/node")
	q, err := docker.New(cfg)
	require.NoError(t, err)
	defer q.Close()
	_, err = q.Start(ctx, platform.Server, platform.StartOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, first, testhost.Docker(t, "inspect", "-f", "{{.Id}}", cfg.ServerContainer))
	assert.Contains(t, testhost.Docker(t, "inspect", "-f", "{{range .Mounts}}{{.Destination}} {{end}}", cfg.ServerContainer), "/etc/rancher/node")
}
