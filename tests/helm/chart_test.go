package helm_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/tests/helm"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// everyObject are values that render every object the chart has.
var everyObject = map[string]any{
	"namespace": map[string]any{"create": true},
	"holds":     map[string]any{"kured": map[string]any{"namespace": "kube-system"}, "upgradePlansNamespace": "system-upgrade"},
	"access": map[string]any{
		"operators": []any{map[string]any{"kind": "Group", "name": "sre", "apiGroup": "rbac.authorization.k8s.io"}},
		"viewers":   []any{map[string]any{"kind": "Group", "name": "dev", "apiGroup": "rbac.authorization.k8s.io"}},
	},
	"metrics": map[string]any{
		"serviceMonitor": map[string]any{"enabled": true},
		"dashboard":      map[string]any{"enabled": true},
		"agents":         map[string]any{"scrapeConfig": map[string]any{"enabled": true}},
	},
}

// renderRelease renders the chart as the release name in namespace, with
// image.tag given, and decodes every object strictly.
func renderRelease(t *testing.T, name, namespace string, values map[string]any) (helm.Release, []runtime.Object) {
	t.Helper()
	r, err := helm.RenderRelease(name, "", namespace, helm.WithTag(values))
	require.NoError(t, err)
	objs, err := kubeapi.Decode(r.Manifests)
	require.NoError(t, err, "every object decodes strictly:\n%s", r.Manifests)
	return r, objs
}

// names are "Kind namespace/name" of objs.
func names(objs []runtime.Object) []string {
	var out []string
	for _, o := range objs {
		m := o.(metav1.Object)
		out = append(out, o.GetObjectKind().GroupVersionKind().Kind+" "+m.GetNamespace()+"/"+m.GetName())
	}
	slices.Sort(out)
	return out
}

func TestAReleaseNamedFleetRoleKeepsTodaysObjectNamesAndAnotherReleaseNamesEveryObjectItsOwn(t *testing.T) {
	_, objs := renderRelease(t, "fleet-role", api.Namespace, everyObject)
	assert.Equal(t, []string{
		"ClusterRole /fleet-role-controller",
		"ClusterRole /fleet-role-operator",
		"ClusterRole /fleet-role-viewer",
		"ClusterRoleBinding /fleet-role-controller",
		"ClusterRoleBinding /fleet-role-operator",
		"ConfigMap fleet-role/fleet-role-controller-config",
		"ConfigMap fleet-role/fleet-role-fleet-role-dashboard",
		"Deployment fleet-role/fleet-role-controller",
		"Namespace /fleet-role",
		"PodDisruptionBudget fleet-role/fleet-role-controller",
		"Role default/fleet-role-controller-apiservers",
		"Role fleet-role/fleet-role-controller",
		"Role fleet-role/fleet-role-operator",
		"Role kube-node-lease/fleet-role-controller-heartbeats",
		"Role kube-node-lease/fleet-role-operator",
		"Role kube-system/fleet-role-controller-kured",
		"Role system-upgrade/fleet-role-controller-upgrades",
		"RoleBinding default/fleet-role-controller-apiservers",
		"RoleBinding fleet-role/fleet-role-controller",
		"RoleBinding fleet-role/fleet-role-operator",
		"RoleBinding fleet-role/fleet-role-viewer",
		"RoleBinding kube-node-lease/fleet-role-controller-heartbeats",
		"RoleBinding kube-node-lease/fleet-role-operator",
		"RoleBinding kube-system/fleet-role-controller-kured",
		"RoleBinding system-upgrade/fleet-role-controller-upgrades",
		"ScrapeConfig fleet-role/fleet-role-agents",
		"Service fleet-role/fleet-role-controller-metrics",
		"ServiceAccount fleet-role/fleet-role-controller",
		"ServiceMonitor fleet-role/fleet-role-controller",
	}, names(objs), "the names the Ansible role, the uninstall, the e2e suite and the docs use")

	_, blue := renderRelease(t, "blue", "blue", everyObject)
	theirs := names(objs)
	for _, o := range blue {
		m := o.(metav1.Object)
		if _, ok := o.(*corev1.Namespace); ok {
			continue
		}
		assert.True(t, strings.HasPrefix(m.GetName(), "blue-fleet-role-"), "%T %s starts with the release's name", o, m.GetName())
		kind := o.GetObjectKind().GroupVersionKind().Kind + " "
		assert.NotContains(t, theirs, kind+strings.Replace(m.GetNamespace(), "blue", api.Namespace, 1)+"/"+m.GetName(), "no clash")
		switch b := o.(type) {
		case *rbacv1.ClusterRoleBinding:
			assert.True(t, strings.HasPrefix(b.RoleRef.Name, "blue-fleet-role-"), "%s binds its release's role", b.Name)
		case *rbacv1.RoleBinding:
			assert.True(t, strings.HasPrefix(b.RoleRef.Name, "blue-fleet-role-"), "%s binds its release's role", b.Name)
			for _, s := range b.Subjects {
				if s.Kind == rbacv1.ServiceAccountKind {
					assert.Equal(t, rbacv1.Subject{Kind: "ServiceAccount", Name: "blue-fleet-role-controller", Namespace: "blue"}, s)
				}
			}
		}
	}
	dep := only[*appsv1.Deployment](t, blue, "blue", "blue-fleet-role-controller")
	assert.Equal(t, "blue-fleet-role-controller", dep.Spec.Template.Spec.ServiceAccountName)
	assert.Equal(t, "blue-fleet-role-controller-config", dep.Spec.Template.Spec.Volumes[0].ConfigMap.Name)

	_, objs = renderRelease(t, "fleet-role-eu", "eu", map[string]any{"fullnameOverride": "frc"})
	only[*appsv1.Deployment](t, objs, "eu", "frc-controller")
	_, objs = renderRelease(t, "fleet-role-eu", "eu", nil)
	only[*appsv1.Deployment](t, objs, "eu", "fleet-role-eu-controller")
}

