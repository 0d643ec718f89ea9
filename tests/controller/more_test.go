package controller_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/controller"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// startKillable starts a controller that kill kills hard, as SIGKILL
// does its process: from then on none of its requests reaches the API
// server, a write in flight lands but is never answered, and nothing is
// released (its leadership and the swap's Lease are left to expire).
func (e *env) startKillable() (kill func()) {
	e.n++
	var dead atomic.Bool
	rc := rest.CopyConfig(e.rest)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if dead.Load() {
				return nil, errors.New("the controller's process was killed")
			}
			return rt.RoundTrip(r)
		})
	})
	// Note: called on a killed controller's goroutine too, where FailNow
	// may not be: an error is reported, and nothing started.
	client, err := kubernetes.NewForConfig(rc)
	if !assert.NoError(e.t, err) {
		return func() {}
	}
	c, err := controller.New(controller.Options{Config: e.cfg, Client: client, Identity: fmt.Sprintf("killable-%d", e.n)})
	if !assert.NoError(e.t, err) {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	kill = func() { dead.Store(true); cancel() }
	e.t.Cleanup(func() { kill(); <-done })
	return kill
}

func TestTheControllerKilledHardAtEveryStepResumesAndFinishesTheSwapRepeatingNoRequest(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	// Note: killed once each step is published, while it waits on the
	// status write that published it: the write lands, the rest of the
	// pass is lost, and a new replica takes over once the old one's
	// leadership expired (4 s), as a Deployment's new Pod does.
	var mu sync.Mutex
	var kill func()
	seen := e.afterEachStep(func(string) {
		mu.Lock()
		defer mu.Unlock()
		kill()
		kill = e.startKillable()
	})
	mu.Lock()
	kill = e.startKillable()
	mu.Unlock()
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	// An outer limit: each kill waits out the leadership (4 s), 12 of
	// them; the swap took 63 s here.
	res := e.waitEnd(5 * time.Minute)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assertCompleted(t, e, "v1", "s1")
	t.Logf("killed at %d steps: %v", len(seen()), seen())
	assert.Subset(t, seen(), happyPathLeadingAnew, "the steps the controller was killed at")
	assert.NotContains(t, seen(), api.StepJoin)
	for key, n := range answered(e, res.ID) {
		assert.Equal(t, 1, n, "%s answered more than once: a request repeated", key)
	}
}

func TestARegradeHoldingTheLeaseBlocksEveryAction(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.start()
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	require.Eventually(t, func() bool { return e.node("s1").Spec.Unschedulable }, 30*time.Second, 50*time.Millisecond)

	// Regrade takes the Lease (the controller's had expired, say) and
	// holds it, renewing it.
	leases := e.api.Client.CoordinationV1().Leases(api.Namespace)
	// Note: the controller renews the Lease until it sees regrade hold it,
	// so regrade's first update may meet a conflict, and is made again.
	take := func() {
		require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			l, err := leases.Get(context.Background(), api.LeaseName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			now := metav1.NewMicroTime(time.Now())
			l.Spec.HolderIdentity, l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = ptr.To("regrade"), &now, ptr.To[int32](30)
			l.Annotations = map[string]string{"regrade.example/level": "etcd-only"}
			_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
			return err
		}))
	}
	take()
	// An action begun before regrade took the Lease may still end; after
	// a pass has seen regrade hold it, none begins.
	require.Eventually(t, func() bool {
		p := e.ctrl.Last()
		return p != nil && strings.Contains(p.Plan.Reason, `held by "regrade"`)
	}, 10*time.Second, 20*time.Millisecond)
	time.Sleep(500 * time.Millisecond)
	before, _ := e.status()
	nodes := func() string {
		var b strings.Builder
		for _, n := range []string{"v1", "v2", "v3", "s1"} {
			node := e.node(n)
			b.WriteString(n + " " + node.Annotations[api.AnnotationRequest] + node.Annotations[api.AnnotationCordonedBy] +
				node.Annotations[api.AnnotationEtcdRemove] + node.Labels[api.LabelRole])
			if node.Spec.Unschedulable {
				b.WriteString(" cordoned")
			}
			b.WriteString("\n")
		}
		return b.String()
	}
	held := nodes()
	for range 6 {
		time.Sleep(time.Second)
		take()
		l, err := leases.Get(context.Background(), api.LeaseName, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, "regrade", *l.Spec.HolderIdentity, "never renewed by the controller")
		assert.NotContains(t, l.Annotations, api.AnnotationSwap)
		assert.Equal(t, held, nodes(), "no action on any Node")
		p := e.ctrl.Last()
		require.NotNil(t, p)
		assert.Equal(t, api.ActionNone, p.Plan.Action.Type)
		assert.False(t, p.Plan.RenewLease)
		assert.Contains(t, p.Plan.Reason, `held by "regrade"`)
	}
	after, _ := e.status()
	assert.Equal(t, before.LastAction, after.LastAction, "no action taken")
	require.NotNil(t, after.Swap, "the swap is still reported")

	// Regrade releases it, clearing its annotations: the swap resumes.
	l, err := leases.Get(context.Background(), api.LeaseName, metav1.GetOptions{})
	require.NoError(t, err)
	l.Spec.HolderIdentity, l.Annotations = nil, nil
	_, err = leases.Update(context.Background(), l, metav1.UpdateOptions{})
	require.NoError(t, err)
	res := e.waitEnd(2 * time.Minute)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, before.Swap.ID, res.ID, "the same swap, resumed")
}

