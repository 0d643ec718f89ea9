// Package e2e runs fleet-role end to end on a simulated fleet on this
// machine: hosts as containers, each with the real fleet-role agent, the
// k3s double (tests/k3sdouble) over a real etcd member on the host's own
// loopback address, the real kube-apiserver (tests/kubeapi), and the
// fleet-role controller as a process. Native hosts run systemd as PID 1
// and the agent on the systemd platform; Docker hosts run the agent on
// the Docker platform, which starts the double's server and agent
// containers on the machine's Docker engine (the engine's socket is
// mounted into the host, so the containers are the host's siblings
// rather than nested). Deploy builds another fleet as its users build
// one, with the playbook, the controller run from its Deployment
// (deployed.go); make demo runs that one. The scenarios are in its tests.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-role/fleet-role/swapplan"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// HostSpec is one host of the fleet.
type HostSpec struct {
	Name string
	// Role is the Node's fleet-role.io/role at the start.
	Role string
	// Docker: the host runs k3s as containers (the Docker platform);
	// otherwise as systemd units.
	Docker bool
}

// VotersAndStandby is the fleet of most scenarios and of the demo: three
// voters on systemd hosts and a standby on a Docker host.
var VotersAndStandby = []HostSpec{
	{Name: "v1", Role: swapplan.RoleVoter},
	{Name: "v2", Role: swapplan.RoleVoter},
	{Name: "v3", Role: swapplan.RoleVoter},
	{Name: "s1", Role: swapplan.RoleStandby, Docker: true},
}

// Options shape a fleet.
type Options struct {
	Hosts []HostSpec
	// ProbePeriod is the agents' and the controller's probe period.
	ProbePeriod time.Duration
	// Controller is more of the controller's TOML (its [verdicts], say).
	Controller string
	// Bounds override the controller's per-step bounds (step = "25s").
	Bounds map[string]string
	// ElectionTimeout is the members' etcd election timeout; 0 means
	// ElectionTimeout.
	ElectionTimeout time.Duration
	// Log, when set, gets what the harness does, as it does it.
	Log func(format string, args ...any)
}

// Fleet is a running simulated fleet.
type Fleet struct {
	t       testhost.T
	opts    Options
	API     *kubeapi.Server
	Dir     string
	Bin     string
	double  string
	image   string
	subnet  string
	Hosts   map[string]*Host
	Order   []string
	metrics string
	// clusterID is etcd's cluster ID once the fleet was up.
	clusterID uint64
	// kubeconfig is the hosts': it holds the API server's certificate.
	kubeconfig string
	ctrl       *exec.Cmd
	ctrlLog    string
	started    int
}

// Host is one host of the fleet: a container, its address and files.
type Host struct {
	HostSpec
	IP        string
	Container string
	dir       string
	f         *Fleet
	dropped   bool
	// etcd is a client of this host's member alone.
	etcd *clientv3.Client
}

// ElectionTimeout is the members' etcd election timeout where a
// scenario does not set one: k3s's is 5 s (K3sElectionTimeout), shortened
// to keep the scenarios that do not measure writes inside CI's limit. The
// heartbeat is a tenth of it, as k3s's 500 ms is of its 5 s.
const ElectionTimeout = time.Second

// K3sElectionTimeout is k3s's etcd election timeout, at which the writes
// across a swap are counted.
const K3sElectionTimeout = 5 * time.Second

// NodeMonitorGracePeriod is how old a Node's heartbeat may be before the
// k3s double's node lifecycle stand-in turns its Ready to Unknown
// (Kubernetes: 50s), shortened to keep the scenarios short.
const NodeMonitorGracePeriod = 20 * time.Second

// electionTimeout is the fleet's etcd election timeout: Options's, else
// ElectionTimeout.
func (f *Fleet) electionTimeout() time.Duration {
	if f.opts.ElectionTimeout > 0 {
		return f.opts.ElectionTimeout
	}
	return ElectionTimeout
}

// LearnerStall is how long the k3s double lets a learner's raft index
// stand still before its leader removes it (k3s: 5 minutes).
const LearnerStall = 20 * time.Second

var fleets atomic.Int32

