package controller

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
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/swapplan"
)

// The holds on a real API server (kured's DaemonSet, the Plans) are
// tests/controller's part; here, what each hold makes of what it reads.

func kuredDaemonSet(lock string) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kured"}}
	if lock != "" {
		ds.Annotations = map[string]string{config.DefaultKuredLockAnnotation: lock}
	}
	return ds
}

func kuredHolds(t *testing.T, ds *appsv1.DaemonSet) *holds {
	t.Helper()
	client := k8sfake.NewClientset()
	if ds != nil {
		client = k8sfake.NewClientset(ds)
	}
	h, err := newHolds(config.Holds{KuredDaemonSet: "kube-system/kured", KuredLockAnnotation: config.DefaultKuredLockAnnotation}, client, prometheus.NewRegistry())
	require.NoError(t, err)
	return h
}

func TestKuredsLockHoldsWhileAHolderWhoseTTLHasNotRunOutIsNamedInEitherForm(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	created := now.Add(-10 * time.Minute).Format(time.RFC3339)
	for _, c := range []struct {
		name, lock, want string
	}{
		{"no annotation", "", ""},
		{"released (an empty multi-lock)", `{"maxOwners":2,"locks":null}`, ""},
		{"one holder, no TTL", `{"nodeID":"v3","metadata":{"unschedulable":false},"created":"` + created + `","TTL":0}`, "kured's reboot lock is held by v3"},
		{"one holder, TTL running", `{"nodeID":"v3","created":"` + created + `","TTL":3600000000000}`, "kured's reboot lock is held by v3"},
		{"one holder, TTL run out", `{"nodeID":"v3","created":"` + created + `","TTL":60000000000}`, ""},
		{"several holders, one run out", `{"maxOwners":3,"locks":[{"nodeID":"a1","created":"` + created + `","TTL":0},{"nodeID":"v2","created":"` + created + `","TTL":60000000000},{"nodeID":"s1","created":"` + created + `","TTL":0}]}`, "kured's reboot lock is held by a1, s1"},
		{"not JSON", `v3`, "kured's lock weave.works/kured-node-lock on kube-system/kured cannot be read: invalid character"},
		{"no holder named", `{"created":"` + created + `"}`, "cannot be read: no nodeID"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := kuredHolds(t, kuredDaemonSet(c.lock)).check(context.Background(), swapplan.Snapshot{Now: now}, nil)
			if c.want == "" {
				assert.Empty(t, got)
				return
			}
			require.Len(t, got, 1)
			assert.Contains(t, got[0], c.want)
		})
	}
	t.Run("the holders but the controller are kept by name, for their maintenance", func(t *testing.T) {
		lock := `{"maxOwners":3,"locks":[{"nodeID":"a1","created":"` + created + `","TTL":0},{"nodeID":"v2","created":"` + created + `","TTL":60000000000},` +
			`{"nodeID":"` + api.ControllerHolder + `","created":"` + created + `","TTL":0}]}`
		h := kuredHolds(t, kuredDaemonSet(lock))
		h.check(context.Background(), swapplan.Snapshot{Now: now}, nil)
		assert.Equal(t, []string{"a1"}, h.kuredHolders, "v2's place ran out; the controller's is no maintenance")
	})
	t.Run("the DaemonSet missing holds, and says so", func(t *testing.T) {
		got := kuredHolds(t, nil).check(context.Background(), swapplan.Snapshot{Now: now}, nil)
		require.Len(t, got, 1)
		assert.Contains(t, got[0], `kured's lock on the DaemonSet kube-system/kured cannot be read: daemonsets.apps "kured" not found`)
	})
}

// prometheusQueryAPI answers /api/v1/query as Prometheus's HTTP API does
// (web/api/v1: {"status":"success","data":{"resultType":"vector",...}}),
// with the ALERTS series given; a status other than 200 answers an error.
func prometheusQueryAPI(t *testing.T, status int, series ...string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/query" {
			http.NotFound(w, r)
			return
		}
		_ = r.ParseForm()
		assert.Equal(t, "ALERTS", r.Form.Get("query"))
		w.Header().Set("Content-Type", "application/json")
		if status != http.StatusOK {
			w.WriteHeader(status)
			fmt.Fprint(w, `{"status":"error","errorType":"internal","error":"the TSDB is closed"}`)
			return
		}
		fmt.Fprintf(w, `{"status":"success","data":{"resultType":"vector","result":[%s]}}`, strings.Join(series, ","))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func alert(name, state string, value int) string {
	return fmt.Sprintf(`{"metric":{"__name__":"ALERTS","alertname":%q,"alertstate":%q,"severity":"warning"},"value":[1764583200,"%d"]}`, name, state, value)
}

