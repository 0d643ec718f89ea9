// Package e2e runs fleet-role end to end on a fleet of containers on this
// machine, built as its users build one (Deploy): hosts with systemd as
// PID 1, native ones and Docker-in-Docker ones, k3s on each as its
// installer and its operator leave it (the k3s double, tests/k3sdouble,
// over a real etcd member at the host's own address), the real
// kube-apiserver (tests/kubeapi), and fleet-role from
// `ansible-playbook ansible/deploy.yml`: the agent as a systemd unit of
// each host, the controller from its Deployment. make demo runs the same
// fleet. The scenarios are in its tests.
package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/deployment"
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

// Options shape a fleet.
type Options struct {
	Hosts []HostSpec
	// ProbePeriod is the agents' and the controller's probe period.
	ProbePeriod time.Duration
	// VerdictWindow is the controller's [verdicts] window; 0 means its
	// default.
	VerdictWindow int
	// Bounds override the controller's per-step bounds (step = "25s").
	Bounds map[string]string
	// Keys are more of the controller's top-level keys, each a TOML
	// value (dead_after = `"30s"`).
	Keys map[string]string
	// ElectionTimeout is the members' etcd election timeout; 0 means
	// K3sElectionTimeout.
	ElectionTimeout time.Duration
	// K3s is the real k3s binary the hosts run (DeployOnK3s); "" runs
	// the k3s double.
	K3s string
	// Log, when set, gets what the harness does, as it does it.
	Log func(format string, args ...any)
}

// Fleet is a running fleet, deployed by the playbook (Deploy).
type Fleet struct {
	t    testhost.T
	opts Options
	// API is the test's kube-apiserver the k3s double stands behind; nil
	// on real k3s (DeployOnK3s), whose servers serve the API.
	API *kubeapi.Server
	// Client is an administrator's client of the fleet's API; Kubeconfig
	// an administrator's kubeconfig, for the CLI.
	Client     kubernetes.Interface
	Kubeconfig string
	Dir        string
	// Bin is the fleet-role binary make built, for the CLI; BinDir holds
	// it and the .deb.
	Bin, BinDir string
	double      string
	image       string
	Hosts       map[string]*Host
	Order       []string
	// clusterID is etcd's cluster ID once the fleet was up.
	clusterID uint64
	// voters is how many voters etcd had once the fleet was up: a swap
	// that completes or rolls back leaves as many.
	voters int
	// etcdTLS is a client's TLS to real k3s's etcd (its client
	// certificate); nil for the k3s double's plain http.
	etcdTLS *tls.Config
	// k3s is the real k3s binary the hosts run; "" for the double.
	k3s string
	// k3sAPI follows the live servers' APIs, on real k3s.
	k3sAPI *k3sAPI
	// kubeconfig is the hosts': it holds the API server's certificate.
	kubeconfig string
	// Net is the hosts' network.
	Net *testhost.Network
	// Controller runs the controller's Deployment.
	Controller *deployment.Runner
	deb        string
	// helm is the helm the controller role renders the chart with.
	helm      string
	inventory string
	runs      int
	logs      string
	// writing are the writes of the scenario under way (inSequence).
	writing *scenarioWrites
}

// Host is one host of the fleet: a container, its address and files.
type Host struct {
	HostSpec
	IP        string
	Container string
	dir       string
	f         *Fleet
	dropped   bool
	// slow keeps the host's disk slow (SlowDisk) while set.
	slow *poller
	// etcd is a client of this host's member alone.
	etcd *clientv3.Client
}

// K3sElectionTimeout is k3s's etcd election timeout, the members' where a
// scenario does not set another, at which the writes across a swap are
// counted. The heartbeat is a tenth of it, as k3s's 500 ms is of its 5 s.
// Note: the fault scenarios once ran at 1 s to save CI's time; beside the
// real-k3s tier a write of theirs took 1.5 s on the busy machine, and
// k3s's own 5 s is what a fleet has.
const K3sElectionTimeout = 5 * time.Second

// NodeMonitorGracePeriod is how old a Node's heartbeat may be before the
// k3s double's node lifecycle stand-in turns its Ready to Unknown
// (Kubernetes: 50s), shortened to keep the scenarios short.
const NodeMonitorGracePeriod = 20 * time.Second

