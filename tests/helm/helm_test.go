package helm_test

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart/loader"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/tests/helm"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

var update = flag.Bool("update", false, "rewrite packaging/kubernetes/controller.yaml")

// packagedValues are the values of packaging/kubernetes/controller.yaml:
// the chart's own, the namespace made, and an image tag that names no
// image, set by kubectl set image (make manifests renders one with it).
var packagedValues = map[string]any{"namespace": map[string]any{"create": true},
	"image": map[string]any{"tag": "unset"}}

const packagedHeader = `# fleet-role's controller, its configuration and RBAC: the chart
# packaging/helm/fleet-role rendered in the namespace fleet-role with its
# default values, namespace.create=true and image.tag=unset, which names no
# image: after kubectl apply -f, kubectl set image deploy/fleet-role-controller
# controller=fleet-role:$(make -s image-tag); or make manifests renders
# bin/fleet-role.yaml with it. Not to be edited: change the chart.
# Generated: go test ./tests/helm -run PackagedManifests -update
`

func render(t *testing.T, namespace string, values map[string]any) ([]byte, []runtime.Object) {
	t.Helper()
	b, err := helm.Render(namespace, values)
	require.NoError(t, err)
	objs, err := kubeapi.Decode(b)
	require.NoError(t, err, "every object decodes strictly:\n%s", b)
	return b, objs
}

// only is the one object of type T named name in objs.
func only[T runtime.Object](t *testing.T, objs []runtime.Object, namespace, name string) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			m := o.(metav1.Object)
			if m.GetName() == name && m.GetNamespace() == namespace {
				found = append(found, v)
			}
		}
	}
	require.Len(t, found, 1, "%T %s/%s", *new(T), namespace, name)
	return found[0]
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

func TestThePackagedManifestsAreTheChartsRender(t *testing.T) {
	b, _ := render(t, api.Namespace, packagedValues)
	want := packagedHeader + string(b)
	path := filepath.Join(testhost.Root(), "packaging", "kubernetes", "controller.yaml")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, want, string(got), "regenerate: go test ./tests/helm -run PackagedManifests -update")
}

func TestTheDefaultRenderIsTheControllerAsPackaged(t *testing.T) {
	b, objs := render(t, api.Namespace, packagedValues)
	only[*corev1.Namespace](t, objs, "", api.Namespace)
	only[*corev1.ServiceAccount](t, objs, api.Namespace, "fleet-role-controller")

	cm := only[*corev1.ConfigMap](t, objs, api.Namespace, "fleet-role-controller-config")
	require.Equal(t, []string{"controller.toml"}, keys(cm.Data))
	c, err := config.ParseController([]byte(cm.Data["controller.toml"]))
	require.NoError(t, err, "the rendered configuration is valid")
	assert.True(t, c.DryRun, "a dry run until told otherwise")
	assert.Equal(t, api.Namespace, c.Namespace)
	assert.Equal(t, ":9090", c.ListenAddress)

	dep := only[*appsv1.Deployment](t, objs, api.Namespace, "fleet-role-controller")
	require.NotNil(t, dep.Spec.Replicas)
	assert.EqualValues(t, 2, *dep.Spec.Replicas, "two replicas, one leading")
	pod := dep.Spec.Template.Spec
	assert.Equal(t, "fleet-role-controller", pod.ServiceAccountName)
	require.Len(t, pod.Containers, 1)
	assert.Equal(t, "fleet-role:unset", pod.Containers[0].Image, "the tag given, no registry")
	assert.Equal(t, corev1.PullIfNotPresent, pod.Containers[0].ImagePullPolicy)
	assert.Equal(t, sha256Hex(cm.Data["controller.toml"]), dep.Spec.Template.Annotations[api.AnnotationConfigChecksum],
		"the pod template carries the configuration's checksum")
	assert.NotEmpty(t, pod.Containers[0].Resources.Requests)
	assert.NotEmpty(t, pod.Containers[0].Resources.Limits)

	pdb := only[*policyv1.PodDisruptionBudget](t, objs, api.Namespace, "fleet-role-controller")
	assert.Equal(t, intstr.FromInt32(1), *pdb.Spec.MinAvailable)
	assert.Equal(t, dep.Spec.Selector, pdb.Spec.Selector)

	svc := only[*corev1.Service](t, objs, api.Namespace, "fleet-role-controller-metrics")
	assert.Equal(t, dep.Spec.Selector.MatchLabels, svc.Spec.Selector)
	require.Len(t, svc.Spec.Ports, 1)
	assert.EqualValues(t, 9090, svc.Spec.Ports[0].Port, "the port of listen_address")
	assert.Equal(t, intstr.FromString("http"), svc.Spec.Ports[0].TargetPort)
	assert.Equal(t, int32(9090), pod.Containers[0].Ports[0].ContainerPort)

	assert.NotContains(t, string(b), "kind: ServiceMonitor", "no ServiceMonitor unless asked")
}

