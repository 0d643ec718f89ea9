package e2e

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/slowdisk"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// In a host, where k3s keeps its files.
const (
	hostDataDir = "/var/lib/rancher/k3s"
	hostRancher = "/etc/rancher/k3s"
)

func (h *Host) staged() bool {
	return h.Role == api.RoleVoter || h.Role == api.RoleStandby
}

// doubleArgs are the k3s double's arguments for a unit. The double joins
// through the one `server:` of the host's config.yaml (and its drop-ins),
// as k3s does; the timings are the harness's, but for its learner
// manager, which keeps k3s's own (a promotion each 15 s, a stalled learner
// removed after 5 minutes), so that no join passes on the double that
// would time out on k3s.
func (h *Host) doubleArgs(unit, kubeconfig string) []string {
	return []string{unit, "--node-name", h.Name, "--node-ip", h.IP, "--kubeconfig", kubeconfig,
		"--election-ms", fmt.Sprint(h.f.electionTimeout().Milliseconds()), "--heartbeat-ms", fmt.Sprint((h.f.electionTimeout() / 10).Milliseconds()),
		"--node-monitor-grace-period", NodeMonitorGracePeriod.String()}
}

// token is the fleet's k3s token, in every host's /etc/rancher/k3s/token.
const token = "fleet-role-e2e-token"

// hostToken is where the token file is in a host (and its k3s containers).
const hostToken = hostRancher + "/token"

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
	if h.Role == api.RoleVoter {
		unit = "k3s.service"
	}
	if out, err := h.exec("systemctl", "enable", "--now", "--no-block", unit); err != nil {
		return fmt.Errorf("%s: enable %s: %v: %s", h.Name, unit, err, out)
	}
	return nil
}

// unitDropIn replaces the stand-in unit's command with the double's. The
// rest is the unit's own (Type=notify, Restart=always, RestartSec=5s).
func unitDropIn(args []string) string {
	return "[Service]\nExecStart=\nExecStart=/usr/local/bin/k3s " + strings.Join(args, " ") + "\n"
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

// Pause freezes every process of the host (docker pause: the cgroup
// freezer), as a host that hangs. A Docker host's engine makes its
// containers' cgroups under the host's (systemd's cgroup driver, the
// host's systemd below the host container's cgroup), so they freeze with
// it.
//
// Note: runc's cgroup v1 freezer gives up, thawing the cgroup, when a
// process of it does not freeze in time (one in the middle of disk I/O:
// "OCI runtime pause failed: unable to freeze"), which the machine's disk
// under another suite's load gave once; the pause is asked again then,
// up to five times, as the fault it injects is the hang, not its moment.
func (h *Host) Pause() {
	h.f.t.Helper()
	for try := 1; ; try++ {
		out, err := exec.Command("docker", "pause", h.Container).CombinedOutput()
		if err == nil {
			return
		}
		if try == 5 || !strings.Contains(string(out), "unable to freeze") {
			h.f.t.Fatalf("docker pause %s: %v: %s", h.Container, err, out)
		}
		h.f.logf("%s: docker pause, try %d: %s; again", h.Name, try, strings.TrimSpace(string(out)))
		time.Sleep(2 * time.Second)
	}
}

// Unpause thaws it.
func (h *Host) Unpause() {
	h.f.t.Helper()
	testhost.Docker(h.f.t, "unpause", h.Container)
}

// KillAgent kills fleet-role agent with SIGKILL; systemd restarts it
// (Restart=always, after RestartSec).
func (h *Host) KillAgent() {
	h.f.t.Helper()
	h.Exec("systemctl", "kill", "--signal=SIGKILL", "fleet-role-agent.service")
}

// SlowDisk throttles the host's writes to the disk that holds its k3s
// data dir (the machine's on the double, its own on real k3s: ownDisk)
// to iops writes a second, so that each fdatasync waits: a disk turned
// slow, for the agent's probe and the host's etcd member alike. 0 lifts
// it.
// Note: the limit is put on the blkio cgroup of the host's container and
// on every cgroup below it, and again every second on those made since,
// until lifted: the machine's cgroup v1 blkio throttles each cgroup on
// its own (without sane_behavior a child is not held by its parent's
// limit: a dd in a child of a cgroup limited to 10 writes a second synced
// 30 writes in 10 ms, in the cgroup itself in 9 s), and the host's
// systemd makes a cgroup below for each unit that delegates its cgroups
// (k3s.service, Delegate=yes), again each time it starts, as do the
// kubelet and a Docker host's engine for theirs.
func (h *Host) SlowDisk(iops int) {
	h.f.t.Helper()
	dev, err := slowdisk.DeviceOf(filepath.Join(h.dir, "data"))
	if err != nil {
		h.f.t.Fatal(err)
	}
	id := testhost.Docker(h.f.t, "inspect", "-f", "{{.Id}}", h.Container)
	root := filepath.Join("/sys/fs/cgroup/blkio/docker", id)
	limit := []byte(fmt.Sprintf("%s %d\n", dev, iops))
	apply := func() error {
		return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil // a cgroup removed meanwhile
			}
			if err := os.WriteFile(filepath.Join(path, "blkio.throttle.write_iops_device"), limit, 0o644); err != nil && path == root {
				return err
			}
			return nil
		})
	}
	if h.slow != nil {
		h.slow.stop()
		h.slow = nil
	}
	if err := apply(); err != nil {
		h.f.t.Fatalf("throttle %s's disk: %v", h.Name, err)
	}
	if iops > 0 {
		h.slow = h.f.every(time.Second, func() bool {
			_ = apply()
			return true
		})
	}
}