func TestTheServiceAccountAndTheRBACAreLeftToTheUserWhenAsked(t *testing.T) {
	_, objs := render(t, api.Namespace, map[string]any{"serviceAccount": map[string]any{"create": false, "name": "ours"}})
	for _, o := range objs {
		_, isSA := o.(*corev1.ServiceAccount)
		assert.False(t, isSA, "no ServiceAccount made")
		if b, ok := o.(*rbacv1.RoleBinding); ok {
			assert.Equal(t, "ours", b.Subjects[0].Name, b.Name)
		}
	}
	assert.Equal(t, "ours", only[*appsv1.Deployment](t, objs, api.Namespace, "fleet-role-controller").Spec.Template.Spec.ServiceAccountName)
	_, err := helm.Render(api.Namespace, map[string]any{"serviceAccount": map[string]any{"create": false}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "serviceAccount.name is required")

	_, objs = render(t, api.Namespace, map[string]any{"serviceAccount": map[string]any{"annotations": map[string]any{"a": "b"}}})
	assert.Equal(t, "b", only[*corev1.ServiceAccount](t, objs, api.Namespace, "fleet-role-controller").Annotations["a"])

	_, objs = render(t, api.Namespace, map[string]any{"rbac": map[string]any{"create": false}, "access": everyObject["access"]})
	for _, o := range objs {
		assert.NotEqual(t, rbacv1.GroupName, o.GetObjectKind().GroupVersionKind().Group, "%T: no RBAC", o)
	}
}

func TestThePodsTakeThePullSecretsLabelsAnnotationsNodeSelectorTolerationsAndAffinityGiven(t *testing.T) {
	affinity := map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
		"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "zone", "operator": "In", "values": []any{"a"}}}}}}}}
	_, objs := render(t, api.Namespace, map[string]any{
		"imagePullSecrets": []any{map[string]any{"name": "regcred"}},
		"podLabels":        map[string]any{"team": "platform"},
		"podAnnotations":   map[string]any{"example.org/owner": "sre"},
		"nodeSelector":     map[string]any{"kubernetes.io/os": "linux"},
		"tolerations":      []any{map[string]any{"key": "dedicated", "operator": "Exists"}},
		"affinity":         affinity,
	})
	tpl := only[*appsv1.Deployment](t, objs, api.Namespace, "fleet-role-controller").Spec.Template
	assert.Equal(t, []corev1.LocalObjectReference{{Name: "regcred"}}, tpl.Spec.ImagePullSecrets)
	assert.Equal(t, "platform", tpl.Labels["team"])
	assert.Equal(t, "fleet-role-controller", tpl.Labels["app.kubernetes.io/name"], "the selector's label kept")
	assert.Equal(t, "sre", tpl.Annotations["example.org/owner"])
	assert.NotEmpty(t, tpl.Annotations[api.AnnotationConfigChecksum], "the checksum kept")
	assert.Equal(t, map[string]string{"kubernetes.io/os": "linux"}, tpl.Spec.NodeSelector)
	assert.Equal(t, []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}, tpl.Spec.Tolerations)
	require.NotNil(t, tpl.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution, "the affinity given")
	assert.Equal(t, "zone", tpl.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Key)
	assert.Len(t, tpl.Spec.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution, 1, "and the preference for Nodes not voters")
}