func TestTheImagesTagIsTheOneGivenElseTheAppVersionMakeChartSetsAndNeverNoneOrLatest(t *testing.T) {
	image := func(b []byte) string {
		t.Helper()
		objs, err := kubeapi.Decode(b)
		require.NoError(t, err)
		return only[*appsv1.Deployment](t, objs, api.Namespace, "fleet-role-controller").Spec.Template.Spec.Containers[0].Image
	}
	b, err := helm.RenderChart("1.2.3", api.Namespace, nil)
	require.NoError(t, err)
	assert.Equal(t, "fleet-role:1.2.3", image(b), "the packaged chart's appVersion")
	b, err = helm.RenderChart("1.2.3", api.Namespace, map[string]any{"image": map[string]any{"tag": "1.2.4"}})
	require.NoError(t, err)
	assert.Equal(t, "fleet-role:1.2.4", image(b), "image.tag over the appVersion")

	ch, err := loader.Load(helm.ChartDir())
	require.NoError(t, err)
	assert.Empty(t, ch.Metadata.AppVersion, "the chart of the repository names no version")
	_, err = helm.RenderChart("", api.Namespace, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "image.tag is required")
	_, err = helm.RenderChart("", api.Namespace, map[string]any{"image": map[string]any{"tag": "latest"}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "image.tag latest names no version")
	_, err = helm.RenderChart("latest", api.Namespace, nil)
	require.Error(t, err, "nor through the appVersion")
}

func TestAServiceMonitorScrapesTheMetricsServiceWhenAsked(t *testing.T) {
	b, err := helm.Render(api.Namespace, map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{
		"enabled": true, "labels": map[string]any{"release": "prometheus"}}}})
	require.NoError(t, err)
	var monitors []map[string]any
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var o map[string]any
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &o))
		if o["kind"] == "ServiceMonitor" {
			monitors = append(monitors, o)
		}
	}
	require.Len(t, monitors, 1)
	var m struct {
		APIVersion string `json:"apiVersion"`
		Kind       string
		Metadata   metav1.ObjectMeta
		Spec       struct {
			Selector  metav1.LabelSelector
			Endpoints []struct{ Port, Path, Interval string }
		}
	}
	j, err := yaml.Marshal(monitors[0])
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(j, &m))
	assert.Equal(t, "monitoring.coreos.com/v1", m.APIVersion)
	assert.Equal(t, api.Namespace, m.Metadata.Namespace)
	assert.Equal(t, "prometheus", m.Metadata.Labels["release"], "its labels, for the Prometheus that selects it")
	_, objs := render(t, api.Namespace, nil)
	svc := only[*corev1.Service](t, objs, api.Namespace, "fleet-role-controller-metrics")
	for k, v := range m.Spec.Selector.MatchLabels {
		assert.Equal(t, v, svc.Labels[k], "it selects the metrics Service: %s", k)
	}
	require.Len(t, m.Spec.Endpoints, 1)
	assert.Equal(t, "http", m.Spec.Endpoints[0].Port)
	assert.Equal(t, "/metrics", m.Spec.Endpoints[0].Path)
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func TestARenderInAnotherNamespacePutsEverythingAndTheConfigurationThere(t *testing.T) {
	_, objs := render(t, "ops", map[string]any{"config": map[string]any{"dryRun": false, "extra": "[verdicts]\nwindow = 10\n"}})
	for _, o := range objs {
		m := o.(metav1.Object)
		if m.GetNamespace() != "" && m.GetNamespace() != api.NodeLeaseNamespace && m.GetNamespace() != metav1.NamespaceDefault {
			assert.Equal(t, "ops", m.GetNamespace(), "%T %s", o, m.GetName())
		}
		if b, ok := o.(*rbacv1.RoleBinding); ok {
			for _, s := range b.Subjects {
				if s.Kind == rbacv1.ServiceAccountKind {
					assert.Equal(t, "ops", s.Namespace)
				}
			}
		}
	}
	cm := only[*corev1.ConfigMap](t, objs, "ops", "fleet-role-controller-config")
	c, err := config.ParseController([]byte(cm.Data["controller.toml"]))
	require.NoError(t, err)
	assert.Equal(t, "ops", c.Namespace, "the controller's namespace is the release's")
	assert.False(t, c.DryRun)
	assert.Equal(t, 10, c.Verdicts.Window, "the extra TOML is the configuration's too")
}