func TestPrometheusAlertsHoldAsKuredFiltersThem(t *testing.T) {
	srv := prometheusQueryAPI(t, http.StatusOK,
		alert("EtcdHighFsyncDurations", "firing", 1), alert("EtcdNoLeader", "pending", 1),
		alert("Watchdog", "firing", 1), alert("Gone", "firing", 0))
	for _, c := range []struct {
		name string
		cfg  config.Holds
		want string
	}{
		{"every active alert", config.Holds{}, "EtcdHighFsyncDurations, EtcdNoLeader, Watchdog"},
		{"but those the filter names", config.Holds{AlertFilterRegexp: "^Watchdog$"}, "EtcdHighFsyncDurations, EtcdNoLeader"},
		{"only those the filter names", config.Holds{AlertFilterRegexp: "^Etcd", AlertFilterMatchOnly: true}, "EtcdHighFsyncDurations, EtcdNoLeader"},
		{"only firing ones the filter names", config.Holds{AlertFilterRegexp: "^Etcd", AlertFilterMatchOnly: true, AlertFiringOnly: true}, "EtcdHighFsyncDurations"},
		{"none the filter names", config.Holds{AlertFilterRegexp: "^Kube", AlertFilterMatchOnly: true}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			c.cfg.PrometheusURL = srv.URL
			h, err := newHolds(c.cfg, k8sfake.NewClientset(), prometheus.NewRegistry())
			require.NoError(t, err)
			got := h.check(context.Background(), swapplan.Snapshot{}, nil)
			if c.want == "" {
				assert.Empty(t, got)
				return
			}
			assert.Equal(t, []string{"alerts are active at " + srv.URL + ": " + c.want}, got)
		})
	}
	t.Run("Prometheus failing holds, and says so", func(t *testing.T) {
		bad := prometheusQueryAPI(t, http.StatusServiceUnavailable)
		h, err := newHolds(config.Holds{PrometheusURL: bad.URL}, k8sfake.NewClientset(), prometheus.NewRegistry())
		require.NoError(t, err)
		got := h.check(context.Background(), swapplan.Snapshot{}, nil)
		require.Len(t, got, 1)
		assert.Contains(t, got[0], "the alerts at "+bad.URL+" cannot be read: ")
		assert.Contains(t, got[0], "503")
	})
}

// alertAbout is an active alert with the labels given (name="value" pairs).
func alertAbout(name string, labels string) string {
	return fmt.Sprintf(`{"metric":{"__name__":"ALERTS","alertname":%q,"alertstate":"firing",%s},"value":[1764583200,"1"]}`, name, labels)
}

func TestWatchdogInfoInhibitorAndFleetRolesOwnAlertsDoNotHoldByDefaultAndDoOnceTheIgnoreIsEmptied(t *testing.T) {
	srv := prometheusQueryAPI(t, http.StatusOK,
		alert("Watchdog", "firing", 1), alert("InfoInhibitor", "firing", 1),
		alert("FleetRoleDryRunWouldSwap", "firing", 1), alert("etcdHighFsyncDurations", "firing", 1))
	read := func(ignore string) []string {
		h, err := newHolds(config.Holds{PrometheusURL: srv.URL, AlertIgnoreRegexp: ignore}, k8sfake.NewClientset(), prometheus.NewRegistry())
		require.NoError(t, err)
		return h.check(context.Background(), swapplan.Snapshot{}, nil)
	}
	assert.Equal(t, []string{"alerts are active at " + srv.URL + ": etcdHighFsyncDurations"}, read(config.DefaultAlertIgnoreRegexp))
	assert.Equal(t, []string{"alerts are active at " + srv.URL + ": FleetRoleDryRunWouldSwap, InfoInhibitor, Watchdog, etcdHighFsyncDurations"}, read(""))
}