// electionTimeout is the fleet's etcd election timeout: real k3s's own,
// else Options's, else k3s's.
func (f *Fleet) electionTimeout() time.Duration {
	if f.k3s != "" {
		return K3sElectionTimeout
	}
	if f.opts.ElectionTimeout > 0 {
		return f.opts.ElectionTimeout
	}
	return K3sElectionTimeout
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
	f.clusterID, f.voters = m.ClusterID, len(m.Voters)
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

// createObjects creates the namespaces and a Pod of an app on each host.
// It creates no Node: each host's kubelet registers its own when k3s
// first starts there (tests/k3sdouble, kubeletRole.register), and the
// playbook labels it.
func createObjects(t testhost.T, c kubernetes.Interface, namespaces []string, hosts []HostSpec) {
	ctx := context.Background()
	for _, ns := range namespaces {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	for _, spec := range hosts {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "apps", Name: "web-" + spec.Name},
			Spec: corev1.PodSpec{NodeName: spec.Name, Containers: []corev1.Container{{Name: "web", Image: "web"}}}}
		if _, err := c.CoreV1().Pods("apps").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// poller calls a function on a goroutine of its own, again and again
// after an interval, until the function says it is done or stop is
// called (at the latest as the test ends).
type poller struct{ quit, done chan struct{} }

// every starts a poller of fn, which returns false once it is done.
func (f *Fleet) every(interval time.Duration, fn func() bool) *poller {
	p := &poller{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for fn() {
			select {
			case <-p.quit:
				return
			case <-time.After(interval):
			}
		}
	}()
	f.t.Cleanup(p.stop)
	return p
}

// stop stops the poller and waits for its last call to return.
func (p *poller) stop() {
	select {
	case <-p.quit:
	default:
		close(p.quit)
	}
	<-p.done
}

// requireRolesLabelled fails the test unless the playbook labelled each
// host's Node with the role of its inventory group: the harness creates
// no Node and labels none (createObjects, k3sConfig).
func (f *Fleet) requireRolesLabelled() {
	f.t.Helper()
	roles := f.roles()
	for _, name := range f.Order {
		if got, want := roles[name], f.Hosts[name].Role; got != want {
			f.t.Fatalf("after the playbook %s's %s is %q, not its group's %q", name, api.LabelRole, got, want)
		}
	}
}

// requireNoNodeWrittenByTheHarness fails the test if the harness itself
// (this test process, by its user agent) wrote to any Node, as the API
// server's audit log has it: every Node must be its kubelet's, k3s's
// and the playbook's alone.
func (f *Fleet) requireNoNodeWrittenByTheHarness() {
	f.t.Helper()
	writes, err := f.API.NodeWrites()
	if err != nil {
		f.t.Fatal(err)
	}
	if mine := writtenBy(writes, harnessAgent()); len(mine) > 0 {
		f.t.Fatalf("the harness wrote to Nodes, which k3s and the playbook alone may: %s", strings.Join(mine, "; "))
	}
}

// harnessAgent is the start of this process's user agent: client-go's
// default, which starts with the binary's name.
func harnessAgent() string {
	name, _, _ := strings.Cut(rest.DefaultKubernetesUserAgent(), "/")
	return name + "/"
}

// writtenBy names the writes to Nodes whose user agent starts with agent.
func writtenBy(writes []kubeapi.NodeWrite, agent string) []string {
	var out []string
	for _, w := range writes {
		if !strings.HasPrefix(w.UserAgent, agent) {
			continue
		}
		what := w.Node
		if w.Subresource != "" {
			what += "/" + w.Subresource
		}
		out = append(out, fmt.Sprintf("%s %s (%d)", w.Verb, what, w.Code))
	}
	return out
}

// servers are the hosts that are or may become servers, in order.
func (f *Fleet) servers() []*Host {
	var out []*Host
	for _, n := range f.Order {
		if h := f.Hosts[n]; h.Role == api.RoleVoter || h.Role == api.RoleStandby {
			out = append(out, h)
		}
	}
	return out
}

func (f *Fleet) bootstrap() *Host { return f.servers()[0] }

// up: every voter's member votes, every Node is Ready with a probe.
func (f *Fleet) up() error {
	nodes, err := f.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		p := f.Hosts[n.Name]
		if p == nil {
			continue
		}
		if !conditionTrue(&n, corev1.NodeReady) || n.Annotations[api.AnnotationProbe] == "" {
			return fmt.Errorf("%s is not Ready with a probe", n.Name)
		}
		if p.Role == api.RoleVoter && !conditionTrue(&n, api.ConditionEtcdIsVoter) {
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
	for _, n := range f.Order {
		f.Hosts[n].RestorePeerPort()
	}
}

// Node reads a Node.
func (f *Fleet) Node(name string) *corev1.Node {
	f.t.Helper()
	n, err := f.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return n
}

// Status reads status.json.
func (f *Fleet) Status() api.Status { return ReadStatus(f.Client) }

// ReadStatus reads the controller's status.json; empty while there is none.
func ReadStatus(c kubernetes.Interface) api.Status {
	var st api.Status
	cm, err := c.CoreV1().ConfigMaps(api.Namespace).Get(context.Background(), api.StatusConfigMap, metav1.GetOptions{})
	if err == nil {
		_ = json.Unmarshal([]byte(cm.Data[api.StatusKey]), &st)
	}
	return st
}

// Lease reads the swap's Lease; nil when there is none.
func (f *Fleet) Lease() *coordinationv1.Lease {
	l, err := f.Client.CoordinationV1().Leases(api.Namespace).Get(context.Background(), api.LeaseName, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return l
}

// CLI runs fleet-role against the fleet's API server.
func (f *Fleet) CLI(args ...string) (stdout, stderr string, code int) {
	cmd := exec.Command(f.Bin, append(args, "--kubeconfig", f.cliKubeconfig())...)
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

// bounds are the controller's per-step bounds: on the double the
// harness's, short; on real k3s fleet-role's defaults, k3s's own timings
// being what they are; either way Options.Bounds over them.
func (f *Fleet) bounds() string {
	b := map[string]string{"snapshot": "30s", "runners": "20s", "drain": "30s", "promote": "40s", "join": "40s",
		"gates": "1m", "step_down": "30s", "member_gone": "40s", "uncordon": "40s", "rollback": "40s"}
	if f.k3s != "" {
		b = map[string]string{}
	}
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
func Unfit(st api.Status, hosts []HostSpec) error {
	for _, h := range hosts {
		if h.Role != api.RoleVoter && h.Role != api.RoleStandby {
			continue
		}
		if v := st.Verdicts[h.Name]; v.State != api.VerdictFit {
			return fmt.Errorf("%s: %s (%d samples): %s", h.Name, v.State, v.Samples, v.Reason)
		}
	}
	return nil
}