func TestTheReplicasSpreadAcrossNodesAndPreferNodesThatAreNotVoters(t *testing.T) {
	_, objs := render(t, api.Namespace, nil)
	dep := only[*appsv1.Deployment](t, objs, api.Namespace, "fleet-role-controller")
	pod := dep.Spec.Template.Spec
	require.Len(t, pod.TopologySpreadConstraints, 1)
	spread := pod.TopologySpreadConstraints[0]
	assert.Equal(t, corev1.LabelHostname, spread.TopologyKey, "one replica a Node")
	assert.EqualValues(t, 1, spread.MaxSkew)
	assert.Equal(t, corev1.ScheduleAnyway, spread.WhenUnsatisfiable, "a fleet of one Node still runs both")
	assert.Equal(t, dep.Spec.Selector, spread.LabelSelector, "it counts the Deployment's own Pods")
	assert.Equal(t, []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: api.LabelRole, Operator: corev1.NodeSelectorOpNotIn, Values: []string{api.RoleVoter}}}}}},
		pod.Affinity.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution, "Nodes that are not voters preferred")

	_, objs = render(t, api.Namespace, map[string]any{"preferNonVoters": false, "topologySpreadConstraints": []any{}})
	pod = only[*appsv1.Deployment](t, objs, api.Namespace, "fleet-role-controller").Spec.Template.Spec
	assert.Nil(t, pod.Affinity, "no preference when asked")
	assert.Empty(t, pod.TopologySpreadConstraints, "no spread when asked")
}

func TestThePodDisruptionBudgetIsRenderedOnlyWhereItCannotBlockADrain(t *testing.T) {
	pdbs := func(objs []runtime.Object) (n int) {
		for _, o := range objs {
			if _, ok := o.(*policyv1.PodDisruptionBudget); ok {
				n++
			}
		}
		return n
	}
	_, objs := render(t, api.Namespace, map[string]any{"replicas": 1})
	assert.Zero(t, pdbs(objs), "one replica: a budget of one would block its Node's drain")
	_, objs = render(t, api.Namespace, map[string]any{"replicas": 2})
	assert.Equal(t, 1, pdbs(objs))
	_, objs = render(t, api.Namespace, map[string]any{"replicas": 3, "podDisruptionBudget": map[string]any{"minAvailable": 2}})
	assert.Equal(t, 1, pdbs(objs))
	_, err := helm.Render(api.Namespace, map[string]any{"replicas": 2, "podDisruptionBudget": map[string]any{"minAvailable": 2}})
	require.Error(t, err, "a budget of every replica blocks every drain")
	assert.Contains(t, err.Error(), "podDisruptionBudget.minAvailable must be below replicas")
}

// controllerTOML is the controller.toml of a render.
func controllerTOML(t *testing.T, objs []runtime.Object, namespace string) string {
	t.Helper()
	for _, o := range objs {
		if cm, ok := o.(*corev1.ConfigMap); ok && cm.Namespace == namespace && strings.HasSuffix(cm.Name, "-controller-config") {
			return cm.Data["controller.toml"]
		}
	}
	t.Fatalf("no controller configuration in %s", namespace)
	return ""
}