func TestAnAlertAboutTheOutgoingVoterDoesNotHoldItsSwapButOneAboutAnotherHostOrTheWholeClusterDoes(t *testing.T) {
	srv := prometheusQueryAPI(t, http.StatusOK,
		alertAbout("etcdHighFsyncDurations", `"instance":"10.0.0.12:2381","job":"etcd"`),
		alertAbout("etcdNoLeader", `"instance":"v2","job":"etcd"`),
		alertAbout("KubeNodeNotReady", `"node":"v2"`),
		alertAbout("etcdGRPCRequestsSlow", `"instance":"10.0.0.13:2381","job":"etcd"`),
		alertAbout("etcdMembersDown", `"job":"etcd"`))
	v2 := &swapplan.Node{Name: "v2", MemberAddress: "10.0.0.12"}
	read := func(ignoreOutgoing bool, out *swapplan.Node) []string {
		h, err := newHolds(config.Holds{PrometheusURL: srv.URL, AlertIgnoreOutgoing: ignoreOutgoing}, k8sfake.NewClientset(), prometheus.NewRegistry())
		require.NoError(t, err)
		return h.check(context.Background(), swapplan.Snapshot{}, out)
	}
	at := "alerts are active at " + srv.URL + ": "
	assert.Equal(t, []string{at + "etcdGRPCRequestsSlow, etcdMembersDown"}, read(true, v2), "v2's own symptoms go; v3's and the cluster's hold")
	assert.Equal(t, []string{at + "KubeNodeNotReady, etcdGRPCRequestsSlow, etcdHighFsyncDurations, etcdMembersDown, etcdNoLeader"}, read(false, v2))
	assert.Equal(t, []string{at + "KubeNodeNotReady, etcdGRPCRequestsSlow, etcdHighFsyncDurations, etcdMembersDown, etcdNoLeader"}, read(true, nil), "no swap known: every alert holds")
}

func TestAHoldThatCannotBeReadHoldsIsCountedAndWarnsOnceEachTimeItTurnsUnreadable(t *testing.T) {
	var mu sync.Mutex
	failing := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if failing {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprint(w, `{"status":"error","errorType":"unavailable","error":"the TSDB is closed"}`)
			return
		}
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
	}))
	t.Cleanup(srv.Close)
	setFailing := func(f bool) { mu.Lock(); failing = f; mu.Unlock() }
	reg := prometheus.NewRegistry()
	h, err := newHolds(config.Holds{PrometheusURL: srv.URL, KuredDaemonSet: config.HoldOff, UpgradePlansNamespace: config.HoldOff}, k8sfake.NewClientset(), reg)
	require.NoError(t, err)
	var warned []string
	h.warn = func(by, why string) { warned = append(warned, by+": "+why) }
	ctx := context.Background()

	for range 2 {
		got := h.check(ctx, swapplan.Snapshot{}, nil)
		require.Len(t, got, 1)
		assert.Contains(t, got[0], "the alerts at "+srv.URL+" cannot be read: ")
	}
	require.Len(t, warned, 1, "told once while it stays unreadable")
	assert.Contains(t, warned[0], "prometheus: the alerts at "+srv.URL+" cannot be read: ")
	assert.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fleet_role_hold_read_failures_total Reads of a hold that failed, by hold: kured, upgrade or prometheus.