func TestTheChartsTarArchiveIsAChartHelmLoads(t *testing.T) {
	// docs/deploying.md's archive for a k3s HelmChart's chartContent.
	tgz := filepath.Join(t.TempDir(), "fleet-role.tgz")
	out, err := exec.Command("tar", "czf", tgz, "-C", filepath.Dir(helm.ChartDir()), "fleet-role").CombinedOutput()
	require.NoError(t, err, "%s", out)
	ch, err := loader.Load(tgz)
	require.NoError(t, err)
	assert.Equal(t, "fleet-role", ch.Name())
	dir, err := loader.Load(helm.ChartDir())
	require.NoError(t, err)
	assert.Equal(t, len(dir.Templates), len(ch.Templates), "every template is in it")
}

func TestThePrometheusRuleAndTheDashboardAreTheChartsFilesWhenAsked(t *testing.T) {
	b, err := helm.Render(api.Namespace, map[string]any{"metrics": map[string]any{
		"prometheusRule": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"}},
		"dashboard":      map[string]any{"enabled": true}}})
	require.NoError(t, err)
	chart := filepath.Join(testhost.Root(), "packaging", "helm", "fleet-role", "files")
	var rules, dashboards int
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var o map[string]any
		require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &o))
		switch o["kind"] {
		case "PrometheusRule":
			rules++
			meta := o["metadata"].(map[string]any)
			assert.Equal(t, api.Namespace, meta["namespace"])
			assert.Equal(t, "prometheus", meta["labels"].(map[string]any)["release"])
			file, err := os.ReadFile(filepath.Join(chart, "prometheus-rules.yaml"))
			require.NoError(t, err)
			var want map[string]any
			require.NoError(t, yaml.UnmarshalStrict(file, &want))
			assert.Equal(t, want, o["spec"], "the rules file, whole")
		case "ConfigMap":
			if !strings.HasSuffix(o["metadata"].(map[string]any)["name"].(string), "-dashboard") {
				continue
			}
			dashboards++
			var cm corev1.ConfigMap
			require.NoError(t, yaml.UnmarshalStrict([]byte(doc), &cm))
			assert.Equal(t, "1", cm.Labels["grafana_dashboard"], "the label Grafana's sidecar looks for")
			file, err := os.ReadFile(filepath.Join(chart, "grafana-dashboard.json"))
			require.NoError(t, err)
			assert.JSONEq(t, string(file), cm.Data["fleet-role.json"])
		}
	}
	assert.Equal(t, 1, rules)
	assert.Equal(t, 1, dashboards)
	_, objs := render(t, api.Namespace, nil)
	for _, o := range objs {
		if cm, ok := o.(*corev1.ConfigMap); ok {
			assert.NotContains(t, cm.Name, "dashboard", "none unless asked")
		}
	}
}

