package docker_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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

// engine is a Docker engine the backend is tested against: a Docker
// host's own (Docker-in-Docker, as the test fleet's Docker hosts run), or
// the machine's.
type engine struct {
	// host is the engine's address (docker.Config.Host); empty is the
	// machine's engine.
	host string
}

func (e engine) cli(args ...string) []string {
	if e.host == "" {
		return args
	}
	return append([]string{"-H", e.host}, args...)
}

// docker runs the docker command against the engine.
func (e engine) docker(t testing.TB, args ...string) string {
	t.Helper()
	return testhost.Docker(t, e.cli(args...)...)
}

// dockerHost starts a Docker host with the k3s stand-in's image in its
// engine.
func dockerHost(t *testing.T) (*testhost.DockerHost, engine) {
	h := testhost.StartDockerHost(t)
	h.Load(t, testhost.Standin(t))
	return h, engine{host: h.Engine}
}

func newPlatform(t *testing.T, e engine) (*docker.Platform, docker.Config) {
	id := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	cfg := docker.Config{
		Host:            e.host,
		Image:           testhost.Standin(t),
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
		_ = exec.Command("docker", e.cli("rm", "-f", cfg.ServerContainer, cfg.AgentContainer)...).Run()
		_ = exec.Command("docker", e.cli("volume", "rm", "-f", "fleet-role-test-data-"+id)...).Run()
	})
	return p, cfg
}

// TestConformance runs the conformance suite on a Docker host's own
// engine, and on the machine's engine (which may be another version of
// Docker than Debian's in the Docker host). The subtests share the Docker
// host: each has containers of its own, all the backend sees.
func TestConformance(t *testing.T) {
	t.Run("on a Docker host's own engine", func(t *testing.T) {
		_, e := dockerHost(t)
		conformance(t, e)
	})
	t.Run("on the machine's engine", func(t *testing.T) {
		conformance(t, engine{})
	})
}

func conformance(t *testing.T, e engine) {
	platformtest.Suite(t, func(t *testing.T) platformtest.Harness {
		p, cfg := newPlatform(t, e)
		names := map[platform.Unit]string{platform.Server: cfg.ServerContainer, platform.Agent: cfg.AgentContainer}
		return platformtest.Harness{
			Platform: p,
			AgentServerURL: func(t *testing.T) string {
				// Note: the stand-in prints what it was given once it
				// runs, a moment after its start returns.
				var url string
				require.Eventually(t, func() bool {
					logs := e.docker(t, "logs", "--tail", "1", cfg.AgentContainer)
					var ok bool
					_, url, ok = strings.Cut(logs, "K3S_URL=")
					return ok
				}, 10*time.Second, 50*time.Millisecond, "the agent container prints its K3S_URL")
				return url
			},
			Restart: func(t *testing.T, u platform.Unit) { e.docker(t, "restart", "-t", "1", names[u]) },
			// As an installer that runs k3s's container with --restart
			// always: revived by the engine's next start, stopped or not.
			Enable: func(t *testing.T, u platform.Unit) {
				e.docker(t, "run", "-d", "--name", names[u], "--label", testhost.Label, "--network", "none",
					"--restart", "always", cfg.Image, string(u))
			},
		}
	})
}

func TestTheServerAndTheAgentShareTheDataVolume(t *testing.T) {
	_, e := dockerHost(t)
	p, cfg := newPlatform(t, e)
	ctx := context.Background()
	_, err := p.Start(ctx, platform.Server, platform.StartOptions{})
	require.NoError(t, err)
	_, err = p.Start(ctx, platform.Agent, platform.StartOptions{ServerURL: "https://10.0.0.9:6443"})
	require.NoError(t, err)
	mounts := func(name string) string {
		return e.docker(t, "inspect", "-f", "{{range .Mounts}}{{.Name}}:{{.Destination}}{{end}}", name)
	}
	assert.Equal(t, mounts(cfg.ServerContainer), mounts(cfg.AgentContainer))
	assert.Contains(t, mounts(cfg.AgentContainer), ":/var/lib/rancher/k3s")
	assert.Equal(t, "[agent]", e.docker(t, "inspect", "-f", "{{.Config.Cmd}}", cfg.AgentContainer))
	assert.Equal(t, "[server --cluster-init]", e.docker(t, "inspect", "-f", "{{.Config.Cmd}}", cfg.ServerContainer))
}

