package controller_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
)

var (
	crdGVR  = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	planGVR = schema.GroupVersionResource{Group: "upgrade.cattle.io", Version: "v1", Resource: "plans"}
)

// namespacedCRD is a CustomResourceDefinition of a namespaced kind served
// at group/version alone, status a subresource (written only through
// /status); its schema keeps the status fields given, with their types,
// and any spec.
func namespacedCRD(group, version, kind, plural string, status map[string]any) map[string]any {
	return map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": plural + "." + group},
		"spec": map[string]any{
			"group": group,
			"names": map[string]any{"kind": kind, "plural": plural, "singular": strings.ToLower(kind), "listKind": kind + "List"},
			"scope": "Namespaced",
			"versions": []any{map[string]any{
				"name": version, "served": true, "storage": true,
				"subresources": map[string]any{"status": map[string]any{}},
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object",
					"properties": map[string]any{
						"spec":   map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true},
						"status": map[string]any{"type": "object", "properties": status},
					},
				}},
			}},
		},
	}
}

// planCRD is the system-upgrade-controller's Plan as its CRD serves it:
// namespaced, upgrade.cattle.io/v1, status a subresource. The schema
// keeps what the controller writes.
var planCRD = namespacedCRD("upgrade.cattle.io", "v1", "Plan", "plans", map[string]any{
	"applying":      map[string]any{"type": "array", "items": map[string]any{"type": "string"}},
	"latestVersion": map[string]any{"type": "string"},
	"latestHash":    map[string]any{"type": "string"},
})

// webhook records what is posted to it.
type webhook struct {
	mu     sync.Mutex
	bodies []string
	srv    *httptest.Server
}

func newWebhook(t *testing.T) *webhook {
	w := &webhook{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.mu.Lock()
		w.bodies = append(w.bodies, string(body))
		w.mu.Unlock()
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *webhook) received() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.bodies, "\n")
}

func TestKuredsLockAndAnUpgradeApplyingToAServerHoldTheStartAndTheSwapIsToldToAWebhook(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 3, 2, 0)
	dyn, err := dynamic.NewForConfig(e.rest)
	require.NoError(t, err)

	// kured's DaemonSet, its lock taken by v3 (kured's pkg/daemonsetlock
	// writes it so); the Plan's CRD and a Plan applying to v3 and to a
	// Node outside the fleet.
	locked := `{"nodeID":"v3","metadata":{"unschedulable":false},"created":"` + time.Now().UTC().Format(time.RFC3339) + `","TTL":0}`
	createKured(t, e, map[string]string{config.DefaultKuredLockAnnotation: locked})
	_, err = e.api.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "system-upgrade"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = dyn.Resource(crdGVR).Create(ctx, &unstructured.Unstructured{Object: planCRD}, metav1.CreateOptions{})
	require.NoError(t, err)
	plans := dyn.Resource(planGVR).Namespace("system-upgrade")
	var plan *unstructured.Unstructured
	require.Eventually(t, func() bool {
		plan, err = plans.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "upgrade.cattle.io/v1", "kind": "Plan",
			"metadata": map[string]any{"name": "k3s-server"},
			"spec":     map[string]any{"concurrency": 1, "version": "v1.37.2+k3s1"},
			"status":   map[string]any{"applying": []any{"v3"}},
		}}, metav1.CreateOptions{})
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "the CRD is served: %v", err)
	assert.Nil(t, plan.Object["status"], "the status is a subresource: a create does not write it")
	setApplying := func(nodes ...any) {
		t.Helper()
		require.Eventually(t, func() bool {
			p, err := plans.Get(ctx, "k3s-server", metav1.GetOptions{})
			if err != nil {
				return false
			}
			_ = unstructured.SetNestedSlice(p.Object, nodes, "status", "applying")
			_, err = plans.UpdateStatus(ctx, p, metav1.UpdateOptions{})
			return err == nil
		}, 10*time.Second, 50*time.Millisecond)
	}
	setApplying("v3", "runner-7")

	hook := newWebhook(t)
	e.cfg.DryRun = false
	e.cfg.Verdicts.Window = 4
	e.cfg.Holds = kuredHoldsConfig(1)
	e.cfg.Holds.UpgradePlansNamespace = "system-upgrade"
	e.cfg.Notify.URLs = []string{"generic://" + strings.TrimPrefix(hook.srv.URL, "http://") + "/hooks/fleet?disabletls=yes"}
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].FsyncMs = 35 })
	e.start()

	var st api.Status
	require.Eventually(t, func() bool {
		st, _ = e.status()
		return st.Decision != nil && strings.Contains(st.Reason, "held:")
	}, 30*time.Second, 50*time.Millisecond, "the decision is made and held: %+v", st)
	assert.Contains(t, st.Reason, "the automatic decision to swap v2 for s1 waits: held: kured's reboot lock is held by v3; the Plan system-upgrade/k3s-server is applying to v3")
	assert.NotContains(t, st.Reason, "runner-7", "a Node outside the fleet is none of a swap's business")

	// kured releases its lock (deleting the annotation, as its Release
	// does): the Plan still holds.
	got, err := e.api.Client.AppsV1().DaemonSets("kube-system").Get(ctx, "kured", metav1.GetOptions{})
	require.NoError(t, err)
	delete(got.Annotations, config.DefaultKuredLockAnnotation)
	_, err = e.api.Client.AppsV1().DaemonSets("kube-system").Update(ctx, got, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, _ = e.status()
		return strings.Contains(st.Reason, "held:") && !strings.Contains(st.Reason, "kured")
	}, 30*time.Second, 50*time.Millisecond, "the Plan alone holds: %s", st.Reason)
	assert.Contains(t, st.Reason, "held: the Plan system-upgrade/k3s-server is applying to v3")
	_, err = e.api.Client.CoordinationV1().Leases(api.Namespace).Get(ctx, api.LeaseName, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no swap started while held")
	assert.Empty(t, hook.received(), "nothing to tell yet")

	// The upgrade done, the swap starts, ends, and both are told.
	setApplying()
	res := e.waitEnd(3 * time.Minute)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, "v2", res.Out)
	require.Eventually(t, func() bool { return strings.Contains(hook.received(), " ended ") }, 30*time.Second, 50*time.Millisecond, "told: %s", hook.received())
	told := hook.received()
	assert.Contains(t, told, "fleet-role: swap "+res.ID+" (v2 out, s1 in, automatic) started: swapping v2 for s1")
	assert.Contains(t, told, "fleet-role: swap "+res.ID+" (v2 out, s1 in, automatic) ended completed")
	assert.Less(t, strings.Index(told, " started: "), strings.Index(told, " ended "), "in order")
}

