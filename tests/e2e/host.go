package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/fleet-role/fleet-role/swapplan"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// In the host, where the harness puts the agent's and the double's files.
const (
	hostKubeconfig = "/etc/fleet-role/kubeconfig"
	hostDataDir    = "/var/lib/rancher/k3s"
	hostStateDir   = "/var/lib/fleet-role"
	hostRancher    = "/etc/rancher/k3s"
)

func (h *Host) staged() bool {
	return h.Role == swapplan.RoleVoter || h.Role == swapplan.RoleStandby
}

// siblingName is the name of a k3s container a Docker host's agent starts.
func (h *Host) siblingName(unit string) string {
	return fmt.Sprintf("fleet-role-e2e-%s-%s-%s", strings.ReplaceAll(h.f.subnet, ".", "-"), h.Name, unit)
}

// doubleArgs are the k3s double's arguments for a unit. The double joins
// through the one `server:` of the host's config.yaml (and its drop-ins),
// as k3s does; the timings are the harness's.
func (h *Host) doubleArgs(unit, kubeconfig string) []string {
	return []string{unit, "--node-name", h.Name, "--node-ip", h.IP, "--kubeconfig", kubeconfig,
		"--election-ms", fmt.Sprint(h.f.electionTimeout().Milliseconds()), "--heartbeat-ms", fmt.Sprint((h.f.electionTimeout() / 10).Milliseconds()),
		"--node-monitor-grace-period", NodeMonitorGracePeriod.String(), "--learner-stall", LearnerStall.String()}
}

// token is the fleet's k3s token, in every host's /etc/rancher/k3s/token.
const token = "fleet-role-e2e-token"

// hostToken is where the token file is in a host (and its k3s containers).
const hostToken = hostRancher + "/token"

// hostNodeDir is k3s's /etc/rancher/node (the node password), kept in a
// directory of the host's so that it survives a re-created container.
const hostNodeDir = "/etc/rancher/node"

// start writes the host's files, starts its container with systemd as
// PID 1 and starts fleet-role-agent in it.
func (h *Host) start(t testhost.T) error {
	f := h.f
	for _, d := range []string{"etc", "rancher", "rancher/config.yaml.d", "state", "data", "units", "sd", "node"} {
		if err := os.MkdirAll(filepath.Join(h.dir, d), 0o755); err != nil {
			return err
		}
	}
	// As Ansible stages a k3s host: the token as a 0600 file, and a
	// standby's or voter's config.yaml naming the server to join through
	// (the bootstrap host: cluster-init and no server).
	if err := os.WriteFile(filepath.Join(h.dir, "rancher", "token"), []byte(token+"\n"), 0o600); err != nil {
		return err
	}
	if h.staged() {
		conf := "cluster-init: true\n"
		if b := f.bootstrap(); b != h {
			conf = fmt.Sprintf("server: https://%s:6443\n", b.IP)
		}
		conf += "token-file: " + hostToken + "\n"
		if err := os.WriteFile(filepath.Join(h.dir, "rancher", "config.yaml"), []byte(conf), 0o644); err != nil {
			return err
		}
	}
	roleFile := "agent"
	if h.Role == swapplan.RoleVoter {
		roleFile = "server"
	}
	files := map[string]string{
		"state/role":       roleFile + "\n",
		"etc/agent.toml":   h.agentConfig(),
		"units/k3s.conf":   unitDropIn(h.doubleArgs("server", hostKubeconfig), h.uid()),
		"units/agent.conf": unitDropIn(h.doubleArgs("agent", hostKubeconfig), 0),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(h.dir, name), []byte(data), 0o644); err != nil {
			return err
		}
	}
	if uid := h.uid(); uid != 0 {
		// The server runs as uid: its data, its token and the node
		// password's directory are its own.
		server := filepath.Join(h.dir, "data", "server")
		if err := os.MkdirAll(server, 0o700); err != nil {
			return err
		}
		for _, p := range []string{server, filepath.Join(h.dir, "rancher", "token"), filepath.Join(h.dir, "node")} {
			if err := os.Chown(p, uid, uid); err != nil {
				return err
			}
		}
	}
	mounts := []string{
		"--network", "host",
		"-v", f.Bin + ":/usr/bin/fleet-role:ro",
		"-v", f.double + ":/usr/local/bin/k3s:ro",
		"-v", filepath.Join(testhost.Root(), "packaging", "fleet-role-agent.service") + ":/etc/systemd/system/fleet-role-agent.service:ro",
		"-v", filepath.Join(h.dir, "units", "k3s.conf") + ":/etc/systemd/system/k3s.service.d/double.conf:ro",
		"-v", filepath.Join(h.dir, "units", "agent.conf") + ":/etc/systemd/system/k3s-agent.service.d/double.conf:ro",
		"-v", filepath.Join(h.dir, "etc", "agent.toml") + ":/etc/fleet-role/agent.toml:ro",
		"-v", f.kubeconfig + ":" + hostKubeconfig + ":ro",
		"-v", filepath.Join(h.dir, "rancher") + ":" + hostRancher,
		"-v", filepath.Join(h.dir, "state") + ":" + hostStateDir,
		"-v", filepath.Join(h.dir, "data") + ":" + hostDataDir,
		"-v", filepath.Join(h.dir, "node") + ":" + hostNodeDir,
	}
	if h.Docker {
		mounts = append(mounts, "-v", "/var/run/docker.sock:/var/run/docker.sock")
	}
	sd := testhost.StartSystemdHostIn(t, filepath.Join(h.dir, "sd"), mounts...)
	h.Container = sd.Name
	if uid := h.uid(); uid != 0 {
		if out, err := h.exec("sh", "-c", fmt.Sprintf("echo 'k3s:x:%d:%d:k3s double:/nonexistent:/usr/sbin/nologin' >>/etc/passwd", uid, uid)); err != nil {
			return fmt.Errorf("%s: add the k3s user: %v: %s", h.Name, err, out)
		}
	}
	if !h.Docker {
		if err := h.install(); err != nil {
			return err
		}
	}
	if out, err := h.exec("systemctl", "enable", "--now", "fleet-role-agent.service"); err != nil {
		journal, _ := h.exec("journalctl", "--no-pager", "-n", "15", "-u", "fleet-role-agent")
		return fmt.Errorf("%s: start fleet-role-agent: %v: %s\n%s", h.Name, err, out, journal)
	}
	return nil
}

