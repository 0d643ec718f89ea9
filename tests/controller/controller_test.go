package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/controller"
	"github.com/fleet-role/fleet-role/tests/fleetmodel"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

var binary string

func TestMain(m *testing.M) {
	klog.SetLogger(logr.Discard())
	os.Exit(testhost.RunWithFleetRole(m, &binary))
}

const probePeriod = 2 * time.Second

func testConfig() config.Controller {
	c := config.DefaultController()
	c.Period = time.Second
	c.LeaseDuration = 10 * time.Second
	c.ProbePeriod = probePeriod
	c.Cooldown = time.Hour
	c.MinPassInterval = 50 * time.Millisecond
	c.DrainTimeout = 5 * time.Second
	c.ListenAddress = "127.0.0.1:0"
	c.LeaderElection = config.LeaderElection{Lease: "fleet-role-controller", LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 500 * time.Millisecond}
	c.Bounds = config.Bounds{
		Snapshot: 30 * time.Second, Runners: 15 * time.Second, Drain: 20 * time.Second, Promote: 20 * time.Second,
		Join: 20 * time.Second, Gates: time.Minute, StepDown: 15 * time.Second, RemoveMember: 30 * time.Second, MemberGone: 20 * time.Second,
		Uncordon: 20 * time.Second, Rollback: 15 * time.Second, RemoveFallback: 10 * time.Second, RemoveByVoter: 15 * time.Second,
	}
	return c
}

// watchQuorum samples etcd's members as the simulated fleet holds them,
// every 50 ms until the test ends, by the quorum oracle
// (fleetmodel.QuorumKept), and then fails the test for each moment it
// saw fewer voting members up than a quorum of them. Every env watches.
func (e *env) watchQuorum() {
	var mu sync.Mutex
	var lost []string
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			e.d.With(func(d *fleetsim.Driver) {
				if err := d.QuorumKept(fleetmodel.QuorumCheck{Now: time.Now()}); err != nil {
					mu.Lock()
					lost = append(lost, fmt.Sprintf("%s: %v", time.Now().Format(time.StampMilli), err))
					mu.Unlock()
				}
			})
		}
	}()
	e.t.Cleanup(func() {
		close(stop)
		<-done
		assert.Empty(e.t, lost, "etcd kept a quorum of its voting members throughout")
	})
}

// env is one fleet: a real API server, the driver playing the fleet, and
// the controller (in this process, so a test can stop and start it).
type env struct {
	t      *testing.T
	api    *kubeapi.Server
	d      *fleetsim.Driver
	cfg    config.Controller
	rest   *rest.Config
	ctrl   *controller.Controller
	cancel context.CancelFunc
	done   chan error
	n      int
}

func newEnv(t *testing.T, voters, standbys, agents int) *env {
	kube := kubeapi.Start(t)
	e := &env{t: t, api: kube, cfg: testConfig(), rest: rest.CopyConfig(kube.Config)}
	e.d = fleetsim.New(t, kube.Client, probePeriod, voters, standbys, agents)
	t.Cleanup(e.stop)
	e.watchQuorum()
	require.Eventually(t, func() bool {
		list, err := kube.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, n := range list.Items {
			ready := false
			for _, c := range n.Status.Conditions {
				ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
			}
			if !ready || n.Annotations[api.AnnotationProbe] == "" {
				return false
			}
		}
		return len(list.Items) == voters+standbys+agents
	}, 20*time.Second, 100*time.Millisecond, "the fleet is not Ready")
	return e
}

func (e *env) client() kubernetes.Interface {
	c, err := kubernetes.NewForConfig(e.rest)
	require.NoError(e.t, err)
	return c
}

func (e *env) start() {
	e.t.Helper()
	e.n++
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("FLEET_ROLE_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	c, err := controller.New(controller.Options{Config: e.cfg, Client: e.client(), Identity: fmt.Sprintf("test-%d", e.n), Log: log})
	require.NoError(e.t, err)
	ctx, cancel := context.WithCancel(context.Background())
	e.ctrl, e.cancel, e.done = c, cancel, make(chan error, 1)
	go func() { e.done <- c.Run(ctx) }()
}

func (e *env) stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	select {
	case err := <-e.done:
		assert.NoError(e.t, err)
	case <-time.After(15 * time.Second):
		e.t.Error("the controller did not stop")
	}
	e.cancel = nil
}

func (e *env) status() (api.Status, map[string]string) {
	cm, err := e.api.Client.CoreV1().ConfigMaps(api.Namespace).Get(context.Background(), api.StatusConfigMap, metav1.GetOptions{})
	if err != nil {
		return api.Status{}, nil
	}
	var st api.Status
	_ = json.Unmarshal([]byte(cm.Data[api.StatusKey]), &st)
	return st, cm.Data
}

// waitEnd waits for a swap to end and returns how.
func (e *env) waitEnd(timeout time.Duration) *api.SwapResult {
	e.t.Helper()
	var st api.Status
	require.Eventually(e.t, func() bool {
		st, _ = e.status()
		return st.Last != nil && st.Swap == nil
	}, timeout, 100*time.Millisecond, "no end; status: step %s, reason %s", st.Step, st.Reason)
	// The end records the result, then releases the Lease (a release that
	// meets a conflict is made again next pass).
	require.Eventually(e.t, func() bool {
		l := e.lease()
		return l == nil || l.Spec.HolderIdentity == nil
	}, 10*time.Second, 50*time.Millisecond, "the Lease is released")
	return st.Last
}