// examples are the chart's example values files.
func examples(t *testing.T) map[string]map[string]any {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(helm.ChartDir(), "examples", "*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	out := map[string]map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		var v map[string]any
		require.NoError(t, yaml.Unmarshal(b, &v), f)
		out[filepath.Base(f)] = v
	}
	return out
}

func TestEveryExampleValuesFileRendersAConfigurationThatConfigValidateAccepts(t *testing.T) {
	for name, values := range examples(t) {
		t.Run(name, func(t *testing.T) {
			_, objs := render(t, api.Namespace, values)
			path := filepath.Join(t.TempDir(), "controller.toml")
			require.NoError(t, os.WriteFile(path, []byte(controllerTOML(t, objs, api.Namespace)), 0o644))
			_, err := config.LoadController(path)
			require.NoError(t, err, "config.LoadController")
			// Note: the files a configuration names (notify.urls_file) are
			// the Pod's mounts, not this host's: --files=false, as the
			// Ansible role checks its render.
			out, err := exec.Command(binary, "config", "validate", "--kind", "controller", "--files=false", path).CombinedOutput()
			require.NoError(t, err, "fleet-role config validate: %s", out)
		})
	}
}

func TestTheChartsDefaultsLeaveEveryKeyAtTheControllersDefault(t *testing.T) {
	_, objs := render(t, api.Namespace, nil)
	c, err := config.ParseController([]byte(controllerTOML(t, objs, api.Namespace)))
	require.NoError(t, err)
	assert.Equal(t, config.DefaultController(), c)
}

func TestTheTypedConfigurationValuesReachTheirKeys(t *testing.T) {
	_, objs := render(t, api.Namespace, map[string]any{"config": map[string]any{
		"leaseDuration": "2m", "deadAfter": "10m", "writeGapBudget": "3s", "minPassInterval": "1s", "drainTimeout": "45s",
		"failureDomainLabel": "",
		"maintenanceWindow":  map[string]any{"days": []any{"sat", "sun"}, "start": "01:00", "end": "05:30", "timeZone": "Europe/Paris"},
		"verdicts": map[string]any{"window": 12, "fsyncLimit": "20ms", "readLimit": "200ms",
			"walFsyncP99Limit": "15ms", "backendCommitP99Limit": "40ms"},
		"bounds": map[string]any{"snapshot": "1m", "runners": "2m", "drain": "3m", "promote": "4m", "join": "5m", "gates": "6m",
			"stepDown": "7m", "removeMember": "8m", "memberGone": "9m", "uncordon": "10m", "rollback": "11m",
			"removeFallback": "12m", "removeByVoter": "13m"},
		"remediation":    map[string]any{"maxRetries": 0, "retryPeriod": "1h", "minHealthyPeriod": "48h"},
		"leaderElection": map[string]any{"leaseDuration": "30s", "renewDeadline": "20s", "retryPeriod": "5s"},
	}})
	c, err := config.ParseController([]byte(controllerTOML(t, objs, api.Namespace)))
	require.NoError(t, err)
	want := config.DefaultController()
	want.LeaseDuration, want.DeadAfter, want.WriteGapBudget = 2*time.Minute, 10*time.Minute, 3*time.Second
	want.MinPassInterval, want.DrainTimeout, want.FailureDomainLabel = time.Second, 45*time.Second, ""
	want.MaintenanceWindow = config.MaintenanceWindow{Days: []string{"sat", "sun"}, Start: "01:00", End: "05:30", TimeZone: "Europe/Paris"}
	want.Verdicts = config.Verdicts{Window: 12, FsyncLimit: 20 * time.Millisecond, ReadLimit: 200 * time.Millisecond,
		WALFsyncP99Limit: 15 * time.Millisecond, BackendCommitP99Limit: 40 * time.Millisecond}
	want.Bounds = config.Bounds{Snapshot: time.Minute, Runners: 2 * time.Minute, Drain: 3 * time.Minute, Promote: 4 * time.Minute,
		Join: 5 * time.Minute, Gates: 6 * time.Minute, StepDown: 7 * time.Minute, RemoveMember: 8 * time.Minute,
		MemberGone: 9 * time.Minute, Uncordon: 10 * time.Minute, Rollback: 11 * time.Minute,
		RemoveFallback: 12 * time.Minute, RemoveByVoter: 13 * time.Minute}
	want.Remediation = config.Remediation{MaxRetries: 0, RetryPeriod: time.Hour, MinHealthyPeriod: 48 * time.Hour}
	want.LeaderElection.LeaseDuration, want.LeaderElection.RenewDeadline, want.LeaderElection.RetryPeriod = 30*time.Second, 20*time.Second, 5*time.Second
	assert.Equal(t, want, c)
}