// applyPackaged creates the objects of the packaged manifests (the chart's
// render, packaging/kubernetes/controller.yaml), strictly decoded.
func applyPackaged(t *testing.T, c kubernetes.Interface) {
	b, err := os.ReadFile(filepath.Join(testhost.Root(), "packaging", "kubernetes", "controller.yaml"))
	require.NoError(t, err)
	kubeapi.Apply(t, c, b)
}

func TestTheControllerAsItsServiceAccountWithThePackagedRBACCanDoASwapAndNothingElse(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	applyPackaged(t, e.api.Client)
	dep, err := e.api.Client.AppsV1().Deployments(api.Namespace).Get(context.Background(), "fleet-role-controller", metav1.GetOptions{})
	require.NoError(t, err, "the API server takes the packaged Deployment")
	assert.Equal(t, "fleet-role-controller", dep.Spec.Template.Spec.ServiceAccountName)
	cm, err := e.api.Client.CoreV1().ConfigMaps(api.Namespace).Get(context.Background(), "fleet-role-controller-config", metav1.GetOptions{})
	require.NoError(t, err)
	packaged, err := config.ParseController([]byte(cm.Data["controller.toml"]))
	require.NoError(t, err)
	assert.True(t, packaged.DryRun, "the package is a dry run until told otherwise")
	e.rest.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:fleet-role:fleet-role-controller"}
	sa := e.client()

	ctx := context.Background()
	_, err = sa.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "it cannot read Secrets: %v", err)
	_, err = sa.CoreV1().Secrets(api.Namespace).Get(ctx, "anything", metav1.GetOptions{})
	assert.True(t, apierrors.IsForbidden(err), "not even in its own namespace: %v", err)
	err = sa.CoreV1().Nodes().Delete(ctx, "a1", metav1.DeleteOptions{})
	assert.True(t, apierrors.IsForbidden(err), "it cannot delete Nodes: %v", err)
	err = sa.CoreV1().Pods("apps").Delete(ctx, "web-v1", metav1.DeleteOptions{})
	assert.True(t, apierrors.IsForbidden(err), "it evicts Pods, it does not delete them: %v", err)
	_, err = sa.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "no ConfigMap but its own: %v", err)
	_, err = sa.AppsV1().Deployments(api.Namespace).List(ctx, metav1.ListOptions{})
	assert.True(t, apierrors.IsForbidden(err), "no Deployments: %v", err)

	e.start()
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	res := e.waitEnd(2 * time.Minute)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assertCompleted(t, e, "v1", "s1")
	st, _ := e.status()
	assert.Empty(t, st.Problems)
}

func TestFleetRoleSwapRefusesWhatTheControllerWouldNotDo(t *testing.T) {
	e := newEnv(t, 3, 1, 1)
	for _, tc := range []struct{ out, in, want string }{
		{"s1", "v1", "refused: s1 is not a voter"},
		{"v1", "a1", `refused: a1's role is "agent", not "standby"`},
		{"v1", "v2", "refused: v2 is a voter already"},
		{"v1", "ghost", "refused: there is no Node ghost"},
	} {
		_, stderr, code := e.cli("swap", tc.out, tc.in)
		assert.Equal(t, 1, code)
		assert.Contains(t, stderr, tc.want)
	}
	_, stderr, code := e.cli("swap", "v1")
	assert.Equal(t, 2, code, "bad usage")
	assert.Contains(t, stderr, "want OUT, the voter to swap out, and IN, the standby to swap in")
	_, data := e.status()
	assert.NotContains(t, data, api.RequestKey, "nothing written")

	e.start()
	_, stderr, code = e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	require.Eventually(t, func() bool { st, _ := e.status(); return st.Swap != nil }, 20*time.Second, 50*time.Millisecond)
	_, stderr, code = e.cli("swap", "v2", "s1")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "is under way")
}