// peerRules cut a host's etcd peer traffic both ways, in the host's own
// network namespace (its k3s's, on a Docker host too): what comes to its
// peer port, and what it sends to others'.
var peerRules = [][]string{
	{"INPUT", "-p", "tcp", "--dport", "2380", "-j", "DROP"},
	{"OUTPUT", "-p", "tcp", "--dport", "2380", "-j", "DROP"},
}

// iptables runs the machine's iptables in the host's network namespace.
func (h *Host) iptables(args ...string) error {
	pid, err := exec.Command("docker", "inspect", "-f", "{{.State.Pid}}", h.Container).Output()
	if err != nil {
		return fmt.Errorf("%s: its process: %w", h.Name, err)
	}
	cmd := exec.Command("nsenter", append([]string{"-t", strings.TrimSpace(string(pid)), "-n", "iptables"}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: iptables %s: %v: %s", h.Name, strings.Join(args, " "), err, out)
	}
	return nil
}

// DropPeerPort drops the host's etcd peer traffic, both ways, as a
// firewall that blocks its peer port.
func (h *Host) DropPeerPort() {
	h.f.t.Helper()
	if _, err := exec.LookPath("iptables"); err != nil {
		testhost.Unavailable(h.f.t, "no iptables: install Debian's iptables, as .ci/setup does")
	}
	h.dropped = true
	for _, r := range peerRules {
		if err := h.iptables(append([]string{"-I"}, r...)...); err != nil {
			h.f.t.Fatal(err)
		}
	}
}

// RestorePeerPort lifts DropPeerPort.
func (h *Host) RestorePeerPort() {
	if h.dropped {
		h.dropped = false
		for _, r := range peerRules {
			_ = h.iptables(append([]string{"-D"}, r...)...)
		}
	}
}

// doubleImages is where the k3s double keeps the references of the images
// its containerd would hold, under the data dir (tests/k3sdouble,
// imageStore).
const doubleImages = "agent/containerd/double-images"

// storedImages are the references of the images k3s's containerd on the
// host holds: on real k3s as `ctr images ls -q` lists them (in the CRI's
// namespace, k8s.io), on the double from its store, in the host's data
// dir on this machine.
func (h *Host) storedImages() ([]string, error) {
	if h.f.k3s != "" {
		// Note: through the ctr link k3s's installer makes, the multi-call
		// binary's containerd client, whose defaults are k3s's socket and
		// the CRI's namespace (`ctr --help` on v1.36.3 says so); `k3s ctr`
		// is the installer's wrapper, not the binary's ("No help topic for
		// 'ctr'").
		out, err := h.exec(k3sBinDir+"/ctr", "--address", "/run/k3s/containerd/containerd.sock", "--namespace", "k8s.io", "images", "ls", "-q")
		if err != nil {
			return nil, fmt.Errorf("ctr images ls: %v: %s", err, out)
		}
		return strings.Fields(out), nil
	}
	b, err := os.ReadFile(filepath.Join(h.dir, "data", doubleImages))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	return strings.Fields(string(b)), err
}

// nodeImages says which host's k3s does not hold the image, named as
// containerd names it: every host is a node the controller's Pods may be
// scheduled on (deployment.Options.NodeImages).
func (f *Fleet) nodeImages(_ context.Context, image string) error {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return err
	}
	var missing []string
	for _, n := range f.Order {
		refs, err := f.Hosts[n].storedImages()
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		if !slices.Contains(refs, named.String()) {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("not in the image store of %s, and no registry to pull it from", strings.Join(missing, ", "))
	}
	return nil
}