func TestThePrometheusHoldsIgnoreValuesReachTheirKeysAnEmptyRegexpIncludedAndNullLeavesTheDefaults(t *testing.T) {
	holds := func(prometheus map[string]any) config.Holds {
		t.Helper()
		_, objs := render(t, api.Namespace, map[string]any{"holds": map[string]any{"prometheus": prometheus}})
		c, err := config.ParseController([]byte(controllerTOML(t, objs, api.Namespace)))
		require.NoError(t, err)
		return c.Holds
	}
	h := holds(map[string]any{"url": "http://prometheus:9090", "alertIgnoreRegexp": "", "alertIgnoreOutgoing": false})
	assert.Equal(t, "http://prometheus:9090", h.PrometheusURL)
	assert.Empty(t, h.AlertIgnoreRegexp, "an empty regexp ignores no alert")
	assert.False(t, h.AlertIgnoreOutgoing)
	h = holds(map[string]any{"url": "http://prometheus:9090", "alertIgnoreRegexp": "^Watchdog$"})
	assert.Equal(t, "^Watchdog$", h.AlertIgnoreRegexp)
	assert.True(t, h.AlertIgnoreOutgoing, "null: the default")
	h = holds(map[string]any{"url": "http://prometheus:9090"})
	def := config.DefaultController().Holds
	assert.Equal(t, def.AlertIgnoreRegexp, h.AlertIgnoreRegexp)
	assert.Equal(t, def.AlertIgnoreOutgoing, h.AlertIgnoreOutgoing)
}

func TestTheNotificationsRetryValuesReachTheirKeysAndUnsetLeaveTheDefaults(t *testing.T) {
	notify := func(values map[string]any) config.Notify {
		t.Helper()
		_, objs := render(t, api.Namespace, map[string]any{"notify": values})
		c, err := config.ParseController([]byte(controllerTOML(t, objs, api.Namespace)))
		require.NoError(t, err)
		return c.Notify
	}
	n := notify(map[string]any{"urls": []any{"generic://hooks.example/fleet"}, "retryBackoff": "10s", "maxRetryBackoff": "15m", "maxQueued": 20})
	assert.Equal(t, []string{"generic://hooks.example/fleet"}, n.URLs)
	assert.Equal(t, 10*time.Second, n.RetryBackoff)
	assert.Equal(t, 15*time.Minute, n.MaxRetryBackoff)
	assert.Equal(t, 20, n.MaxQueued)
	n = notify(map[string]any{"urls": []any{"generic://hooks.example/fleet"}})
	def := config.DefaultController().Notify
	assert.Equal(t, def.RetryBackoff, n.RetryBackoff)
	assert.Equal(t, def.MaxRetryBackoff, n.MaxRetryBackoff)
	assert.Equal(t, def.MaxQueued, n.MaxQueued)
}

