package testhost_test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/tests/testhost"
)

// machineNetwork is what the machine's network namespace holds of
// Docker's: its docker0 and the iptables rules that name the Docker
// hosts' engines' bridge subnet.
func machineNetwork(t *testing.T) (docker0 string, innerRules []string) {
	out, _ := exec.Command("ip", "-br", "addr", "show", "docker0").CombinedOutput()
	docker0 = strings.Join(strings.Fields(string(out)), " ")
	if _, err := exec.LookPath("iptables-save"); err != nil {
		testhost.Unavailable(t, "no iptables-save: install Debian's iptables, as .ci/run does")
	}
	rules, err := exec.Command("iptables-save").Output()
	require.NoError(t, err)
	for _, r := range strings.Split(string(rules), "\n") {
		if strings.Contains(r, "10.213.0.") {
			innerRules = append(innerRules, r)
		}
	}
	return docker0, innerRules
}

func TestTwoDockerHostsRunEnginesOfTheirOwnInNetworksOfTheirOwn(t *testing.T) {
	docker0, _ := machineNetwork(t)
	n := testhost.NewNetwork(t)
	a := testhost.StartDockerHost(t, "--network", n.Name, "--ip", n.Addr(10))
	b := testhost.StartDockerHost(t, "--network", n.Name, "--ip", n.Addr(11))
	assert.Equal(t, n.Addr(10), a.IP)
	assert.Equal(t, n.Addr(11), b.IP)

	machineID := testhost.Docker(t, "info", "-f", "{{.ID}}")
	ids := map[string]bool{machineID: true}
	for _, h := range []*testhost.DockerHost{a, b} {
		info := strings.Fields(h.Docker(t, "info", "-f", "{{.ID}} {{.Driver}} {{.CgroupDriver}} {{.DockerRootDir}}"))
		require.Len(t, info, 4)
		assert.False(t, ids[info[0]], "%s has an engine of its own", h.Name)
		ids[info[0]] = true
		assert.Equal(t, []string{"overlay2", "systemd", "/var/lib/docker"}, info[1:], "%s's engine", h.Name)
	}

	image := testhost.Standin(t)
	assert.True(t, a.Load(t, image), "the image is copied into a's engine")
	assert.False(t, a.Load(t, image), "a's engine has it: not copied again")
	assert.Error(t, exec.Command("docker", "-H", b.Engine, "image", "inspect", image).Run(), "b's engine is another")

	// k3s's containers run on the host network: the host's namespace,
	// not the machine's.
	a.Docker(t, "run", "-d", "--name", "k3s-server", "--network", "host", image, "server")
	pid := a.Docker(t, "inspect", "-f", "{{.State.Pid}}", "k3s-server")
	hostNS := a.Exec(t, "readlink", "/proc/1/ns/net")
	assert.Equal(t, hostNS, a.Exec(t, "readlink", "/proc/"+pid+"/ns/net"))
	machineNS, err := os.Readlink("/proc/self/ns/net")
	require.NoError(t, err)
	assert.NotEqual(t, machineNS, hostNS)
	t.Logf("a container of a's engine is in the cgroups %s", strings.ReplaceAll(a.Exec(t, "cat", "/proc/"+pid+"/cgroup"), "\n", " "))

	// The hosts reach each other, the machine reaches them, and they reach
	// the machine at the network's gateway.
	b.Exec(t, "systemd-run", "--unit", "probe-http", "python3", "-m", "http.server", "--bind", b.IP, "--directory", "/etc", "8080")
	get := "import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode().strip())"
	url := fmt.Sprintf("http://%s:8080/hostname", b.IP)
	bName := b.Exec(t, "cat", "/etc/hostname")
	require.Eventually(t, func() bool {
		out, err := exec.Command("docker", "exec", a.Name, "python3", "-c", get, url).Output()
		return err == nil && strings.TrimSpace(string(out)) == bName
	}, 20*time.Second, 200*time.Millisecond, "a reaches b at %s", url)
	resp, err := http.Get(url)
	require.NoError(t, err, "the machine reaches b")
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, bName, strings.TrimSpace(string(body)))

	l, err := net.Listen("tcp", n.Gateway+":0")
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "the machine") })}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	assert.Equal(t, "the machine", a.Exec(t, "python3", "-c", get, "http://"+l.Addr().String()+"/"))

	after, innerRules := machineNetwork(t)
	assert.Equal(t, docker0, after, "the machine's docker0 is as it was")
	assert.Empty(t, innerRules, "no rule of the hosts' engines is in the machine's namespace")
	assert.Contains(t, a.Exec(t, "ip", "-br", "addr", "show", "docker0"), "10.213.0.1/24", "a's engine's bridge is in a's namespace")
}

func TestADockerHostKeepsItsEnginesImagesAndContainersAcrossARestart(t *testing.T) {
	h := testhost.StartDockerHost(t)
	image := testhost.Standin(t)
	require.True(t, h.Load(t, image))
	h.Docker(t, "run", "-d", "--name", "revived", "--network", "none", "--restart", "unless-stopped", image, "server")
	h.Docker(t, "run", "-d", "--name", "stopped", "--network", "none", "--restart", "unless-stopped", image, "agent")
	h.Docker(t, "stop", "-t", "1", "stopped")

	h.Restart(t)
	assert.False(t, h.Load(t, image), "the engine kept the image")
	require.Eventually(t, func() bool {
		out, err := exec.Command("docker", "-H", h.Engine, "inspect", "-f", "{{.State.Running}}", "revived").Output()
		return err == nil && strings.TrimSpace(string(out)) == "true"
	}, 30*time.Second, 100*time.Millisecond, "the engine revives the container it ran")
	assert.Equal(t, "false", h.Docker(t, "inspect", "-f", "{{.State.Running}}", "stopped"))
}