// prometheus answers /api/v1/query with the ALERTS series set, or fails
// as a Prometheus whose TSDB is closed.
type prometheus struct {
	mu      sync.Mutex
	alerts  []string
	failing bool
	srv     *httptest.Server
}

func newPrometheus(t *testing.T) *prometheus {
	p := &prometheus{}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if p.failing {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"status":"error","errorType":"unavailable","error":"the TSDB is closed"}`)
			return
		}
		_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[`+strings.Join(p.alerts, ",")+`]}}`)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *prometheus) set(failing bool, alerts ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.failing, p.alerts = failing, alerts
}

// firingAlert is an ALERTS series, its labels given as JSON pairs.
func firingAlert(name, labels string) string {
	return `{"metric":{"__name__":"ALERTS","alertname":"` + name + `","alertstate":"firing"` + labels + `},"value":[1764583200,"1"]}`
}

func TestADryRunSaysItWouldWaitForAnAlertButNotForWatchdogOrTheOutgoingVotersOwnAndWarnsOfAPrometheusItCannotRead(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, 3, 1, 0)
	prom := newPrometheus(t)
	prom.set(false,
		firingAlert("Watchdog", ""),
		firingAlert("etcdHighFsyncDurations", `,"job":"etcd","instance":"v2:2381"`),
		firingAlert("etcdGRPCRequestsSlow", `,"job":"etcd","instance":"v3:2381"`))
	e.cfg.DryRun = true
	e.cfg.Verdicts.Window = 4
	e.cfg.Holds = config.DefaultController().Holds
	e.cfg.Holds.PrometheusURL = prom.srv.URL
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].FsyncMs = 35 })
	e.start()

	// Note: the decision needs a window of samples at the probe period
	// and a pass; 30 s are an outer limit for a busy machine, here and
	// below (a pass a second).
	var st api.Status
	require.Eventually(t, func() bool {
		st, _ = e.status()
		return strings.Contains(st.Reason, "would wait")
	}, 30*time.Second, 50*time.Millisecond, "the dry run says what would hold it: %s", st.Reason)
	assert.Contains(t, st.Reason, "dry run: would swap v2 for s1 (")
	assert.True(t, strings.HasSuffix(st.Reason, "; would wait: held: alerts are active at "+prom.srv.URL+": etcdGRPCRequestsSlow"), st.Reason)
	require.NotNil(t, st.Controller)
	assert.Equal(t, []string{"alerts are active at " + prom.srv.URL + ": etcdGRPCRequestsSlow"}, st.Controller.Held)
	out, _, code := e.cli("status")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "would wait: held: alerts are active at")
	assert.Contains(t, out, "holding now: alerts are active at "+prom.srv.URL+": etcdGRPCRequestsSlow")

	// Prometheus stops answering: the hold holds, says so, is counted and
	// told in a warning Event on the status ConfigMap.
	prom.set(true)
	require.Eventually(t, func() bool {
		st, _ = e.status()
		return strings.Contains(st.Reason, "cannot be read")
	}, 60*time.Second, 100*time.Millisecond, "an unreadable hold holds: %s", st.Reason)
	assert.Contains(t, st.Reason, "would wait: held: the alerts at "+prom.srv.URL+" cannot be read: ")
	var warning *corev1.Event
	require.Eventually(t, func() bool {
		list, err := e.api.Client.CoreV1().Events(api.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false
		}
		for i := range list.Items {
			if list.Items[i].Reason == api.EventHoldUnreadable {
				warning = &list.Items[i]
			}
		}
		return warning != nil
	}, 10*time.Second, 100*time.Millisecond, "a HoldUnreadable Event")
	assert.Equal(t, corev1.EventTypeWarning, warning.Type)
	assert.Equal(t, "ConfigMap", warning.InvolvedObject.Kind)
	assert.Equal(t, api.StatusConfigMap, warning.InvolvedObject.Name)
	assert.Contains(t, warning.Message, "the prometheus hold cannot be read, so it holds: the alerts at "+prom.srv.URL+" cannot be read: ")
	rec := httptest.NewRecorder()
	e.ctrl.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	assert.Contains(t, rec.Body.String(), `fleet_role_hold_unreadable{by="prometheus"} 1`)
	assert.Contains(t, rec.Body.String(), `fleet_role_hold_read_failures_total{by="prometheus"}`)
}