func TestAKeyOrTableOfConfigExtraThatTheValuesSetTooFailsTheRenderNamingIt(t *testing.T) {
	for _, c := range []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"a [holds] beside holds.kured", map[string]any{"holds": map[string]any{"kured": map[string]any{"namespace": "kube-system"}},
			"config": map[string]any{"extra": "[holds]\nupgrade_plans_namespace = \"system-upgrade\"\n"}}, `config.extra sets "holds"`},
		{"a [verdicts] beside config.verdicts", map[string]any{"config": map[string]any{"verdicts": map[string]any{"window": 10},
			"extra": "[verdicts]\nfsync_limit = \"20ms\"\n"}}, `config.extra sets "verdicts"`},
		{"a dotted key of a table the values render", map[string]any{"notify": map[string]any{"urls": []any{"generic://h/x"}},
			"config": map[string]any{"extra": "notify.urls_file = \"/x\"\n"}}, `config.extra sets "notify"`},
		{"a key the chart always sets", map[string]any{"config": map[string]any{"extra": "dry_run = false\n"}}, `config.extra sets "dry_run"`},
		{"a key a typed value sets", map[string]any{"config": map[string]any{"deadAfter": "9m", "extra": "dead_after = \"10m\"\n"}}, `config.extra sets "dead_after"`},
		{"no TOML", map[string]any{"config": map[string]any{"extra": "[verdicts\n"}}, "config.extra is not TOML"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := helm.Render(api.Namespace, c.values)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
		})
	}

	// What the values do not set goes through, its keys outside any table
	// staying there after the tables the values render.
	_, objs := render(t, api.Namespace, map[string]any{
		"holds":  map[string]any{"kured": map[string]any{"namespace": "kube-system"}},
		"notify": map[string]any{"urls": []any{"generic://hooks.example/x"}},
		"config": map[string]any{"extra": "dead_after = \"10m\"\n\n[verdicts]\nwindow = 10\n"},
	})
	c, err := config.ParseController([]byte(controllerTOML(t, objs, api.Namespace)))
	require.NoError(t, err)
	assert.Equal(t, 10*time.Minute, c.DeadAfter)
	assert.Equal(t, 10, c.Verdicts.Window)
	assert.Equal(t, "kube-system/kured", c.Holds.KuredDaemonSet)
}

func TestTheValuesSchemaRefusesAWrongTypedOrUnknownValue(t *testing.T) {
	for _, c := range []struct {
		name   string
		values map[string]any
	}{
		{"replicas a string", map[string]any{"replicas": "two"}},
		{"dryRun a string", map[string]any{"config": map[string]any{"dryRun": "yes"}}},
		{"a period that is no duration", map[string]any{"config": map[string]any{"period": "ten seconds"}}},
		{"a maintenance window's day unknown", map[string]any{"config": map[string]any{"maintenanceWindow": map[string]any{"days": []any{"monday"}}}}},
		{"a start that is no time of day", map[string]any{"config": map[string]any{"maintenanceWindow": map[string]any{"start": "25:00"}}}},
		{"a verdicts window of 0", map[string]any{"config": map[string]any{"verdicts": map[string]any{"window": 0}}}},
		{"tolerations an object", map[string]any{"tolerations": map[string]any{"key": "x"}}},
		{"a value misspelt", map[string]any{"replica": 3}},
		{"a nested value misspelt", map[string]any{"holds": map[string]any{"kured": map[string]any{"namepsace": "kube-system"}}}},
		{"an access subject without a kind", map[string]any{"access": map[string]any{"viewers": []any{map[string]any{"name": "x"}}}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := helm.Render(api.Namespace, c.values)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "values don't meet the specifications of the schema")
		})
	}
}

func TestHelmLintStrictPassesOnTheChartWithEveryExample(t *testing.T) {
	bin, err := testhost.Helm()
	require.NoError(t, err)
	sets := examples(t)
	sets["values.yaml"] = nil
	for name, values := range sets {
		t.Run(name, func(t *testing.T) {
			b, err := json.Marshal(helm.WithTag(values))
			require.NoError(t, err)
			file := filepath.Join(t.TempDir(), "values.json")
			require.NoError(t, os.WriteFile(file, b, 0o644))
			out, err := exec.Command(bin, "lint", "--strict", helm.ChartDir(), "-n", api.Namespace, "-f", file).CombinedOutput()
			require.NoError(t, err, "%s", out)
		})
	}
}

func TestTheNotesSayWhatWasInstalledWhetherDryRunIsOnAndHowToCheckIt(t *testing.T) {
	r, _ := renderRelease(t, "fleet-role", "ops", nil)
	assert.Contains(t, r.Notes, "namespace ops")
	assert.Contains(t, r.Notes, "Deployment fleet-role-controller")
	assert.Contains(t, r.Notes, "Dry run is ON")
	assert.Contains(t, r.Notes, "exec deploy/fleet-role-controller -- fleet-role status")
	assert.Contains(t, r.Notes, "helm test fleet-role -n ops")
	assert.Contains(t, r.Notes, "fleet-role status -n ops", "a workstation reaches the release by its namespace")
	r, _ = renderRelease(t, "blue", "blue", map[string]any{"config": map[string]any{"dryRun": false}})
	assert.Contains(t, r.Notes, "Dry run is OFF")
	assert.Contains(t, r.Notes, "blue-fleet-role-operator")
}