# TYPE fleet_role_hold_read_failures_total counter
fleet_role_hold_read_failures_total{by="prometheus"} 2
# HELP fleet_role_hold_unreadable 1 while a hold cannot be read (it then holds), by hold: kured, upgrade or prometheus.
# TYPE fleet_role_hold_unreadable gauge
fleet_role_hold_unreadable{by="prometheus"} 1
`), "fleet_role_hold_read_failures_total", "fleet_role_hold_unreadable"))

	setFailing(false)
	assert.Empty(t, h.check(ctx, swapplan.Snapshot{}, nil))
	assert.Equal(t, 0.0, testutil.ToFloat64(h.unreadable.WithLabelValues(holdPrometheus)))
	setFailing(true)
	h.check(ctx, swapplan.Snapshot{}, nil)
	assert.Len(t, warned, 2, "told again once it turned unreadable again")
	assert.Equal(t, 3.0, testutil.ToFloat64(h.readFailures.WithLabelValues(holdPrometheus)))
}

func TestAHoldInForceKeepsTheTimeItBeganUntilItEnds(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	created := t0.Add(-time.Hour).Format(time.RFC3339)
	client := k8sfake.NewClientset(kuredDaemonSet(`{"nodeID":"v3","created":"` + created + `","TTL":0}`))
	reg := prometheus.NewRegistry()
	h, err := newHolds(config.Holds{KuredDaemonSet: "kube-system/kured", KuredLockAnnotation: config.DefaultKuredLockAnnotation}, client, reg)
	require.NoError(t, err)
	ctx := context.Background()
	require.NotEmpty(t, h.check(ctx, swapplan.Snapshot{Now: t0}, nil))
	require.NotEmpty(t, h.check(ctx, swapplan.Snapshot{Now: t0.Add(10 * time.Minute)}, nil))
	assert.Equal(t, float64(t0.Unix()), testutil.ToFloat64(h.since.WithLabelValues(holdKured)), "from its first reading")

	_, err = client.AppsV1().DaemonSets("kube-system").Update(ctx, kuredDaemonSet(""), metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Empty(t, h.check(ctx, swapplan.Snapshot{Now: t0.Add(20 * time.Minute)}, nil))
	assert.Equal(t, 0, testutil.CollectAndCount(h.since), "no series while no hold is in force")
	assert.Equal(t, 0.0, testutil.ToFloat64(h.held.WithLabelValues(holdKured)))
}

func TestAReadingOfTheHoldsIsShownAgainForThirtySecondsButReadFreshWhenASwapWouldStartOrTheVoterChanges(t *testing.T) {
	var mu sync.Mutex
	queries := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		queries++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"status":"success","data":{"resultType":"vector","result":[`+alert("etcdNoLeader", "firing", 1)+`]}}`)
	}))
	t.Cleanup(srv.Close)
	asked := func() int { mu.Lock(); defer mu.Unlock(); return queries }
	h, err := newHolds(config.Holds{PrometheusURL: srv.URL}, k8sfake.NewClientset(), prometheus.NewRegistry())
	require.NoError(t, err)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	v2, v3 := &swapplan.Node{Name: "v2"}, &swapplan.Node{Name: "v3"}
	want := []string{"alerts are active at " + srv.URL + ": etcdNoLeader"}

	assert.Equal(t, want, h.read(ctx, swapplan.Snapshot{Now: t0}, v2, false))
	assert.Equal(t, want, h.read(ctx, swapplan.Snapshot{Now: t0.Add(29 * time.Second)}, v2, false))
	assert.Equal(t, 1, asked(), "shown again within 30s")
	h.read(ctx, swapplan.Snapshot{Now: t0.Add(29 * time.Second)}, v2, true)
	assert.Equal(t, 2, asked(), "read fresh for a start")
	h.read(ctx, swapplan.Snapshot{Now: t0.Add(30 * time.Second)}, v3, false)
	assert.Equal(t, 3, asked(), "read anew for another voter")
	h.read(ctx, swapplan.Snapshot{Now: t0.Add(60 * time.Second)}, v3, false)
	assert.Equal(t, 4, asked(), "read anew after 30s")
}

func TestEveryHoldTurnedOffReadsNothing(t *testing.T) {
	h, err := newHolds(config.Holds{KuredDaemonSet: config.HoldOff, UpgradePlansNamespace: config.HoldOff, KuredLockAnnotation: config.DefaultKuredLockAnnotation}, nil, prometheus.NewRegistry())
	require.NoError(t, err)
	assert.Nil(t, h)
	h, err = newHolds(config.Holds{KuredLockAnnotation: config.DefaultKuredLockAnnotation}, k8sfake.NewClientset(), prometheus.NewRegistry())
	require.NoError(t, err)
	assert.NotNil(t, h, "kured's lock and the Plans are on by default")
}

// webhook records the bodies posted to it.
type webhook struct {
	mu     sync.Mutex
	bodies []string
	srv    *httptest.Server
}

func newWebhook(t *testing.T) *webhook {
	w := &webhook{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.mu.Lock()
		w.bodies = append(w.bodies, r.Method+" "+r.URL.Path+" "+string(body))
		w.mu.Unlock()
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *webhook) received() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.bodies...)
}

// url is the webhook as shoutrrr's generic service names it.
func (w *webhook) url(path string) string {
	return "generic://" + strings.TrimPrefix(w.srv.URL, "http://") + path + "?disabletls=yes&template=json"
}