func TestDryRunAnAutomaticDecisionChangesNothingButTheStatus(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.cfg.DryRun = true
	e.cfg.Verdicts.Window = 3
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].FsyncMs = 40 })
	before := map[string]string{}
	for _, n := range []string{"v1", "v2", "v3", "s1"} {
		before[n] = e.node(n).Labels[api.LabelRole]
	}
	e.start()
	var st api.Status
	require.Eventually(t, func() bool { st, _ = e.status(); return st.Decision != nil }, 30*time.Second, 50*time.Millisecond)
	assert.Equal(t, "v2", st.Decision.Out)
	assert.Equal(t, "s1", st.Decision.In)
	assert.Contains(t, st.Reason, "dry run: would swap v2 for s1")
	assert.Equal(t, api.VerdictUnfit, st.Verdicts["v2"].State)
	time.Sleep(3 * time.Second)
	_, err := e.api.Client.CoordinationV1().Leases(api.Namespace).Get(context.Background(), api.LeaseName, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no Lease taken")
	for n, role := range before {
		node := e.node(n)
		assert.Equal(t, role, node.Labels[api.LabelRole])
		assert.False(t, node.Spec.Unschedulable)
		for _, a := range api.SwapAnnotations {
			assert.NotContains(t, node.Annotations, a)
		}
	}
	st, _ = e.status()
	assert.Nil(t, st.Swap)
	assert.Nil(t, st.LastAction, "no action")
	// The decision is seen: one Event on the voter it would swap out, a
	// count and a gauge; no other Event of the controller.
	events, err := e.api.Client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	require.NoError(t, err)
	var seen []string
	for _, ev := range events.Items {
		if ev.Source.Component != api.EventSourceController {
			t.Logf("another component's Event: %s %s on %s/%s by %q: %s", ev.Type, ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Source.Component, ev.Message)
			continue
		}
		seen = append(seen, fmt.Sprintf("%s %s/%s x%d: %s", ev.Reason, ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Count, ev.Message))
	}
	require.Len(t, seen, 1, "%q", seen)
	assert.Contains(t, seen[0], api.EventDryRunWouldSwap+" Node/v2 x1: dry run: would swap v2 for s1")
	srv := httptest.NewServer(e.ctrl.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	assert.Contains(t, string(body), `fleet_role_dry_run_decisions_total{in="s1",out="v2"} 1`)
	assert.Contains(t, string(body), "fleet_role_dry_run_would_swap 1")
}

func TestWithDryRunOffTheAutomaticDecisionSwapsAVoterMadeSlowForTheFitStandby(t *testing.T) {
	e := newEnv(t, 3, 2, 0)
	e.cfg.DryRun = false
	e.cfg.Verdicts.Window = 4
	e.d.With(func(d *fleetsim.Driver) {
		d.Hosts["v2"].FsyncMs = 35 // its disk turned slow
		d.Hosts["s2"].FsyncMs = 6  // a fit standby, but not the fittest
	})
	e.start()

	// fleet-role status shows each host's verdict and its figures.
	require.Eventually(t, func() bool {
		st, _ := e.status()
		return st.Verdicts["v2"].State == api.VerdictUnfit || st.Swap != nil
	}, 30*time.Second, 50*time.Millisecond)
	out, _, code := e.cli("status")
	require.Equal(t, 0, code)
	t.Logf("fleet-role status:\n%s", out)
	assert.Regexp(t, `v2 +unfit +\d bad of 4 +35\.0 ms`, out)
	assert.Regexp(t, `s1 \(standby\) +fit +0 bad of 4 +2\.0 ms`, out)

	res := e.waitEnd(3 * time.Minute)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, api.OriginAutomatic, res.Origin)
	assert.Equal(t, "v2", res.Out)
	assert.Equal(t, "s1", res.In, "the fittest eligible standby")
	assertCompleted(t, e, "v2", "s1")
	st, _ := e.status()
	require.NotNil(t, st.CooldownUntil)
	assert.True(t, st.CooldownUntil.After(time.Now().Add(50*time.Minute)), "the cooldown holds the next automatic swap")
}

// counter counts the requests a client makes.
type counter struct {
	mu   sync.Mutex
	reqs []string
	rt   http.RoundTripper
}

func (c *counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	c.reqs = append(c.reqs, r.Method+" "+r.URL.Path+"?"+r.URL.RawQuery)
	c.mu.Unlock()
	return c.rt.RoundTrip(r)
}

func (c *counter) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.reqs
	c.reqs = nil
	return out
}

func TestAnIdlePassMakesNoRequestsAndStartUpAHandful(t *testing.T) {
	e := newEnv(t, 3, 1, 2)
	cnt := &counter{}
	e.rest.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { cnt.rt = rt; return cnt }
	e.start()
	require.Eventually(t, func() bool { return e.ctrl.Passes() > 0 }, 20*time.Second, 10*time.Millisecond)
	startup := cnt.take()
	t.Logf("start-up: %d requests: %v", len(startup), startup)
	// Note: 12 before the holds were on by default; the first reading of
	// the holds adds two: the search for kured's DaemonSet (one list,
	// again every 5 minutes) and the Plans' API (one discovery GET, again
	// every 30 s, past this test's idle stretch).
	assert.LessOrEqual(t, len(startup), 14, "a handful at start-up: %v", startup)
	passes := e.ctrl.Passes()
	time.Sleep(6 * time.Second)
	idle := cnt.take()
	assert.Greater(t, e.ctrl.Passes()-passes, int64(4), "passes went on (the period is 1s, the probes change)")
	var other []string
	for _, r := range idle {
		if !strings.Contains(r, "/leases/fleet-role-controller") {
			other = append(other, r)
		}
	}
	assert.Empty(t, other, "idle passes make no requests; the only ones are the replicas' election")
	t.Logf("%d idle passes, %d requests, all of them the election's", e.ctrl.Passes()-passes, len(idle))
}