func TestAStoppedAgentIsCreatedAnewForANewServer(t *testing.T) {
	_, e := dockerHost(t)
	p, cfg := newPlatform(t, e)
	ctx := context.Background()
	_, err := p.Start(ctx, platform.Agent, platform.StartOptions{ServerURL: "https://10.0.0.1:6443"})
	require.NoError(t, err)
	first := e.docker(t, "inspect", "-f", "{{.Id}}", cfg.AgentContainer)
	require.NoError(t, p.Stop(ctx, platform.Agent))
	_, err = p.Start(ctx, platform.Agent, platform.StartOptions{ServerURL: "https://10.0.0.1:6443"})
	require.NoError(t, err)
	assert.Equal(t, first, e.docker(t, "inspect", "-f", "{{.Id}}", cfg.AgentContainer), "the same container, started again")
	require.NoError(t, p.Stop(ctx, platform.Agent))
	_, err = p.Start(ctx, platform.Agent, platform.StartOptions{ServerURL: "https://10.0.0.2:6443"})
	require.NoError(t, err)
	assert.NotEqual(t, first, e.docker(t, "inspect", "-f", "{{.Id}}", cfg.AgentContainer), "created anew with the new server")
}

func TestAMissingImageIsNotInstalled(t *testing.T) {
	h := testhost.StartDockerHost(t)
	id := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	p, err := docker.New(docker.Config{Host: h.Engine, Image: "fleet-role-test/absent:none",
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

// TestWhatTheBackendStoppedStaysStoppedWhenTheHostBoots boots a Docker
// host again (its container restarted: systemd stops its engine, then
// starts it, and the engine revives the containers their restart policy
// and its record of a stop say): a container the backend stopped stays
// stopped, even one an installer ran under always; one it started runs
// again, a new run.
func TestWhatTheBackendStoppedStaysStoppedWhenTheHostBoots(t *testing.T) {
	h, e := dockerHost(t)
	p, cfg := newPlatform(t, e)
	ctx := context.Background()
	e.docker(t, "run", "-d", "--name", cfg.ServerContainer, "--label", testhost.Label, "--network", "none",
		"--restart", "always", cfg.Image, "server")
	st, err := p.State(ctx, platform.Server)
	require.NoError(t, err)
	require.True(t, st.Enabled, "under always, the engine revives it")
	require.NoError(t, p.Stop(ctx, platform.Server))
	assert.Equal(t, "unless-stopped false", e.docker(t, "inspect", "-f", "{{.HostConfig.RestartPolicy.Name}} {{.State.Running}}", cfg.ServerContainer))
	st, err = p.State(ctx, platform.Server)
	require.NoError(t, err)
	assert.False(t, st.Enabled)
	started, err := p.Start(ctx, platform.Agent, platform.StartOptions{ServerURL: "https://10.0.0.1:6443"})
	require.NoError(t, err)

	h.Restart(t)
	var agent platform.State
	require.Eventually(t, func() bool {
		agent, err = p.State(ctx, platform.Agent)
		return err == nil && agent.Active
	}, 30*time.Second, 100*time.Millisecond, "the agent container the backend started runs again after the boot")
	assert.True(t, agent.Enabled)
	assert.True(t, agent.StartedAt.After(started), "a new run: %s after %s", agent.StartedAt, started)
	st, err = p.State(ctx, platform.Server)
	require.NoError(t, err)
	assert.False(t, st.Active, "the server container the backend stopped stays stopped: %+v", st)
	assert.False(t, st.Enabled)

	_, err = p.Start(ctx, platform.Server, platform.StartOptions{})
	require.NoError(t, err)
	st, err = p.State(ctx, platform.Server)
	require.NoError(t, err)
	assert.True(t, st.Enabled, "started again, it is revived again")
}

func TestAContainerOfOtherMountsIsCreatedAnew(t *testing.T) {
	_, e := dockerHost(t)
	p, cfg := newPlatform(t, e)
	ctx := context.Background()
	_, err := p.Start(ctx, platform.Server, platform.StartOptions{})
	require.NoError(t, err)
	first := e.docker(t, "inspect", "-f", "{{.Id}}", cfg.ServerContainer)
	require.NoError(t, p.Stop(ctx, platform.Server))

	// Note: the mount's source is a directory of the Docker host's, where
	// the engine runs.
	cfg.Volumes = append(cfg.Volumes, "/etc/rancher/node:/etc/rancher/node")
	q, err := docker.New(cfg)
	require.NoError(t, err)
	defer q.Close()
	_, err = q.Start(ctx, platform.Server, platform.StartOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, first, e.docker(t, "inspect", "-f", "{{.Id}}", cfg.ServerContainer))
	assert.Contains(t, e.docker(t, "inspect", "-f", "{{range .Mounts}}{{.Destination}} {{end}}", cfg.ServerContainer), "/etc/rancher/node")
}