// install does on a native host what k3s's installer does: it writes
// the agent unit's environment file (an agent's K3S_URL, the token file)
// and enables the one unit it installs, k3s.service on a voter and
// k3s-agent.service on a standby or an agent, starting it without
// waiting (Type=notify: a server is up once its member votes).
func (h *Host) install() error {
	env := "K3S_TOKEN_FILE=" + hostToken + "\n"
	if b := h.f.bootstrap(); b != h {
		env = fmt.Sprintf("K3S_URL=https://%s:6443\n", b.IP) + env
	}
	if out, err := h.exec("sh", "-c", "umask 077 && printf '%s' \"$1\" > /etc/systemd/system/k3s-agent.service.env", "sh", env); err != nil {
		return fmt.Errorf("%s: write the agent's environment: %v: %s", h.Name, err, out)
	}
	unit := "k3s-agent.service"
	if h.Role == swapplan.RoleVoter {
		unit = "k3s.service"
	}
	if out, err := h.exec("systemctl", "enable", "--now", "--no-block", unit); err != nil {
		return fmt.Errorf("%s: enable %s: %v: %s", h.Name, unit, err, out)
	}
	return nil
}

// unitDropIn replaces the stand-in unit's command with the double's, run
// as uid (0: root). The rest is the unit's own (Type=notify,
// Restart=always, RestartSec=5s).
func unitDropIn(args []string, uid int) string {
	user := ""
	if uid != 0 {
		user = fmt.Sprintf("User=%d\n", uid)
	}
	return "[Service]\nExecStart=\nExecStart=/usr/local/bin/k3s " + strings.Join(args, " ") + "\n" + user
}

// uid is the user a native host's k3s server runs as: one of its own, so
// that its etcd's connections can be told apart on the machine's shared
// network (DropPeerPort). k3s runs as root; nothing here needs it.
func (h *Host) uid() int {
	if h.Docker {
		return 0
	}
	return 20010 + slices.Index(h.f.Order, h.Name)
}

// agentConfig renders the host's agent.toml.
func (h *Host) agentConfig() string {
	f := h.f
	platform := "systemd"
	if h.Docker {
		platform = "docker"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `version = 1
node_name = %q
platform = %q
data_dir = %q
role_file = %q
state_dir = %q
kubeconfig = %q
probe_period = %q
resync_period = "5s"
staged_files = [%q]
`, h.Name, platform, hostDataDir, hostStateDir+"/role", hostStateDir, hostKubeconfig, f.opts.ProbePeriod.String(), hostRancher+"/config.yaml")
	for _, s := range f.servers() {
		fmt.Fprintf(&b, "\n[[servers]]\nname = %q\naddress = %q\n", s.Name, s.IP)
	}
	fmt.Fprintf(&b, `
[etcd]
endpoint = "http://%s:2379"
ca_file = ""
cert_file = ""
key_file = ""
timeout = "3s"
`, h.IP)
	if h.Docker {
		// A JSON array of strings is a TOML one.
		quote := func(list []string) string {
			b, _ := json.Marshal(list)
			return string(b)
		}
		volumes := []string{
			filepath.Join(h.dir, "data") + ":" + hostDataDir,
			filepath.Join(h.dir, "rancher") + ":" + hostRancher + ":ro",
			filepath.Join(h.dir, "node") + ":" + hostNodeDir,
			f.kubeconfig + ":" + hostKubeconfig + ":ro",
		}
		fmt.Fprintf(&b, `
[docker]
image = %q
server_container = %q
agent_container = %q
server_args = %s
agent_args = %s
volumes = %s
network = "host"
privileged = false
stop_timeout = "10s"
`, f.image, h.siblingName("server"), h.siblingName("agent"),
			quote(h.doubleArgs("server", hostKubeconfig)), quote(h.doubleArgs("agent", hostKubeconfig)), quote(volumes))
	}
	return b.String()
}