// rules is the spec of a PrometheusRule.
type rules struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `json:"alert"`
			Expr        string            `json:"expr"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// exprs are the rules' expressions by alert, those of one name joined.
func (r rules) exprs() map[string]string {
	exprs := map[string]string{}
	for _, g := range r.Groups {
		for _, r := range g.Rules {
			exprs[r.Alert] += r.Expr
		}
	}
	return exprs
}

// prometheusRules renders the chart with values and returns its
// PrometheusRule's spec.
func prometheusRules(t *testing.T, values map[string]any) rules {
	t.Helper()
	b, err := helm.Render(api.Namespace, values)
	require.NoError(t, err)
	var spec rules
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var o struct {
			Kind string         `json:"kind"`
			Spec map[string]any `json:"spec"`
		}
		require.NoError(t, yaml.Unmarshal([]byte(doc), &o))
		if o.Kind == "PrometheusRule" {
			raw, err := yaml.Marshal(o.Spec)
			require.NoError(t, err)
			require.NoError(t, yaml.Unmarshal(raw, &spec))
		}
	}
	require.NotEmpty(t, spec.Groups)
	return spec
}

func TestTheSwapStuckThresholdsAreTheBoundsPlusFiveMinutesTheControllersDefaultsWhereUnset(t *testing.T) {
	// What the controller's defaults make them: the runners' bound and
	// the longest of the others, each plus 5 minutes.
	def := config.DefaultController().Bounds
	v := reflect.ValueOf(def)
	var longest time.Duration
	for i := range v.NumField() {
		if d := v.Field(i).Interface().(time.Duration); v.Type().Field(i).Name != "Runners" && d > longest {
			longest = d
		}
	}
	for _, c := range []struct {
		name            string
		bounds          map[string]any
		runners, others time.Duration
	}{
		{"the defaults", nil, def.Runners + 5*time.Minute, longest + 5*time.Minute},
		{"the runners' and a longer drain", map[string]any{"runners": "2h", "drain": "40m", "stepDown": "90s"}, 2*time.Hour + 5*time.Minute, 45 * time.Minute},
		{"a bound in hours and minutes", map[string]any{"gates": "1h30m", "runners": "1.5h"}, 95 * time.Minute, 95 * time.Minute},
	} {
		t.Run(c.name, func(t *testing.T) {
			values := map[string]any{"metrics": map[string]any{"prometheusRule": map[string]any{"enabled": true}}}
			if c.bounds != nil {
				values["config"] = map[string]any{"bounds": c.bounds}
			}
			expr := prometheusRules(t, values).exprs()["FleetRoleSwapStuck"]
			assert.Contains(t, expr, fmt.Sprintf("fleet_role_swap_step_seconds > %d\n", int(c.runners.Seconds())))
			assert.Contains(t, expr, fmt.Sprintf("fleet_role_swap_step_seconds > %d\n", int(c.others.Seconds())))
		})
	}
}

func TestThePrometheusRulesThresholdsAndRunbookLinksAreTheValuesGiven(t *testing.T) {
	spec := prometheusRules(t, map[string]any{"metrics": map[string]any{
		"prometheusRule": map[string]any{"enabled": true,
			"thresholds": map[string]any{
				"swapStuckRunnersSeconds": 7500, "swapStuckSeconds": 2100, "pausedLongSeconds": 3600, "heldLongSeconds": 600,
			},
			"runbookBaseURL": "https://wiki.example.org/fleet/"}}})
	for _, g := range spec.Groups {
		for _, r := range g.Rules {
			assert.Equal(t, "https://wiki.example.org/fleet/alerts.md#"+strings.ToLower(r.Alert), r.Annotations["runbook_url"])
		}
	}
	exprs := spec.exprs()
	assert.Contains(t, exprs["FleetRoleSwapStuck"], "fleet_role_swap_step_seconds > 7500")
	assert.Contains(t, exprs["FleetRoleSwapStuck"], "fleet_role_swap_step_seconds > 2100")
	assert.Contains(t, exprs["FleetRolePausedLong"], "fleet_role_paused_since_timestamp_seconds > 3600")
	assert.Contains(t, exprs["FleetRoleHeldLong"], "fleet_role_start_held_since_timestamp_seconds > 600")
	for alert, expr := range exprs {
		for _, old := range []string{"> 3900", "> 1200", "> 86400", "> 21600"} {
			assert.NotContains(t, expr, old, "%s keeps a default threshold", alert)
		}
	}
}

func TestTheHoldsAndNotificationsAreConfiguredAndGrantedOnlyWhenAsked(t *testing.T) {
	_, objs := render(t, api.Namespace, map[string]any{
		"holds": map[string]any{
			"kured":                 map[string]any{"namespace": "kube-system"},
			"upgradePlansNamespace": "system-upgrade",
			"prometheus":            map[string]any{"url": "http://prometheus.monitoring:9090", "alertFilterRegexp": "^Etcd", "alertFilterMatchOnly": true},
		},
		"notify": map[string]any{"urls": []any{"generic://hooks.example.org/fleet"}, "secretName": "fleet-role-notify"},
	})
	cm := only[*corev1.ConfigMap](t, objs, api.Namespace, "fleet-role-controller-config")
	c, err := config.ParseController([]byte(cm.Data["controller.toml"]))
	require.NoError(t, err, cm.Data["controller.toml"])
	assert.Equal(t, config.Holds{
		KuredDaemonSet: "kube-system/kured", KuredLockAnnotation: config.DefaultKuredLockAnnotation, KuredLockTTL: 30 * time.Minute, KuredConcurrency: 1,
		UpgradePlansNamespace: "system-upgrade", PrometheusURL: "http://prometheus.monitoring:9090",
		AlertFilterRegexp: "^Etcd", AlertFilterMatchOnly: true,
		AlertIgnoreRegexp: config.DefaultAlertIgnoreRegexp, AlertIgnoreOutgoing: true, // the defaults: the chart sets neither
	}, c.Holds)
	assert.Equal(t, []string{"generic://hooks.example.org/fleet"}, c.Notify.URLs)

	kured := only[*rbacv1.Role](t, objs, "kube-system", "fleet-role-controller-kured")
	assert.Equal(t, []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, ResourceNames: []string{"kured"}, Verbs: []string{"get", "update"}}}, kured.Rules)
	only[*rbacv1.RoleBinding](t, objs, "kube-system", "fleet-role-controller-kured")
	plans := only[*rbacv1.Role](t, objs, "system-upgrade", "fleet-role-controller-upgrades")
	assert.Equal(t, []rbacv1.PolicyRule{{APIGroups: []string{"upgrade.cattle.io"}, Resources: []string{"plans"}, Verbs: []string{"list"}}}, plans.Rules)
	only[*rbacv1.RoleBinding](t, objs, "system-upgrade", "fleet-role-controller-upgrades")

	d := only[*appsv1.Deployment](t, objs, api.Namespace, "fleet-role-controller")
	pod := d.Spec.Template.Spec
	var secret *corev1.SecretVolumeSource
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secret = v.Secret
		}
	}
	require.NotNil(t, secret, "the Secret of the URLs is mounted")
	assert.Equal(t, "fleet-role-notify", secret.SecretName)
	mounted := false
	for _, m := range pod.Containers[0].VolumeMounts {
		if m.MountPath+"/urls" == c.Notify.URLsFile {
			mounted = true
		}
	}
	assert.True(t, mounted, "urls_file %s is where the Secret is mounted", c.Notify.URLsFile)

	// Asked for none, the chart grants nothing outside its namespaces,
	// the heartbeats' and the apiservers' slice (default).
	_, objs = render(t, api.Namespace, nil)
	for _, o := range objs {
		if r, ok := o.(*rbacv1.Role); ok {
			assert.Contains(t, []string{api.Namespace, api.NodeLeaseNamespace, metav1.NamespaceDefault}, r.Namespace, r.Name)
		}
	}
}
