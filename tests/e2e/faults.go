package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/fleet-role/fleet-role/tests/testhost"
)

// Reboot restarts a native host's container, as the machine booting
// again: systemd stops every unit, and on the way up starts the units
// enabled at boot (multi-user.target), fleet-role-agent among them. The
// host's files are the container's own and its k3s data dir a directory
// of the machine's: all of it survives, as a disk does; /run (a tmpfs)
// does not; its address is the same. It returns once systemd runs and
// fleet-role-agent is active.
func (h *Host) Reboot() {
	h.f.t.Helper()
	if h.Docker {
		h.f.t.Fatalf("%s: Reboot needs a native host", h.Name)
	}
	if h.etcd != nil {
		// Its connection is to the member of the host before the reboot.
		_ = h.etcd.Close()
		h.etcd = nil
	}
	testhost.Docker(h.f.t, "restart", h.Container)
	h.f.Wait(2*time.Minute, h.Name+" is up again with fleet-role-agent active", func() error {
		// Note: "starting" lasts while a Type=notify unit (k3s.service
		// with TimeoutStartSec=0) has not said READY=1; that is k3s's
		// business, not the boot's.
		state, _ := h.exec("systemctl", "is-system-running")
		if state != "running" && state != "degraded" && state != "starting" {
			return fmt.Errorf("systemd is %q", state)
		}
		if out, _ := h.exec("systemctl", "is-active", "fleet-role-agent.service"); out != "active" {
			return fmt.Errorf("fleet-role-agent is %q", out)
		}
		return nil
	})
}

// Unit says whether a unit of a native host is active and enabled, as
// systemctl is-active and is-enabled print it.
func (h *Host) Unit(unit string) (active, enabled string) {
	active, _ = h.exec("systemctl", "is-active", unit)
	enabled, _ = h.exec("systemctl", "is-enabled", unit)
	return active, enabled
}

// serverDown is a runtime drop-in (gone at the next boot) that fails
// k3s.service's start. Note: not systemctl mask --runtime, which a unit
// file in /etc/systemd/system, as the installer writes k3s.service,
// shadows.
const serverDown = "/run/systemd/system/k3s.service.d/zz-e2e-down.conf"

// KeepServerDown stops a native host's k3s.service and makes each start
// of it fail until LetServerUp or the next boot, as a k3s server that
// crashes as it starts: the unit restarts every RestartSec and fails,
// whatever its agent asks, and its kubelet's heartbeat stops.
func (h *Host) KeepServerDown() {
	h.f.t.Helper()
	h.Exec("sh", "-c", fmt.Sprintf("mkdir -p %s && printf '[Service]\\nExecStartPre=/bin/false\\n' > %s && systemctl daemon-reload",
		filepath.Dir(serverDown), serverDown))
	// Note: the agent may start the unit again as it stops, cancelling
	// the stop job; each start from now on fails.
	h.f.Wait(30*time.Second, h.Name+"'s k3s server stopped", func() error {
		_, _ = h.exec("systemctl", "stop", "k3s.service")
		if pid, _ := h.exec("systemctl", "show", "-p", "MainPID", "--value", "k3s.service"); pid != "0" {
			return fmt.Errorf("k3s.service's main process is %s", pid)
		}
		return nil
	})
}

// LetServerUp lifts KeepServerDown: the unit's next restart (or its
// agent) starts the server again.
func (h *Host) LetServerUp() {
	h.f.t.Helper()
	h.Exec("sh", "-c", fmt.Sprintf("rm -f %s && systemctl daemon-reload", serverDown))
}

// neverReady is the k3s double's fault file: a server whose apiserver
// never comes up (tests/k3sdouble, (*server).neverReady).
func (h *Host) neverReady() string {
	return filepath.Join(h.dir, "data", "server", "never-ready")
}

// NeverReady makes the host's k3s server never become ready: its member
// may join and vote, but its apiserver and controllers never run, so it
// never writes its Node's etcd metadata. The host's k3s data dir is the
// machine's h.dir/data (Deploy), mounted into a Docker host's server
// container too.
func (h *Host) NeverReady() {
	h.f.t.Helper()
	if err := os.MkdirAll(filepath.Dir(h.neverReady()), 0o700); err != nil {
		h.f.t.Fatal(err)
	}
	if err := os.WriteFile(h.neverReady(), nil, 0o644); err != nil {
		h.f.t.Fatal(err)
	}
}

// MayBeReady lifts NeverReady.
func (h *Host) MayBeReady() {
	h.f.t.Helper()
	if err := os.Remove(h.neverReady()); err != nil && !os.IsNotExist(err) {
		h.f.t.Fatal(err)
	}
}