func (h *Host) exec(args ...string) (string, error) {
	out, err := exec.Command("docker", append([]string{"exec", h.Container}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Exec runs a command in the host.
func (h *Host) Exec(args ...string) string {
	h.f.t.Helper()
	out, err := h.exec(args...)
	if err != nil {
		h.f.t.Fatalf("%s: %s: %v: %s", h.Name, strings.Join(args, " "), err, out)
	}
	return out
}

// containers are the host's container and, on a Docker host, the k3s
// containers its agent started.
func (h *Host) containers() []string {
	out := []string{h.Container}
	if h.Docker {
		for _, u := range []string{"server", "agent"} {
			if exec.Command("docker", "container", "inspect", h.siblingName(u)).Run() == nil {
				out = append(out, h.siblingName(u))
			}
		}
	}
	return out
}

// Pause freezes every process of the host (docker pause: the cgroup
// freezer), as a host that hangs.
func (h *Host) Pause() {
	h.f.t.Helper()
	testhost.Docker(h.f.t, append([]string{"pause"}, h.containers()...)...)
}

// Unpause thaws it.
func (h *Host) Unpause() {
	h.f.t.Helper()
	for _, c := range h.containers() {
		_ = exec.Command("docker", "unpause", c).Run()
	}
}

// KillAgent kills fleet-role agent with SIGKILL; systemd restarts it
// (Restart=always, after RestartSec).
func (h *Host) KillAgent() {
	h.f.t.Helper()
	h.Exec("systemctl", "kill", "--signal=SIGKILL", "fleet-role-agent.service")
}

// SlowDisk throttles the host's writes to the machine's disk to iops
// writes a second (the blkio cgroup), so that each fdatasync waits: a
// disk turned slow, for the agent's probe and the host's etcd member
// alike. 0 lifts it.
func (h *Host) SlowDisk(iops int) {
	h.f.t.Helper()
	dev, err := deviceOf(h.dir)
	if err != nil {
		h.f.t.Fatal(err)
	}
	for _, c := range h.containers() {
		id := testhost.Docker(h.f.t, "inspect", "-f", "{{.Id}}", c)
		file := filepath.Join("/sys/fs/cgroup/blkio/docker", id, "blkio.throttle.write_iops_device")
		if err := os.WriteFile(file, []byte(fmt.Sprintf("%s %d\n", dev, iops)), 0o644); err != nil {
			h.f.t.Fatalf("throttle %s's disk: %v", h.Name, err)
		}
	}
}

// peerRules cut a native host's etcd peer traffic both ways: what comes
// to its peer port, and what its member (its own uid) sends to others'.
func (h *Host) peerRules() [][]string {
	return [][]string{
		{"INPUT", "-d", h.IP, "-p", "tcp", "--dport", "2380", "-j", "DROP"},
		{"OUTPUT", "-m", "owner", "--uid-owner", fmt.Sprint(h.uid()), "-p", "tcp", "--dport", "2380", "-j", "DROP"},
	}
}

// DropPeerPort drops the etcd peer traffic of a native host, both ways, as
// a firewall that blocks its peer port.
func (h *Host) DropPeerPort() {
	h.f.t.Helper()
	if h.Docker {
		h.f.t.Fatalf("%s: DropPeerPort needs a native host", h.Name)
	}
	h.dropped = true
	for _, r := range h.peerRules() {
		testhost.Iptables(h.f.t, append([]string{"-I"}, r...)...)
	}
}

// RestorePeerPort lifts DropPeerPort.
func (h *Host) RestorePeerPort() {
	if h.dropped {
		h.dropped = false
		for _, r := range h.peerRules() {
			_ = exec.Command("iptables", append([]string{"-D"}, r...)...).Run()
		}
	}
}

// deviceOf is the major:minor of the disk that holds path (the whole
// disk, which the blkio throttle takes, not a partition).
func deviceOf(path string) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return "", err
	}
	dev := fmt.Sprintf("%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	sys := filepath.Join("/sys/dev/block", dev)
	if _, err := os.Stat(filepath.Join(sys, "partition")); err == nil {
		parent, err := os.ReadFile(filepath.Join(sys, "..", "dev"))
		if err != nil {
			return "", err
		}
		dev = strings.TrimSpace(string(parent))
	}
	return dev, nil
}