// Start builds the binaries, starts the API server and the hosts, and
// waits until every voter votes and every Node is Ready with a probe.
func Start(t testhost.T, opts Options) *Fleet {
	t.Helper()
	testhost.RequireImage(t, testhost.SystemdImage)
	if opts.ProbePeriod == 0 {
		opts.ProbePeriod = 2 * time.Second
	}
	dir, err := os.MkdirTemp("", "fleet-role-e2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	f := &Fleet{t: t, opts: opts, Dir: dir, Hosts: map[string]*Host{},
		subnet: fmt.Sprintf("127.77.%d", (os.Getpid()+int(fleets.Add(1)))%200+20)}
	f.logf("building fleet-role and the k3s double")
	if f.Bin, err = testhost.BuildFleetRole(dir); err != nil {
		t.Fatal(err)
	}
	if f.double, err = testhost.Build(dir, "k3s", "./tests/k3sdouble"); err != nil {
		t.Fatal(err)
	}
	f.logf("starting a real kube-apiserver and etcd")
	f.API = kubeapi.Start(t)
	f.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := f.API.WriteEmbeddedKubeconfig(f.kubeconfig); err != nil {
		t.Fatal(err)
	}
	// A native host's k3s server runs as a user of its own (Host.uid).
	if err := os.Chmod(f.kubeconfig, 0o644); err != nil {
		t.Fatal(err)
	}
	f.objects()
	for i, spec := range opts.Hosts {
		h := &Host{HostSpec: spec, IP: fmt.Sprintf("%s.%d", f.subnet, 10+i), f: f, dir: filepath.Join(dir, spec.Name)}
		f.Hosts[spec.Name], f.Order = h, append(f.Order, spec.Name)
		if spec.Docker && f.image == "" {
			f.image = testhost.ImageOf(t, "fleet-role-test/k3s-double:latest", f.double, "/bin/k3s")
		}
	}
	f.logf("starting the hosts: %s", strings.Join(f.describe(), ", "))
	var wg sync.WaitGroup
	errs := make([]error, len(f.Order))
	for i, name := range f.Order {
		wg.Go(func() {
			g := &onGoroutine{t: t}
			defer func() {
				if errs[i] == nil {
					errs[i] = g.err
				}
			}()
			errs[i] = f.Hosts[name].start(g)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.cleanup)
	f.logf("waiting for etcd's members to vote and every Node to be Ready with a probe")
	f.waitUp(2 * time.Minute)
	return f
}

// waitUp waits until every voter's member votes and every Node is Ready
// with a probe, and keeps etcd's cluster ID.
func (f *Fleet) waitUp(timeout time.Duration) {
	f.t.Helper()
	f.Wait(timeout, "the fleet is up", f.up)
	m, err := f.Members()
	if err != nil {
		f.t.Fatal(err)
	}
	f.clusterID = m.ClusterID
}

// Journals are the last lines each host's units logged, for a failure.
func (f *Fleet) Journals() string {
	var b strings.Builder
	for _, n := range f.Order {
		out, _ := f.Hosts[n].exec("journalctl", "--no-pager", "-n", "40", "-u", "k3s", "-u", "k3s-agent", "-u", "fleet-role-agent")
		fmt.Fprintf(&b, "--- %s\n%s\n", n, out)
	}
	return b.String()
}

// keepLogs copies the controller's logs and each host's whole journal
// out of the fleet's directory, which is removed, for a failed test.
func (f *Fleet) keepLogs() {
	dir, err := os.MkdirTemp("", "fleet-role-e2e-logs")
	if err != nil {
		return
	}
	logs, _ := filepath.Glob(filepath.Join(f.Dir, "controller-*.log"))
	for _, l := range logs {
		if b, err := os.ReadFile(l); err == nil {
			_ = os.WriteFile(filepath.Join(dir, filepath.Base(l)), b, 0o644)
		}
	}
	for _, n := range f.Order {
		out, _ := f.Hosts[n].exec("journalctl", "--no-pager", "-o", "short-precise")
		_ = os.WriteFile(filepath.Join(dir, n+".journal"), []byte(out), 0o644)
	}
	f.t.Logf("the controller's logs and the hosts' journals are kept in %s", dir)
}

// onGoroutine is the test for a helper run on a goroutine of its own: a
// Fatal ends that goroutine and leaves the error for the test's goroutine
// to report, as testing wants.
type onGoroutine struct {
	t   testhost.T
	err error
}

func (g *onGoroutine) Helper()          {}
func (g *onGoroutine) Cleanup(f func()) { g.t.Cleanup(f) }
func (g *onGoroutine) Skip(args ...any) { g.Fatal(args...) }
func (g *onGoroutine) Logf(format string, args ...any) {
	g.t.Logf(format, args...)
}
func (g *onGoroutine) Fatal(args ...any) {
	g.err = errors.New(fmt.Sprint(args...))
	runtime.Goexit()
}
func (g *onGoroutine) Fatalf(format string, args ...any) {
	g.err = fmt.Errorf(format, args...)
	runtime.Goexit()
}

func (f *Fleet) logf(format string, args ...any) {
	if f.opts.Log != nil {
		f.opts.Log(format, args...)
	}
}

func (f *Fleet) describe() []string {
	var out []string
	for _, n := range f.Order {
		h := f.Hosts[n]
		kind := "systemd"
		if h.Docker {
			kind = "docker"
		}
		out = append(out, fmt.Sprintf("%s (%s, %s, %s)", n, h.Role, kind, h.IP))
	}
	return out
}

// objects creates the namespaces, the Nodes (as a first kubelet start
// would) and a Pod of an app on each.
func (f *Fleet) objects() {
	createObjects(f.t, f.API.Client, []string{swapplan.Namespace, swapplan.NodeLeaseNamespace, "apps"}, f.opts.Hosts)
}

// createObjects creates the namespaces, each host's Node (as a first
// kubelet start would) and a Pod of an app on each.
func createObjects(t testhost.T, c kubernetes.Interface, namespaces []string, hosts []HostSpec) {
	ctx := context.Background()
	for _, ns := range namespaces {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, spec := range hosts {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: spec.Name, Labels: map[string]string{swapplan.LabelRole: spec.Role}}}
		if _, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web-" + spec.Name},
			Spec: corev1.PodSpec{NodeName: spec.Name, Containers: []corev1.Container{{Name: "web", Image: "web"}}}}
		if _, err := c.CoreV1().Pods("apps").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// servers are the hosts that are or may become servers, in order.
func (f *Fleet) servers() []*Host {
	var out []*Host
	for _, n := range f.Order {
		if h := f.Hosts[n]; h.Role == swapplan.RoleVoter || h.Role == swapplan.RoleStandby {
			out = append(out, h)
		}
	}
	return out
}

func (f *Fleet) bootstrap() *Host { return f.servers()[0] }

// up: every voter's member votes, every Node is Ready with a probe.
func (f *Fleet) up() error {
	nodes, err := f.API.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		p := f.Hosts[n.Name]
		if p == nil {
			continue
		}
		if !conditionTrue(&n, corev1.NodeReady) || n.Annotations[swapplan.AnnotationProbe] == "" {
			return fmt.Errorf("%s is not Ready with a probe", n.Name)
		}
		if p.Role == swapplan.RoleVoter && !conditionTrue(&n, swapplan.ConditionEtcdIsVoter) {
			return fmt.Errorf("%s's member does not vote", n.Name)
		}
	}
	return nil
}

// conditionTrue says the Node's condition of the type is True.
func conditionTrue(n *corev1.Node, t corev1.NodeConditionType) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == t {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Wait polls cond until it returns nil, failing with its last error.
func (f *Fleet) Wait(d time.Duration, what string, cond func() error) {
	f.t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("%s: not within %s: %v\n%s", what, d, err, f.Journals())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (f *Fleet) cleanup() {
	f.StopController()
	if t, ok := f.t.(interface{ Failed() bool }); ok && t.Failed() {
		f.keepLogs()
	}
	for _, n := range f.Order {
		h := f.Hosts[n]
		if h.dropped {
			h.RestorePeerPort()
		}
		_ = exec.Command("docker", "rm", "-f", h.Container, h.siblingName("server"), h.siblingName("agent")).Run()
	}
}

// Node reads a Node.
func (f *Fleet) Node(name string) *corev1.Node {
	f.t.Helper()
	n, err := f.API.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// Status reads status.json.
func (f *Fleet) Status() swapplan.Status { return ReadStatus(f.API.Client) }

// ReadStatus reads the controller's status.json; empty while there is none.
func ReadStatus(c kubernetes.Interface) swapplan.Status {
	var st swapplan.Status
	cm, err := c.CoreV1().ConfigMaps(swapplan.Namespace).Get(context.Background(), swapplan.StatusConfigMap, metav1.GetOptions{})
	if err == nil {
		_ = json.Unmarshal([]byte(cm.Data[swapplan.StatusKey]), &st)
	}
	return st
}

// Lease reads the swap's Lease; nil when there is none.
func (f *Fleet) Lease() *coordinationv1.Lease {
	l, err := f.API.Client.CoordinationV1().Leases(swapplan.Namespace).Get(context.Background(), swapplan.LeaseName, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return l
}

// CLI runs fleet-role against the fleet's API server.
func (f *Fleet) CLI(args ...string) (stdout, stderr string, code int) {
	cmd := exec.Command(f.Bin, append(args, "--kubeconfig", f.API.Kubeconfig)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		f.t.Fatal(err)
	}
	return o.String(), e.String(), code
}

// StartController starts fleet-role controller as a process, with dry
// run off.
func (f *Fleet) StartController() {
	f.t.Helper()
	f.startController(false)
}

// StartDryRunController starts fleet-role controller with dry run on, as
// a deployment starts it: it decides and shows its verdicts, and carries
// out only manual requests.
func (f *Fleet) StartDryRunController() {
	f.t.Helper()
	f.startController(true)
}

func (f *Fleet) startController(dryRun bool) {
	f.t.Helper()
	port, err := testhost.FreePort()
	if err != nil {
		f.t.Fatal(err)
	}
	f.metrics = "127.0.0.1:" + strconv.Itoa(port)
	conf := filepath.Join(f.Dir, "controller.toml")
	p := f.opts.ProbePeriod
	toml := fmt.Sprintf(`version = 1
dry_run = %t
period = "1s"
probe_period = %q
min_pass_interval = "50ms"
drain_timeout = "10s"
listen_address = %q
lease_duration = "10s"

[leader_election]
lease_duration = "4s"
renew_deadline = "3s"
retry_period = "500ms"

[bounds]
%s
%s`, dryRun, p.String(), f.metrics, f.bounds(), f.opts.Controller)
	if err := os.WriteFile(conf, []byte(toml), 0o600); err != nil {
		f.t.Fatal(err)
	}
	f.started++
	f.ctrlLog = filepath.Join(f.Dir, fmt.Sprintf("controller-%d.log", f.started))
	log, err := os.Create(f.ctrlLog)
	if err != nil {
		f.t.Fatal(err)
	}
	defer log.Close()
	cmd := exec.Command(f.Bin, "controller", "--config", conf, "--kubeconfig", f.API.Kubeconfig)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.t.Fatal(err)
	}
	f.ctrl = cmd
	f.Wait(30*time.Second, "the controller is ready", func() error {
		resp, err := http.Get("http://" + f.metrics + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: %s", resp.Status)
		}
		return nil
	})
}

func (f *Fleet) bounds() string {
	b := map[string]string{"snapshot": "30s", "runners": "20s", "drain": "30s", "promote": "40s", "join": "40s",
		"gates": "1m", "step_down": "30s", "member_gone": "40s", "uncordon": "40s", "rollback": "40s"}
	maps.Copy(b, f.opts.Bounds)
	var lines []string
	for _, k := range slices.Sorted(maps.Keys(b)) {
		lines = append(lines, fmt.Sprintf("%s = %q", k, b[k]))
	}
	return strings.Join(lines, "\n")
}

// WaitFit waits until the controller's verdict on every voter and
// standby is fit, each on a full window of probe samples: the samples a
// host took while the fleet was starting, on a busy machine, may have
// been slow.
func (f *Fleet) WaitFit(timeout time.Duration) {
	f.t.Helper()
	f.Wait(timeout, "every voter and standby is fit", func() error { return Unfit(f.Status(), f.opts.Hosts) })
}

// Unfit names the first voter or standby of hosts whose verdict in st is
// not fit; nil when every one is.
func Unfit(st swapplan.Status, hosts []HostSpec) error {
	for _, h := range hosts {
		if h.Role != swapplan.RoleVoter && h.Role != swapplan.RoleStandby {
			continue
		}
		if v := st.Verdicts[h.Name]; v.State != swapplan.VerdictFit {
			return fmt.Errorf("%s: %s (%d samples): %s", h.Name, v.State, v.Samples, v.Reason)
		}
	}
	return nil
}

// KillController kills the controller with SIGKILL: no Lease released, no
// status written on the way out.
func (f *Fleet) KillController() {
	if f.ctrl != nil {
		_ = f.ctrl.Process.Kill()
		_ = f.ctrl.Wait()
		f.ctrl = nil
	}
}

// StopController stops the controller as systemd or the kubelet would.
func (f *Fleet) StopController() {
	if f.ctrl != nil {
		_ = f.ctrl.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = f.ctrl.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = f.ctrl.Process.Kill()
			<-done
		}
		f.ctrl = nil
	}
}

// Metrics reads the controller's /metrics.
func (f *Fleet) Metrics() string {
	resp, err := http.Get("http://" + f.metrics + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return b.String()
}