func TestTheChartsREADMEIsGeneratedFromValuesYAMLsComments(t *testing.T) {
	want, err := helm.ValuesREADME()
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(helm.ValuesREADMEPath(), want, 0o644))
	}
	got, err := os.ReadFile(helm.ValuesREADMEPath())
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "regenerate: go generate ./tests/helm")

	// Every value a user may set is documented: each leaf of values.yaml
	// (or the object it is in, where the object is documented whole).
	docs, err := helm.ValueDocs()
	require.NoError(t, err)
	documented := map[string]bool{}
	for _, d := range docs {
		documented[d.Key] = true
	}
	b, err := os.ReadFile(filepath.Join(helm.ChartDir(), "values.yaml"))
	require.NoError(t, err)
	var values map[string]any
	require.NoError(t, yaml.Unmarshal(b, &values))
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			key := strings.TrimPrefix(prefix+"."+k, ".")
			if documented[key] {
				continue
			}
			sub, ok := v.(map[string]any)
			if assert.True(t, ok && len(sub) > 0, "%s is documented in values.yaml (# --)", key) {
				walk(key, sub)
			}
		}
	}
	walk("", values)
}

func TestHelmTestsPodRunsFleetRoleStatusWithTheReleasesConfigurationAndIsAHookOnly(t *testing.T) {
	r, objs := renderRelease(t, "fleet-role", api.Namespace, nil)
	hooks, err := kubeapi.Decode(r.Hooks)
	require.NoError(t, err)
	require.Len(t, hooks, 1)
	pod, ok := hooks[0].(*corev1.Pod)
	require.True(t, ok, "%T", hooks[0])
	assert.Equal(t, "test", pod.Annotations["helm.sh/hook"])
	assert.Equal(t, corev1.RestartPolicyNever, pod.Spec.RestartPolicy)
	assert.Equal(t, "fleet-role-controller", pod.Spec.ServiceAccountName, "the controller's account, which reads the status")
	require.Len(t, pod.Spec.Containers, 1)
	c := pod.Spec.Containers[0]
	assert.Equal(t, "fleet-role:"+helm.Tag, c.Image)
	require.Equal(t, []string{"status", "--config", "/etc/fleet-role/controller.toml"}, c.Args)
	require.Len(t, c.VolumeMounts, 1)
	assert.Equal(t, "/etc/fleet-role", c.VolumeMounts[0].MountPath)
	cm := only[*corev1.ConfigMap](t, objs, api.Namespace, "fleet-role-controller-config")
	assert.Equal(t, cm.Name, pod.Spec.Volumes[0].ConfigMap.Name, "the release's configuration, its namespace the release's")
	for _, o := range objs {
		_, isPod := o.(*corev1.Pod)
		assert.False(t, isPod, "the test Pod is no manifest an install (or the Ansible role) applies")
	}
	r, _ = renderRelease(t, "fleet-role", api.Namespace, map[string]any{"tests": map[string]any{"enabled": false}})
	assert.Empty(t, r.Hooks)
}