func (e *env) lease() *coordinationv1.Lease {
	l, err := e.api.Client.CoordinationV1().Leases(api.Namespace).Get(context.Background(), api.LeaseName, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return l
}

// conflicts counts the actions the controller's API writes failed with a
// conflict, from its metrics.
func (e *env) conflicts() float64 {
	rec := httptest.NewRecorder()
	e.ctrl.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	n := 0.0
	for line := range strings.Lines(rec.Body.String()) {
		if strings.HasPrefix(line, "fleet_role_action_failures_total{") && strings.Contains(line, `kind="conflict"`) {
			_, v, _ := strings.Cut(strings.TrimSpace(line), "} ")
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(e.t, err, line)
			n += f
		}
	}
	return n
}

func (e *env) node(name string) *corev1.Node {
	n, err := e.api.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	require.NoError(e.t, err)
	return n
}

// ran is how a fleet-role command ran.
type ran struct {
	stdout, stderr string
	code           int
}

// cliAsync runs the fleet-role binary as cli does, in the background:
// how it ran comes on the channel when it exits.
func (e *env) cliAsync(args ...string) <-chan ran {
	c := make(chan ran, 1)
	go func() {
		var r ran
		r.stdout, r.stderr, r.code = e.cli(args...)
		c <- r
	}()
	return c
}

// cli runs the fleet-role binary with the admin kubeconfig.
func (e *env) cli(args ...string) (stdout, stderr string, code int) {
	cmd := exec.Command(binary, append(args, "--kubeconfig", e.api.Kubeconfig)...)
	var o, er bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &er
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return o.String(), er.String(), code
}

func assertCompleted(t *testing.T, e *env, out, in string) {
	o, i := e.node(out), e.node(in)
	assert.Equal(t, api.RoleStandby, o.Labels[api.LabelRole])
	assert.Equal(t, api.RoleVoter, i.Labels[api.LabelRole])
	for _, l := range api.ServerLabels {
		assert.NotContains(t, o.Labels, l)
	}
	assert.NotContains(t, o.Annotations, api.AnnotationEtcdNodeName)
	assert.False(t, o.Spec.Unschedulable, "%s uncordoned", out)
	assert.False(t, i.Spec.Unschedulable, "%s uncordoned", in)
	for _, n := range []*corev1.Node{o, i} {
		for _, a := range api.SwapAnnotations {
			assert.NotContains(t, n.Annotations, a, "%s on %s", a, n.Name)
		}
	}
	assert.Equal(t, 3, e.d.MemberCount())
}

func TestAManualSwapThroughFleetRoleSwapRunsToCompleted(t *testing.T) {
	e := newEnv(t, 3, 1, 1)
	e.start()
	stdout, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, stdout, "requested: swap v1 out for s1 in")

	// While it runs, fleet-role status shows it readably.
	require.Eventually(t, func() bool { st, _ := e.status(); return st.Swap != nil }, 20*time.Second, 100*time.Millisecond)
	out, _, code := e.cli("status")
	require.Equal(t, 0, code)
	for _, want := range []string{"SWAP", "v1 out, s1 in (manual)", "STEP", "REASON", "HOST", "MEMBERS IT LISTS", "v2-"} {
		assert.Contains(t, out, want)
	}
	t.Logf("fleet-role status during the swap:\n%s", out)

	res := e.waitEnd(2 * time.Minute)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assertCompleted(t, e, "v1", "s1")
	if assert.NotNil(t, res.Writes, "the leadership move and removal were timed") {
		assert.Positive(t, res.Writes.Writes)
		assert.Zero(t, res.Writes.Failed, "writes failed on a quiet API server")
	}
	// Each pass writes on top of the last pass's own writes, even before
	// its watch has seen them: none is refused as a conflict.
	assert.Zero(t, e.conflicts(), "actions that met a conflict")
	_, data := e.status()
	assert.NotContains(t, data, api.RequestKey, "the request carried out is removed")
	events, err := e.api.Client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	reasons := map[string]bool{}
	for _, ev := range events.Items {
		reasons[ev.Reason] = true
	}
	for _, r := range []string{"SwapStart", "SwapCordonIn", "SwapDrainIn", "SwapPromote", "SwapStepDown", "SwapRemoveMember", "SwapCleanUp", "SwapEnd"} {
		assert.True(t, reasons[r], "an Event %s on the Node acted on", r)
	}
}

func TestASwapWhoseCandidateNeverVotesIsRolledBack(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["s1"].NeverJoin = true })
	e.start()
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	res := e.waitEnd(2 * time.Minute)
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
	s1 := e.node("s1")
	assert.Equal(t, api.RoleStandby, s1.Labels[api.LabelRole])
	assert.NotContains(t, s1.Labels, api.LabelEtcd)
	assert.False(t, s1.Spec.Unschedulable)
	assert.Equal(t, api.RoleVoter, e.node("v1").Labels[api.LabelRole])
	assert.False(t, e.node("v1").Spec.Unschedulable, "the outgoing voter was never touched")
	assert.Equal(t, 3, e.d.MemberCount())
}

func TestASwapWhoseCandidateRefusesIsAbandoned(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["s1"].RefusePromote = true })
	e.start()
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	res := e.waitEnd(time.Minute)
	assert.Equal(t, api.ResultAbandoned, res.Result)
	st, _ := e.status()
	assert.Nil(t, st.CooldownUntil, "no cooldown after an abandon")
	assert.False(t, e.node("s1").Spec.Unschedulable)
}
