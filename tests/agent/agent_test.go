package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

var binary string

func TestMain(m *testing.M) {
	os.Exit(testhost.RunWithFleetRole(m, &binary))
}

// host is one Docker host: its files, its Node in the API server, and the
// agent binary running for it as its own user, with only its Node's rights.
type host struct {
	tb     testing.TB
	api    *kubeapi.Server
	dir    string
	node   string
	config string
	notify *net.UnixConn
	cmd    *exec.Cmd
	log    *bytes.Buffer
	server string
	agent  string
	volume string
	exited chan error
}

func newHost(tb testing.TB, kube *kubeapi.Server) *host {
	image := testhost.Standin(tb)
	dir := tb.TempDir()
	id := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano()%1e9)
	h := &host{tb: tb, api: kube, dir: dir, node: "h2", server: "fleet-role-e2e-server-" + id, agent: "fleet-role-e2e-agent-" + id, volume: "fleet-role-e2e-data-" + id}
	tb.Cleanup(func() {
		_ = exec.Command("docker", "rm", "-f", h.server, h.agent).Run()
		_ = exec.Command("docker", "volume", "rm", "-f", h.volume).Run()
	})
	ctx := context.Background()
	_, err := kube.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.node,
		Labels: map[string]string{api.LabelRole: api.RoleStandby}}}, metav1.CreateOptions{})
	require.NoError(tb, err)
	h.grant()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	agentKubeconfig(tb, kube, h.node, kubeconfig)
	staged := filepath.Join(dir, "etc", "config.yaml")
	require.NoError(tb, os.MkdirAll(filepath.Dir(staged), 0o755))
	require.NoError(tb, os.WriteFile(staged, []byte("token-file: /etc/token\n"), 0o600))
	h.config = filepath.Join(dir, "agent.toml")
	cfg := fmt.Sprintf(`version = 1
node_name = %q
platform = "docker"
data_dir = %q
role_file = %q
state_dir = %q
kubeconfig = %q
staged_files = [%q]
join_file = %q
resync_period = "30s"

[[servers]]
name = "h1"
address = "10.0.0.1"

[[servers]]
name = "h2"
address = "10.0.0.2"

[etcd]
endpoint = "http://127.0.0.1:1"
timeout = "1s"

[docker]
image = %q
server_container = %q
agent_container = %q
server_args = ["server"]
agent_args = ["agent"]
volumes = ["%s:/var/lib/rancher/k3s"]
network = "none"
privileged = false
stop_timeout = "5s"
`, h.node, filepath.Join(dir, "k3s"), filepath.Join(dir, "fleet-role", "role"), filepath.Join(dir, "state"), kubeconfig, staged,
		filepath.Join(dir, "etc", "config.yaml.d", "90-fleet-role.yaml"), image, h.server, h.agent, h.volume)
	require.NoError(tb, os.WriteFile(h.config, []byte(cfg), 0o600))
	return h
}

func (h *host) grant() { grantNode(h.tb, h.api, h.node) }

// grantNode applies the packaged agent RBAC for the node: its own Node,
// Events, nothing else.
func grantNode(tb testing.TB, kube *kubeapi.Server, node string) {
	b, err := os.ReadFile(filepath.Join(testhost.Root(), "packaging", "kubernetes", "agent-rbac.yaml.j2"))
	require.NoError(tb, err)
	_, err = kube.Client.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: api.Namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		tb.Fatal(err)
	}
	kubeapi.Apply(tb, kube.Client, []byte(strings.ReplaceAll(string(b), "{{ node_name }}", node)))
}

// agentKubeconfig writes a kubeconfig acting as the node's agent.
func agentKubeconfig(tb testing.TB, kube *kubeapi.Server, node, path string) {
	require.NoError(tb, kube.WriteImpersonatingKubeconfig(path, "system:serviceaccount:fleet-role:fleet-role-agent-"+node))
}

func (h *host) role(r string) {
	p := filepath.Join(h.dir, "fleet-role", "role")
	require.NoError(h.tb, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(h.tb, os.WriteFile(p, []byte(r+"\n"), 0o644))
}

// start runs the agent with a notify socket standing in for systemd's.
func (h *host) start() {
	sock := filepath.Join(h.dir, "notify.sock")
	_ = os.Remove(sock)
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	require.NoError(h.tb, err)
	h.notify = conn
	h.log = &bytes.Buffer{}
	h.cmd = exec.Command(binary, "agent", "--config", h.config)
	h.cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sock)
	h.cmd.Stdout, h.cmd.Stderr = h.log, h.log
	h.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(h.tb, h.cmd.Start())
	h.exited = make(chan error, 1)
	go func() { h.exited <- h.cmd.Wait() }()
	h.tb.Cleanup(func() {
		if h.cmd.ProcessState == nil {
			_ = h.cmd.Process.Kill()
		}
		conn.Close()
	})
}