func TestTheNotifierPostsEachNewsOfASwapInOrderToEveryURL(t *testing.T) {
	a, b := newWebhook(t), newWebhook(t)
	file := filepath.Join(t.TempDir(), "urls")
	require.NoError(t, os.WriteFile(file, []byte("# the on-call channel\n\n"+b.url("/hooks/oncall")+"\n"), 0o600))
	n, err := NewNotifier(config.Notify{URLs: []string{a.url("/hooks/fleet")}, URLsFile: file}, nil)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	n.register(reg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go n.run(ctx, nil)

	rec := &api.SwapRecord{ID: "20261201-100000-v2", Out: "v2", In: "s1", Origin: api.OriginAutomatic}
	ended := *rec
	ended.Phase, ended.Result = api.PhaseEnd, api.ResultRolledBack
	ended.Reason = "s1 did not join within 10m"
	for _, p := range []swapplan.Plan{
		{Action: swapplan.Action{Type: api.ActionStart}, Swap: rec, Reason: "swapping v2 for s1: v2 is unfit"},
		{Action: swapplan.Action{Type: api.ActionPromote, Node: "s1"}, Swap: rec, Reason: "no news"},
		{Action: swapplan.Action{Type: api.ActionRollback}, Swap: rec, Reason: "s1 did not join within 10m"},
		{Action: swapplan.Action{Type: api.ActionEnd}, Swap: &ended, Reason: "ends"},
	} {
		n.told(p)
	}
	want := []string{
		"fleet-role: swap 20261201-100000-v2 (v2 out, s1 in, automatic) started: swapping v2 for s1: v2 is unfit",
		"fleet-role: swap 20261201-100000-v2 (v2 out, s1 in, automatic) is rolling back: s1 did not join within 10m",
		"fleet-role: swap 20261201-100000-v2 (v2 out, s1 in, automatic) ended rolled-back: s1 did not join within 10m",
	}
	for _, w := range []struct {
		hook *webhook
		path string
	}{{a, "/hooks/fleet"}, {b, "/hooks/oncall"}} {
		require.Eventually(t, func() bool { return len(w.hook.received()) == len(want) }, 30*time.Second, 10*time.Millisecond)
		for i, got := range w.hook.received() {
			assert.True(t, strings.HasPrefix(got, "POST "+w.path+" "), got)
			assert.Contains(t, got, want[i])
		}
	}
	// Note: a send is counted once its webhook has answered.
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fleet_role_notifications_total Notifications to each URL by outcome: sent; failed (a send that failed, tried again after a backoff); dropped (the oldest, the queue full, or its URL no longer configured).
# TYPE fleet_role_notifications_total counter
fleet_role_notifications_total{outcome="dropped"} 0
fleet_role_notifications_total{outcome="failed"} 0
fleet_role_notifications_total{outcome="sent"} 6
`), "fleet_role_notifications_total"))
	}, 10*time.Second, 10*time.Millisecond)
}

func TestANotificationURLShoutrrrDoesNotKnowIsABadConfigurationThatDoesNotShowTheURL(t *testing.T) {
	_, err := NewNotifier(config.Notify{URLs: []string{"generic://example.org/hook", "nosuchservice://hunter2@example.org/"}}, nil)
	require.ErrorIs(t, err, config.ErrInvalid)
	assert.Contains(t, err.Error(), "notify.urls[1] (nosuchservice://…)")
	assert.NotContains(t, err.Error(), "hunter2", "a token in a URL is not shown")
	_, err = NewNotifier(config.Notify{URLsFile: filepath.Join(t.TempDir(), "missing")}, nil)
	require.ErrorIs(t, err, config.ErrInvalid)
	assert.Contains(t, err.Error(), "notify.urls_file: open ")
	n, err := NewNotifier(config.Notify{}, nil)
	require.NoError(t, err)
	assert.Nil(t, n, "no URL, no notifier")
}

func TestKuredsDaemonSetIsFoundByItsChartLabelOrItsNameAndItsLockHoldsButNotTheControllersOwnPlace(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	held := `{"nodeID":"v3","created":"` + now.Add(-time.Minute).Format(time.RFC3339) + `","TTL":3600000000000}`
	ours := `{"nodeID":"` + api.ControllerHolder + `","created":"` + now.Add(-time.Minute).Format(time.RFC3339) + `","TTL":3600000000000}`
	ds := func(ns, name string, labels map[string]string, lock string) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels,
			Annotations: map[string]string{config.DefaultKuredLockAnnotation: lock}}}
	}
	for _, c := range []struct {
		name       string
		configured string
		objects    []*appsv1.DaemonSet
		want       []string
		watched    string
		off        string
	}{
		{"kured's manifests: kube-system/kured", "", []*appsv1.DaemonSet{ds("kube-system", "kured", nil, held)},
			[]string{"kured's reboot lock is held by v3"}, "kured's reboot lock (kube-system/kured, found by itself)", ""},
		{"kured's Helm chart: labelled, under its release's name", "", []*appsv1.DaemonSet{
			ds("ops", "fluent-bit", map[string]string{kuredChartLabel: "fluent-bit"}, held),
			ds("ops", "reboots", map[string]string{kuredChartLabel: "kured"}, held)},
			[]string{"kured's reboot lock is held by v3"}, "kured's reboot lock (ops/reboots, found by itself)", ""},
		{"no kured: off, saying so", "", []*appsv1.DaemonSet{ds("ops", "fluent-bit", nil, held)},
			nil, "", "kured's reboot lock (no kured DaemonSet found: none labelled app.kubernetes.io/name=kured or named kured)"},
		{"turned off", config.HoldOff, []*appsv1.DaemonSet{ds("kube-system", "kured", nil, held)},
			nil, "", `kured's reboot lock (holds.kured_daemonset is "off")`},
		{"the controller's own place, taken for its swap", "", []*appsv1.DaemonSet{ds("kube-system", "kured", nil, ours)},
			nil, "kured's reboot lock (kube-system/kured, found by itself)", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := k8sfake.NewClientset()
			for _, o := range c.objects {
				_, err := client.AppsV1().DaemonSets(o.Namespace).Create(context.Background(), o, metav1.CreateOptions{})
				require.NoError(t, err)
			}
			cfg := config.DefaultController().Holds
			cfg.KuredDaemonSet, cfg.UpgradePlansNamespace = c.configured, config.HoldOff
			h, err := newHolds(cfg, client, prometheus.NewRegistry())
			require.NoError(t, err)
			if c.configured == config.HoldOff {
				require.Nil(t, h, "every hold off")
			} else {
				assert.Equal(t, c.want, h.check(context.Background(), swapplan.Snapshot{Now: now}, nil))
			}
			watched, off := holdSources(cfg, h)
			if c.watched != "" {
				assert.Contains(t, watched, c.watched)
			}
			if c.off != "" {
				assert.Contains(t, off, c.off)
			}
		})
	}
}