// JoinDropIn is the k3s config drop-in the host's agent owns, naming the
// live voter its k3s joins through; empty when there is none.
func (h *Host) JoinDropIn() string {
	out, _ := h.exec("cat", hostRancher+"/config.yaml.d/90-fleet-role.yaml")
	return out
}

// StagedConfig is the k3s config.yaml staged on the host, as the
// operator's Ansible renders it.
func (h *Host) StagedConfig() string {
	out, _ := h.exec("cat", hostRancher+"/config.yaml")
	return out
}

// Ready is the status of the Node's Ready condition ("" when it has none).
func (f *Fleet) Ready(name string) corev1.ConditionStatus {
	f.t.Helper()
	for _, c := range f.Node(name).Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// WaitReady waits until the Node's Ready condition has the status.
func (f *Fleet) WaitReady(name string, status corev1.ConditionStatus, timeout time.Duration) {
	f.t.Helper()
	f.Wait(timeout, fmt.Sprintf("%s's Ready is %s", name, status), func() error {
		if got := f.Ready(name); got != status {
			return fmt.Errorf("it is %q", got)
		}
		return nil
	})
}

// Reconfigure changes the controller's bounds as given, as an operator
// does: the playbook run again with the controller's configuration
// changed, whose checksum rolls its Deployment; it returns once the new
// replicas are ready.
func (f *Fleet) Reconfigure(bounds map[string]string) {
	f.t.Helper()
	if f.opts.Bounds == nil {
		f.opts.Bounds = map[string]string{}
	}
	maps.Copy(f.opts.Bounds, bounds)
	f.reconfigure()
}

// ReconfigureKeys sets top-level keys of the controller's configuration
// (each a TOML value) and runs the playbook so, with more arguments
// (-e dry_run=false, say), as Reconfigure does.
func (f *Fleet) ReconfigureKeys(keys map[string]string, args ...string) {
	f.t.Helper()
	if f.opts.Keys == nil {
		f.opts.Keys = map[string]string{}
	}
	maps.Copy(f.opts.Keys, keys)
	f.reconfigure(args...)
}

func (f *Fleet) reconfigure(args ...string) {
	f.t.Helper()
	extra, err := json.Marshal(map[string]string{"fleet_role_controller_extra_config": f.controllerConfig()})
	if err != nil {
		f.t.Fatal(err)
	}
	gen := f.ControllerDeployment().Generation
	// Note: --skip-tags hosts, as docs/deploying.md says for a change of
	// the controller's configuration alone: the hosts' plays are left out.
	if _, changed := f.Playbook(append([]string{"--skip-tags", "hosts", "-e", string(extra)}, args...)...); changed == 0 {
		f.t.Fatalf("the playbook changed nothing with the controller's configuration changed")
	}
	if f.ControllerDeployment().Generation == gen {
		f.t.Fatalf("the controller's pod template did not change with its configuration")
	}
	f.WaitRolledOut(3 * time.Minute)
}

// KillController kills every replica of the controller with SIGKILL, as
// a crash or the OOM killer would: no Lease released, no status written
// on the way out. Their containers' restart policy (the kubelet's
// restartPolicy: Always) starts them again.
func (f *Fleet) KillController() {
	f.t.Helper()
	for _, r := range f.Controller.Replicas() {
		pid := testhost.Docker(f.t, "inspect", "-f", "{{.State.Pid}}", r.Container)
		if pid == "0" {
			continue
		}
		n, err := strconv.Atoi(pid)
		if err != nil {
			f.t.Fatalf("the pid of %s: %q", r.Pod, pid)
		}
		// Note: a process killed a moment ago (at the step before, a few
		// milliseconds earlier) is still the container's until the engine
		// has seen it exit; it is dead already, as the kill wants.
		if err := syscall.Kill(n, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			f.t.Fatalf("kill %s (%d): %v", r.Pod, n, err)
		}
	}
}

// MemberWatch records etcd's member list, read every 200 ms through
// every server's endpoint, until Stop.
type MemberWatch struct {
	*poller
	mu sync.Mutex
	// most is the longest member list seen, and when.
	most   []string
	mostAt time.Time
	// names are every member's name seen, in order of first sight.
	names []string
	reads int
}

// WatchMembers starts a MemberWatch.
func (f *Fleet) WatchMembers() *MemberWatch {
	f.t.Helper()
	c := f.Etcd()
	w := &MemberWatch{}
	w.poller = f.every(200*time.Millisecond, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		resp, err := c.MemberList(ctx)
		cancel()
		if err == nil {
			var list []string
			for _, m := range resp.Members {
				name := m.Name
				if name == "" {
					name = fmt.Sprintf("(unstarted %x)", m.ID)
				}
				list = append(list, name)
			}
			w.mu.Lock()
			w.reads++
			if len(list) > len(w.most) {
				w.most, w.mostAt = list, time.Now()
			}
			for _, n := range list {
				if !slices.Contains(w.names, n) {
					w.names = append(w.names, n)
				}
			}
			w.mu.Unlock()
		}
		return true
	})
	return w
}