// note waits for the agent to tell the notify socket a state.
func (h *host) note(want string, timeout time.Duration) {
	h.tb.Helper()
	require.NoError(h.tb, h.notify.SetReadDeadline(time.Now().Add(timeout)))
	buf := make([]byte, 4096)
	for {
		n, err := h.notify.Read(buf)
		require.NoError(h.tb, err, "waiting for %s; agent log:\n%s", want, h.log)
		if strings.Contains(string(buf[:n]), want) {
			return
		}
	}
}

func (h *host) annotate(key, value string) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	_, err := h.api.Client.CoreV1().Nodes().Patch(context.Background(), h.node, types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(h.tb, err)
}

func (h *host) report() *api.Report {
	n, err := h.api.Client.CoreV1().Nodes().Get(context.Background(), h.node, metav1.GetOptions{})
	require.NoError(h.tb, err)
	v, ok := n.Annotations[api.AnnotationReport]
	if !ok {
		return nil
	}
	var r api.Report
	require.NoError(h.tb, json.Unmarshal([]byte(v), &r))
	return &r
}

func TestTheAgentBinaryPromotesAStagedDockerStandbyThroughTheRealAPIAndEngine(t *testing.T) {
	kube := kubeapi.Start(t)
	h := newHost(t, kube)
	h.role("agent")
	h.start()
	h.note("READY=1", 30*time.Second)

	at := time.Now().UTC().Truncate(time.Second)
	q, _ := json.Marshal(api.Request{Swap: "s1", Action: api.RequestPromote, At: at, Voters: []string{"h1"}})
	h.annotate(api.AnnotationRequest, string(q))
	var r *api.Report
	require.Eventually(t, func() bool { r = h.report(); return r != nil }, 30*time.Second, 100*time.Millisecond, "agent log:\n%s", h.log)
	assert.Equal(t, api.StateDone, r.State, r.Message)
	require.NotNil(t, r.StartedAt)
	started := testhost.Docker(t, "inspect", "-f", "{{.State.StartedAt}}", h.server)
	st, err := time.Parse(time.RFC3339Nano, started)
	require.NoError(t, err)
	assert.Equal(t, st.UTC(), r.StartedAt.UTC(), "the report carries the server container's start")
	assert.Equal(t, "true", testhost.Docker(t, "inspect", "-f", "{{.State.Running}}", h.server))
	role, _ := os.ReadFile(filepath.Join(h.dir, "fleet-role", "role"))
	assert.Equal(t, "server\n", string(role))

	require.NoError(t, h.cmd.Process.Signal(syscall.SIGTERM))
	h.note("STOPPING=1", 10*time.Second)
	select {
	case err := <-h.exited:
		assert.NoError(t, err, "a signal is a clean exit")
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not exit on SIGTERM")
	}
}

// BenchmarkAgentIdle runs the agent binary idle for a minute (a Docker
// host, its own Node watched on a real API server, the default resync)
// and reports its resident memory and the CPU it used. The binary starts
// cold, as after a boot.
func BenchmarkAgentIdle(b *testing.B) {
	for b.Loop() {
		kube := kubeapi.Start(b)
		h := newHost(b, kube)
		h.role("agent")
		uncache(b, binary)
		h.start()
		h.note("READY=1", 30*time.Second)
		pid := h.cmd.Process.Pid
		idle := time.Minute
		if d, err := time.ParseDuration(os.Getenv("FLEET_ROLE_IDLE")); err == nil {
			idle = d
		}
		cpu0 := cpuSeconds(b, pid)
		time.Sleep(idle)
		cpu := (cpuSeconds(b, pid) - cpu0) * float64(time.Minute) / float64(idle)
		if os.Getenv("FLEET_ROLE_SMAPS") != "" {
			out, _ := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
			_ = os.WriteFile(os.Getenv("FLEET_ROLE_SMAPS"), out, 0o644)
		}
		m := testhost.Memory(pid)
		b.ReportMetric(m["VmRSS"], "rss-MiB")
		b.ReportMetric(m["RssAnon"], "rss-anon-MiB")
		b.ReportMetric(m["RssFile"], "rss-file-MiB")
		b.ReportMetric(m["VmHWM"], "peak-rss-MiB")
		b.ReportMetric(cpu, "cpu-s/min")
		b.ReportMetric(cpu/60*100, "cpu-%") // of one core
		_ = h.cmd.Process.Signal(syscall.SIGTERM)
		<-h.exited
		kube.Stop()
	}
}

// uncache drops a file's pages from the page cache, so that a process
// mapping it reads them from disk. Note: most of an idle agent's memory is
// the pages of its binary it mapped, and a binary just linked is cached as
// the linker wrote it: a process then maps several MiB more or fewer of it
// from one build to the next, where one read from disk maps the same.
func uncache(tb testing.TB, path string) {
	f, err := os.Open(path)
	require.NoError(tb, err)
	defer f.Close()
	require.NoError(tb, f.Sync())
	require.NoError(tb, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
}

func cpuSeconds(tb testing.TB, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(tb, err)
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100 // USER_HZ
}