func TestTheUpgradePlansAreOffWithoutTheirCRDAndWatchedOnceItIsInstalled(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	cfg := config.DefaultController().Holds
	cfg.KuredDaemonSet = config.HoldOff
	client := k8sfake.NewClientset()
	h, err := newHolds(cfg, client, prometheus.NewRegistry())
	require.NoError(t, err)
	assert.Empty(t, h.check(context.Background(), swapplan.Snapshot{Now: now}, nil), "no CRD: no hold, and no error")
	_, off := holdSources(cfg, h)
	assert.Contains(t, off, "an upgrade Plan applying (the CRD plans.upgrade.cattle.io is not installed)")

	// Installed: watched. The fake API has no REST client to list them,
	// and a hold that cannot be read holds.
	client.Resources = append(client.Resources, &metav1.APIResourceList{GroupVersion: "upgrade.cattle.io/v1",
		APIResources: []metav1.APIResource{{Name: "plans", Namespaced: true, Kind: "Plan"}}})
	got := h.check(context.Background(), swapplan.Snapshot{Now: now}, nil)
	assert.Equal(t, []string{"the Plans in every namespace cannot be read: no REST client"}, got)
	watched, off := holdSources(cfg, h)
	assert.Contains(t, watched, "an upgrade Plan applying (in every namespace)")
	assert.NotContains(t, strings.Join(off, "; "), "Plan")
}