// Stop stops the watch.
func (w *MemberWatch) Stop() { w.poller.stop() }

// Most is the longest member list the watch saw.
func (w *MemberWatch) Most() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.most)
}

// Named are the members seen whose name is the node's (k3s's
// "<node>-<8 hex>").
func (w *MemberWatch) Named(node string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, n := range w.names {
		if strings.HasPrefix(n, node+"-") {
			out = append(out, n)
		}
	}
	return out
}

func (w *MemberWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("%d reads; at most %d members %v (at %s); every member seen: %v",
		w.reads, len(w.most), w.most, w.mostAt.Format("15:04:05.000"), w.names)
}

// During runs fn with what the fleet's helpers fail or log reported to t,
// a subtest of the fleet's test. The cleanups they register stay the
// fleet's test's: the fleet, and the clients it keeps, outlive the
// subtest.
func (f *Fleet) During(t testhost.T, fn func()) {
	parent := f.t
	f.t = subtest{T: t, parent: parent}
	defer func() { f.t = parent }()
	fn()
}

// subtest is a subtest's T whose cleanups are its parent's.
type subtest struct {
	testhost.T
	parent testhost.T
}

func (s subtest) Cleanup(fn func()) { s.parent.Cleanup(fn) }

// scenarioWrites are the writes across one fault scenario: through
// every live server, counted as writesAcross counts a swap's, for each
// swap that ended in the scenario.
type scenarioWrites struct {
	c     *clientv3.Client
	w     *Writes
	swaps int
}

// swapEnded counts a swap that ended for the scenario's writes.
func (f *Fleet) swapEnded() {
	if f.writing != nil {
		f.writing.swaps++
	}
}

// offline is said before a scenario pauses a server or stops its k3s:
// etcd's leadership is handed to another voter if the server holds it,
// and the scenario's writes go through the other servers from now on.
// Note: the election that follows a leader lost for good costs etcd's
// election timeout, and the client writing through a paused server
// waits for its write's timeout; neither is the swap's, whose writes
// the scenario counts.
func (f *Fleet) offline(h *Host) {
	f.t.Helper()
	if f.writing != nil {
		var eps []string
		for _, s := range f.servers() {
			if s != h && slices.Contains(f.writing.c.Endpoints(), f.etcdURL(s.IP)) {
				eps = append(eps, f.etcdURL(s.IP))
			}
		}
		f.writing.c.SetEndpoints(eps...)
		// The client's balancer takes the endpoints a moment later: a
		// write sent meanwhile may still go to h, and wait out its
		// timeout once h is frozen. 300 ms is fifteen writes' worth; the
		// one run before this wait saw a write sent to h after the
		// endpoints were set.
		time.Sleep(300 * time.Millisecond)
	}
	if _, err := f.membersFrom(h); err != nil {
		return // its member serves no request: not a voter, or stopped
	}
	// Note: a leader transfer takes about an election's round; twice the
	// election timeout covers the status, the list and the transfer.
	ctx, cancel := context.WithTimeout(context.Background(), 2*f.electionTimeout())
	defer cancel()
	st, err := h.etcd.Status(ctx, f.etcdURL(h.IP))
	if err != nil || st.Leader != st.Header.MemberId {
		return
	}
	list, err := h.etcd.MemberList(ctx)
	if err != nil {
		f.t.Fatalf("%s leads etcd: its member list: %v", h.Name, err)
	}
	for _, m := range list.Members {
		if m.ID != st.Header.MemberId && !m.IsLearner && m.Name != "" {
			if _, err := h.etcd.MoveLeader(ctx, m.ID); err != nil {
				f.t.Fatalf("%s leads etcd: moving leadership to %s: %v", h.Name, m.Name, err)
			}
			f.t.Logf("etcd's leadership moved from %s to %s", h.Name, m.Name)
			return
		}
	}
	f.t.Fatalf("%s leads etcd and no other voter started", h.Name)
}