func TestAScrapeConfigOfTheAgentsFindsThemAsTheNodesAtTheirPortWhenAsked(t *testing.T) {
	_, objs := render(t, api.Namespace, map[string]any{"metrics": map[string]any{"agents": map[string]any{"scrapeConfig": map[string]any{
		"enabled": true, "labels": map[string]any{"release": "prometheus"}}}}})
	var scrape *unstructured.Unstructured
	for _, o := range objs {
		if u, ok := o.(*unstructured.Unstructured); ok && u.GetKind() == "ScrapeConfig" {
			scrape = u
		}
	}
	require.NotNil(t, scrape)
	assert.Equal(t, "monitoring.coreos.com/v1alpha1", scrape.GetAPIVersion())
	assert.Equal(t, "prometheus", scrape.GetLabels()["release"])
	var spec struct {
		JobName             string `json:"jobName"`
		KubernetesSDConfigs []struct {
			Role string `json:"role"`
		} `json:"kubernetesSDConfigs"`
		Relabelings []struct {
			SourceLabels []string `json:"sourceLabels"`
			TargetLabel  string   `json:"targetLabel"`
			Replacement  string   `json:"replacement"`
		} `json:"relabelings"`
	}
	b, err := json.Marshal(scrape.Object["spec"])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &spec))
	require.Len(t, spec.KubernetesSDConfigs, 1)
	assert.Equal(t, "Node", spec.KubernetesSDConfigs[0].Role, "the agents are on the Nodes' hosts")
	// The agents' port, as the Ansible role sets their listen_address.
	role, err := os.ReadFile(filepath.Join(helm.ChartDir(), "..", "..", "..", "ansible", "roles", "fleet_role_agent", "defaults", "main.yml"))
	require.NoError(t, err)
	port := regexp.MustCompile(`fleet_role_agent_listen_address: ":(\d+)"`).FindSubmatch(role)
	require.NotNil(t, port)
	require.NotEmpty(t, spec.Relabelings)
	assert.Equal(t, "__address__", spec.Relabelings[0].TargetLabel)
	assert.Equal(t, "${1}:"+string(port[1]), spec.Relabelings[0].Replacement)
	targets := map[string]bool{}
	for _, r := range spec.Relabelings {
		targets[r.TargetLabel] = true
	}
	assert.True(t, targets["node"] && targets["role"], "each series names its Node and role")

	_, objs = render(t, api.Namespace, nil)
	for _, o := range objs {
		assert.NotEqual(t, "ScrapeConfig", o.GetObjectKind().GroupVersionKind().Kind, "none unless asked")
	}
}

func TestTheDashboardHasPanelsOfTheAgentsMetricsEachOneTheAgentsServe(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(helm.ChartDir(), "files", "grafana-dashboard.json"))
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(b, &d))
	metrics, err := os.ReadFile(filepath.Join(helm.ChartDir(), "..", "..", "..", "daemon", "metrics.go"))
	require.NoError(t, err)
	agentMetric := regexp.MustCompile(`fleet_role_agent_[a-z0-9_]+?(_bucket|_sum|_count)?\b`)
	titles := map[string]bool{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, m := range agentMetric.FindAllStringSubmatch(tg.Expr, -1) {
				titles[p.Title] = true
				name := strings.TrimSuffix(m[0], m[1])
				assert.True(t, strings.Contains(string(metrics), `"`+name+`"`), "panel %q: %s is a metric the agents serve (daemon/metrics.go)", p.Title, name)
			}
		}
	}
	for _, want := range []string{"Silent agents", "Agents' failed actions", "Agents' probes: fsync p99", "Agents' probes: unhealthy"} {
		assert.True(t, titles[want], "a panel %q on the agents' metrics", want)
	}
}

func TestTheChartMakeChartPackagesCarriesFleetRolesVersionAsAppVersionWithItsSchemaAndREADME(t *testing.T) {
	bin, err := testhost.Helm()
	require.NoError(t, err)
	dir := t.TempDir()
	// As make chart runs it, with a version as make -s image-tag prints one.
	out, err := exec.Command(bin, "package", helm.ChartDir(), "--app-version", "0.3.0-3.gabc1234", "-d", dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	tgz, err := filepath.Glob(filepath.Join(dir, "fleet-role-*.tgz"))
	require.NoError(t, err)
	require.Len(t, tgz, 1)
	ch, err := loader.Load(tgz[0])
	require.NoError(t, err)
	assert.Equal(t, "0.3.0-3.gabc1234", ch.Metadata.AppVersion, "fleet-role's version, never latest")
	assert.NotEmpty(t, ch.Schema, "values.schema.json")
	var files []string
	for _, f := range ch.Files {
		files = append(files, f.Name)
	}
	assert.Contains(t, files, "README.md")
	assert.Contains(t, files, "examples/weeknights.yaml")
}