func TestTheHoldsAreReadFreshForTheOutgoingVotersStepDownAloneNotForARolledBackCandidatesOrOtherSteps(t *testing.T) {
	rec := &api.SwapRecord{ID: "x", Out: "v1", In: "s1"}
	for _, c := range []struct {
		name string
		plan swapplan.Plan
		want bool
	}{
		{"the outgoing voter's step-down", swapplan.Plan{Swap: rec, Action: swapplan.Action{Type: api.ActionStepDown, Node: "v1"}}, true},
		{"the candidate's step-down in a rollback", swapplan.Plan{Swap: rec, Action: swapplan.Action{Type: api.ActionStepDown, Node: "s1"}}, false},
		{"the removal", swapplan.Plan{Swap: rec, Action: swapplan.Action{Type: api.ActionRemoveMember, Node: "v1"}}, false},
		{"no swap", swapplan.Plan{Action: swapplan.Action{Type: api.ActionStepDown, Node: "v1"}}, false},
	} {
		assert.Equal(t, c.want, stopsOutgoing(c.plan), c.name)
	}
}

func TestKuredsDaemonSetThatTheControllerMayNotLookForIsOffAndSaysWhyButOneConfiguredAndUnreadableHolds(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	client := k8sfake.NewClientset()
	forbid := func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "daemonsets"}, "", errors.New("RBAC"))
	}
	client.PrependReactor("list", "daemonsets", forbid)
	client.PrependReactor("get", "daemonsets", forbid)
	cfg := config.DefaultController().Holds
	cfg.UpgradePlansNamespace = config.HoldOff
	h, err := newHolds(cfg, client, prometheus.NewRegistry())
	require.NoError(t, err)
	assert.Empty(t, h.check(context.Background(), swapplan.Snapshot{Now: now}, nil), "found by itself: off")
	_, off := holdSources(cfg, h)
	assert.Contains(t, off, "kured's reboot lock (the controller may not list DaemonSets to find kured's: set holds.kured_daemonset, or grant it list on daemonsets)")

	cfg.KuredDaemonSet = "kube-system/kured"
	h, err = newHolds(cfg, client, prometheus.NewRegistry())
	require.NoError(t, err)
	got := h.check(context.Background(), swapplan.Snapshot{Now: now}, nil)
	require.Len(t, got, 1, "configured by name: unreadable, it holds")
	assert.Contains(t, got[0], "kured's lock on the DaemonSet kube-system/kured cannot be read")
}

func TestKuredsLockAnnotationAndConcurrencyAreReadFromTheDaemonSetFoundInItsFlagsOrItsEnvironment(t *testing.T) {
	kured := func(c corev1.Container) *appsv1.DaemonSet {
		c.Name = "kured"
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kured"},
			Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{c}}}}}
	}
	for _, c := range []struct {
		name        string
		container   corev1.Container
		annotation  string
		concurrency int
	}{
		{"none given", corev1.Container{Command: []string{"/usr/bin/kured"}, Args: []string{"--period=1h"}}, "", 0},
		{"flags with =", corev1.Container{Command: []string{"/usr/bin/kured"}, Args: []string{"--lock-annotation=example.org/reboot", "--concurrency=2"}}, "example.org/reboot", 2},
		{"flags and values apart, in the command", corev1.Container{Command: []string{"/usr/bin/kured", "--lock-annotation", "example.org/reboot", "--concurrency", "3"}}, "example.org/reboot", 3},
		{"the environment", corev1.Container{Env: []corev1.EnvVar{{Name: "KURED_LOCK_ANNOTATION", Value: "example.org/env"}, {Name: "KURED_CONCURRENCY", Value: "2"}}}, "example.org/env", 2},
		{"a concurrency that is no number", corev1.Container{Args: []string{"--concurrency=many"}}, "", 0},
	} {
		annotation, concurrency := kuredFlags(kured(c.container))
		assert.Equal(t, c.annotation, annotation, c.name)
		assert.Equal(t, c.concurrency, concurrency, c.name)
	}

	// Found by itself, the lock is read under kured's own annotation.
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ds := kured(corev1.Container{Args: []string{"--lock-annotation=example.org/reboot"}})
	ds.Annotations = map[string]string{"example.org/reboot": `{"nodeID":"v3","created":"` + now.Format(time.RFC3339) + `","TTL":0}`}
	cfg := config.DefaultController().Holds
	cfg.UpgradePlansNamespace = config.HoldOff
	h, err := newHolds(cfg, k8sfake.NewClientset(ds), prometheus.NewRegistry())
	require.NoError(t, err)
	assert.Equal(t, []string{"kured's reboot lock is held by v3"}, h.check(context.Background(), swapplan.Snapshot{Now: now}, nil))
}
