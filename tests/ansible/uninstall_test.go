package ansible_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// The metadata on the Nodes that is not fleet-role's and must survive an
// uninstall: k3s's own server labels and etcd annotation, and an
// operator's label, annotation and taint.
var (
	foreignLabels = map[string]string{
		api.LabelEtcd: "true", api.LabelControlPlane: "true", "example.com/team": "ci",
	}
	foreignAnnotations = map[string]string{
		api.AnnotationEtcdNodeName: "runner-01-0ac16eda", "example.com/owner": "platform",
	}
	foreignTaints = []corev1.Taint{{Key: "example.com/dedicated", Value: "ci", Effect: corev1.TaintEffectNoSchedule}}
)

func createNode(t *testing.T, kube *kubeapi.Server, name string) {
	t.Helper()
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: clone(foreignLabels), Annotations: clone(foreignAnnotations)},
		Spec:       corev1.NodeSpec{Taints: slices.Clone(foreignTaints)},
	}
	_, err := kube.Client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
	require.NoError(t, err)
}

func clone(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

// markNode puts on a Node what a running fleet does: its role and level,
// the etcd-only taint of a server regraded to etcd-only, the agent's
// report and probe.
func markNode(t *testing.T, kube *kubeapi.Server, name, role string, etcdOnly bool, extra map[string]string) {
	t.Helper()
	ctx := context.Background()
	n, err := kube.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	require.NoError(t, err)
	n.Labels[api.LabelRole] = role
	if etcdOnly {
		n.Labels[api.LabelLevel] = "etcd-only"
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: api.TaintEtcdOnly, Effect: corev1.TaintEffectNoSchedule})
	}
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	report, err := json.Marshal(api.Report{Swap: "20261130-110000-v9", Action: api.ReportFinish, State: api.StateDone, At: at})
	require.NoError(t, err)
	if _, ok := n.Annotations[api.AnnotationProbe]; !ok {
		n.Annotations[api.AnnotationProbe] = `{"at":"2026-11-30T12:00:00Z"}`
	}
	n.Annotations[api.AnnotationReport] = string(report)
	for k, v := range extra {
		n.Annotations[k] = v
	}
	_, err = kube.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// writeControllerState writes what a running controller writes in its
// namespace: the regrade Lease (held with the swap's record while one is
// under way, released after), its replicas' election Lease, and the
// status it publishes (with the swap under way, or the last one's end).
func writeControllerState(t *testing.T, kube *kubeapi.Server, underWay *api.SwapRecord, step string) {
	t.Helper()
	ctx := context.Background()
	started := time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)
	status := api.Status{UpdatedAt: started.Add(time.Hour), Voters: []string{"runner-01", "runner-02", "runner-03"}}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: api.Namespace, Name: api.LeaseName}}
	if underWay != nil {
		rec, err := json.Marshal(underWay)
		require.NoError(t, err)
		lease.Annotations = map[string]string{api.AnnotationSwap: string(rec)}
		lease.Spec = coordinationv1.LeaseSpec{HolderIdentity: ptr.To(api.ControllerHolder), LeaseDurationSeconds: ptr.To[int32](60),
			AcquireTime: &metav1.MicroTime{Time: started}, RenewTime: &metav1.MicroTime{Time: started.Add(time.Hour)}}
		status.Swap, status.Step, status.Since = underWay, step, &started
		status.Last = &api.SwapResult{ID: "20261130-090000-runner-02", Out: "runner-02", In: "runner-03", Origin: api.OriginAutomatic,
			Result: api.ResultCompleted, StartedAt: started.Add(-2 * time.Hour), EndedAt: started.Add(-time.Hour)}
	} else {
		lease.Spec = coordinationv1.LeaseSpec{RenewTime: &metav1.MicroTime{Time: started.Add(time.Hour)}}
		status.Last = &api.SwapResult{ID: "20261130-110000-runner-01", Out: "runner-01", In: "runner-04", Origin: api.OriginManual,
			Result: api.ResultRolledBack, StartedAt: started, EndedAt: started.Add(time.Hour)}
	}
	data, err := json.Marshal(status)
	require.NoError(t, err)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: api.Namespace, Name: api.StatusConfigMap},
		Data: map[string]string{api.StatusKey: string(data)}}
	election := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: api.Namespace, Name: "fleet-role-controller"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("fleet-role-controller-7d9f8-abcde"), LeaseDurationSeconds: ptr.To[int32](15)}}

	leases := kube.Client.CoordinationV1().Leases(api.Namespace)
	for _, l := range []*coordinationv1.Lease{lease, election} {
		old, err := leases.Get(ctx, l.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		} else if err == nil {
			l.ResourceVersion = old.ResourceVersion
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		require.NoError(t, err)
	}
	cms := kube.Client.CoreV1().ConfigMaps(api.Namespace)
	old, err := cms.Get(ctx, cm.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
	} else if err == nil {
		cm.ResourceVersion = old.ResourceVersion
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	}
	require.NoError(t, err)
}

// writeForeign writes objects beside fleet-role's that are not its own:
// k3s's ConfigMap of its etcd snapshots (which lists one of ours) and a
// kubelet's heartbeat Lease.
func writeForeign(t *testing.T, kube *kubeapi.Server) {
	t.Helper()
	ctx := context.Background()
	_, err := kube.Client.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "k3s-etcd-snapshots"},
		Data:       map[string]string{"local-fleet-role-20261130-110000-runner-01-1764500400": `{"name":"fleet-role-20261130-110000-runner-01-1764500400"}`},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.Client.CoordinationV1().Leases(api.NodeLeaseNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: api.NodeLeaseNamespace, Name: "runner-04"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("runner-04")},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
}

// assertForeignSurvive checks the foreign objects and the Nodes' foreign
// metadata are as they were.
func assertForeignSurvive(t *testing.T, kube *kubeapi.Server, nodes ...string) {
	t.Helper()
	ctx := context.Background()
	for _, name := range nodes {
		n, err := kube.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.Equal(t, foreignLabels, n.Labels, "%s's labels: k3s's and the operator's, no more", name)
		for k, v := range foreignAnnotations {
			assert.Equal(t, v, n.Annotations[k], "%s's annotation %s", name, k)
		}
		// Note: the API server's admission (TaintNodesByCondition) taints
		// a new Node not-ready; that taint is not fleet-role's either.
		notReady := corev1.Taint{Key: corev1.TaintNodeNotReady, Effect: corev1.TaintEffectNoSchedule}
		assert.Equal(t, append(slices.Clone(foreignTaints), notReady), n.Spec.Taints, "%s's taints: the operator's and the API server's", name)
	}
	_, err := kube.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "k3s-etcd-snapshots", metav1.GetOptions{})
	assert.NoError(t, err, "k3s's ConfigMap stays")
	_, err = kube.Client.CoordinationV1().Leases(api.NodeLeaseNamespace).Get(ctx, "runner-04", metav1.GetOptions{})
	assert.NoError(t, err, "the kubelet's Lease stays")
}

// clusterLeftovers lists, over every resource the API server serves,
// every object of fleet-role's: named for it, in its namespace, or with a
// label, an annotation or (a Node's) a taint under fleet-role.io/. Events
// are left to expire, as docs/uninstall.md says; the namespace itself may
// be left terminating, since no namespace controller runs beside the
// test's API server to finish its deletion.
func clusterLeftovers(t *testing.T, kube *kubeapi.Server) []string {
	t.Helper()
	ctx := context.Background()
	cfg := rest.CopyConfig(kube.Config)
	cfg.WarningHandler = rest.NoWarnings{}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	require.NoError(t, err)
	lists, err := dc.ServerPreferredResources()
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	var found []string
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		require.NoError(t, err)
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") || !slices.Contains(r.Verbs, "list") || r.Kind == "Event" {
				continue
			}
			items, err := dyn.Resource(gv.WithResource(r.Name)).List(ctx, metav1.ListOptions{})
			require.NoError(t, err, "list %s", r.Name)
			for _, o := range items.Items {
				found = append(found, ours(r.Kind, o)...)
			}
		}
	}
	sort.Strings(found)
	return found
}

func ours(kind string, o unstructured.Unstructured) []string {
	id := kind + " " + filepath.Join(o.GetNamespace(), o.GetName())
	if kind == "Namespace" && o.GetName() == api.Namespace && o.GetDeletionTimestamp() != nil {
		return nil
	}
	var why []string
	if strings.Contains(o.GetName(), "fleet-role") || o.GetNamespace() == api.Namespace {
		why = append(why, id)
	}
	for k := range o.GetLabels() {
		if strings.HasPrefix(k, "fleet-role.io/") {
			why = append(why, id+" label "+k)
		}
	}
	for k := range o.GetAnnotations() {
		if strings.HasPrefix(k, "fleet-role.io/") {
			why = append(why, id+" annotation "+k)
		}
	}
	taints, _, _ := unstructured.NestedSlice(o.Object, "spec", "taints")
	for _, tn := range taints {
		if k, _ := tn.(map[string]any)["key"].(string); strings.HasPrefix(k, "fleet-role.io/") {
			why = append(why, id+" taint "+k)
		}
	}
	return why
}

// hostLeftovers lists the paths on a host whose name says fleet-role,
// the test's own shared directory aside.
func hostLeftovers(t *testing.T, h *testhost.SystemdHost) []string {
	t.Helper()
	out := h.Exec(t, "sh", "-c", `{ find / -xdev -name '*fleet-role*' -print; `+
		`find /run -xdev -path /run/fleet-role-test -prune -o -name '*fleet-role*' -print; } | sort`)
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// prefixLeftovers lists the paths under a prefix that say fleet-role.
func prefixLeftovers(t *testing.T, prefix string) []string {
	t.Helper()
	var found []string
	require.NoError(t, filepath.WalkDir(prefix, func(p string, _ fs.DirEntry, err error) error {
		if rel := strings.TrimPrefix(p, prefix); err == nil && strings.Contains(rel, "fleet-role") {
			found = append(found, rel)
		}
		return err
	}))
	return found
}

// debPackage builds fleet-role's .deb (make package) and returns its path.
func debPackage(t *testing.T) string {
	t.Helper()
	bin := t.TempDir()
	make := exec.Command("make", "package", "BIN="+bin)
	make.Dir = testhost.Root()
	var out bytes.Buffer
	make.Stdout, make.Stderr = &out, &out
	require.NoError(t, make.Run(), out.String())
	debs, _ := filepath.Glob(filepath.Join(bin, "*.deb"))
	require.Len(t, debs, 1, out.String())
	return debs[0]
}

func TestUndeployRemovesWhatFleetRoleInstalledAndWroteAndLeavesK3sRunning(t *testing.T) {
	kube := kubeapi.Start(t)
	h := testhost.StartSystemdHost(t, "--network", "host")
	ctx := context.Background()
	for _, n := range []string{"runner-01", "runner-04"} {
		createNode(t, kube, n)
	}
	// An agent of a host since gone from the inventory, its RBAC left.
	grant(t, kube, "runner-99")
	writeForeign(t, kube)

	// runner-04, a standby: a host with systemd as PID 1, fleet-role's
	// .deb installed on it, as the role does with a package, and the files
	// the role copies without one. k3s's agent runs there (the stand-in of
	// the image's k3s-agent.service); the agent once took a snapshot, moved
	// a datastore aside and wrote the server k3s joins through, beside
	// k3s's own files.
	testhost.Docker(t, "cp", debPackage(t), h.Name+":/tmp/package.deb")
	h.Exec(t, "dpkg", "-i", "/tmp/package.deb")
	h.Exec(t, "rm", "/tmp/package.deb")
	const db = "/var/lib/rancher/k3s/server/db"
	k3sFiles := map[string]string{
		"/etc/rancher/k3s/config.yaml":                       "token-file: /etc/rancher/k3s/token\n",
		"/etc/rancher/k3s/config.yaml.d/50-operator.yaml":    "node-label+: [example.com/team=ci]\n",
		"/etc/systemd/system/k3s-agent.service.env":          "K3S_URL=https://10.0.0.1:6443\n",
		db + "/snapshots/etcd-snapshot-runner-04-1764496800": "k3s's own",
		db + "/snapshots/on-demand-runner-04-1764496900":     "k3s's own",
	}
	const joinFile = "/etc/rancher/k3s/config.yaml.d/90-fleet-role.yaml"
	const snapshot = db + "/snapshots/fleet-role-20261130-110000-runner-01-1764500400"
	const moved = db + "/etcd-removed-1764500500"
	ours := map[string]string{
		joinFile: "# Written by fleet-role's agent before it starts k3s on this host:\n# the server k3s joins through, a live voter.\nserver: https://10.0.0.1:6443\n",
		snapshot: "a snapshot",
		db + "/snapshots/fleet-role-20261130-120000-runner-01-1764504000.part": "a snapshot cut short",
		moved + "/member/snap/db": "a datastore moved aside",
	}
	tree := t.TempDir()
	for p, content := range mergeMaps(k3sFiles, ours) {
		require.NoError(t, os.MkdirAll(filepath.Join(tree, filepath.Dir(p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(tree, p), []byte(content), 0o644))
	}
	testhost.Docker(t, "cp", tree+"/.", h.Name+":/")
	h.Exec(t, "systemctl", "enable", "--now", "k3s-agent.service")
	k3sBefore := h.Exec(t, "systemctl", "show", "-p", "MainPID,ActiveEnterTimestampMonotonic", "k3s-agent.service")

	// runner-01, a server: installed into a prefix on this machine.
	dir := t.TempDir()
	prefix := filepath.Join(dir, "runner-01")
	stageServer(t, prefix)
	inv := filepath.Join(dir, "inventory.yml")
	// Note: ansible_become off: the hosts are reached as root, and the
	// test image has no sudo.
	require.NoError(t, os.WriteFile(inv, []byte(fmt.Sprintf(`all:
  vars:
    ansible_become: false
    ansible_python_interpreter: /usr/bin/python3
  children:
    fleet_servers:
      hosts:
        runner-01:
          ansible_connection: local
          ansible_host: 10.0.0.1
          fleet_role_agent_prefix: %s
          fleet_role_agent_manage_service: false
    fleet_standbys:
      hosts:
        runner-04:
          ansible_connection: community.docker.docker
          ansible_host: %s
`, prefix, h.Name)), 0o644))
	// fleet-role's own image, which deploy.yml delivers, in the Docker
	// engine here as make image leaves it.
	image := testhost.ImageOf(t, ownImage(t), binary, "/usr/local/bin/fleet-role")
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", image).Run() })
	common := []string{"-i", inv,
		"-e", "fleet_role_agent_binary=" + binary, "-e", "fleet_role_agent_admin_kubeconfig=" + kube.Kubeconfig,
		"-e", "fleet_role_agent_api_server=" + kube.URL, "-e", "fleet_role_agent_etcd_endpoint=http://127.0.0.1:1",
		"-e", "fleet_role_controller_kubeconfig=" + kube.Kubeconfig, "-e", "fleet_role_controller_binary=" + binary, "-e", "fleet_role_controller_helm=" + helmBinary,
		"-e", "fleet_role_controller_wait=false"}
	deploy := append([]string{"deploy.yml"}, common...)
	undeploy := append([]string{"undeploy.yml"}, common...)

	assert.Positive(t, changed(t, playbook(t, deploy...)))
	require.Equal(t, "active", h.Exec(t, "systemctl", "is-active", "fleet-role-agent.service"))
	require.Eventually(t, func() bool {
		n, err := kube.Client.CoreV1().Nodes().Get(ctx, "runner-04", metav1.GetOptions{})
		return err == nil && n.Annotations[api.AnnotationProbe] != ""
	}, 60*time.Second, 200*time.Millisecond, "the agent writes its probe with the credentials the role made; journal:\n%s",
		h.Exec(t, "journalctl", "-u", "fleet-role-agent", "--no-pager", "-n", "30"))
	require.NotEmpty(t, hostLeftovers(t, h))
	require.NotEmpty(t, prefixLeftovers(t, prefix))
	// The controller's image, delivered into k3s's images directory of
	// each host.
	archive := "/var/lib/rancher/k3s/agent/images/fleet-role-" + strings.TrimPrefix(image, "fleet-role:") + ".tar"
	assert.FileExists(t, filepath.Join(prefix, archive))
	assert.Contains(t, h.Exec(t, "sh", "-c", "tar -tf "+archive+" manifest.json"), "manifest.json")

	// A running fleet: the Nodes' roles, a server's level and taint, the
	// agents' reports, the controller's Leases and status; a swap under way.
	markNode(t, kube, "runner-01", api.RoleVoter, true, nil)
	markNode(t, kube, "runner-04", api.RoleStandby, false, nil)
	swap := &api.SwapRecord{ID: "20261130-110000-runner-01", Out: "runner-01", In: "runner-04", Origin: api.OriginManual,
		StartedAt: time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC)}
	writeControllerState(t, kube, swap, api.StepPromote)

	// Mid-swap the uninstall is refused, and changes nothing.
	out, err := tool(t, "ansible-playbook", undeploy...)
	require.Error(t, err, out)
	assert.Contains(t, out, "Not uninstalling: swap 20261130-110000-runner-01 (runner-01 out, runner-04 in, manual) is under way at its step promote")
	assert.Contains(t, out, "-e force=true")
	assert.Equal(t, "active", h.Exec(t, "systemctl", "is-active", "fleet-role-agent.service"), "the agent still runs")
	_, err = kube.Client.AppsV1().Deployments(api.Namespace).Get(ctx, "fleet-role-controller", metav1.GetOptions{})
	assert.NoError(t, err, "the controller's Deployment is still there")
	n, err := kube.Client.CoreV1().Nodes().Get(ctx, "runner-01", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, api.RoleVoter, n.Labels[api.LabelRole], "the Nodes are untouched")
	assert.FileExists(t, filepath.Join(prefix, "usr/bin/fleet-role"), "the other host's agent too")

	// The swap ends (rolled back): the Lease released, the status says so.
	writeControllerState(t, kube, nil, "")

	// Check mode says what it would remove, and removes nothing.
	assert.Positive(t, changed(t, playbook(t, append(undeploy, "--check")...)))
	assert.Equal(t, "active", h.Exec(t, "systemctl", "is-active", "fleet-role-agent.service"))
	_, err = kube.Client.AppsV1().Deployments(api.Namespace).Get(ctx, "fleet-role-controller", metav1.GetOptions{})
	assert.NoError(t, err, "check mode deleted nothing")
	assert.FileExists(t, filepath.Join(prefix, "usr/bin/fleet-role"))

	require.NotEmpty(t, clusterLeftovers(t, kube))
	out = playbook(t, undeploy...)
	assert.Positive(t, changed(t, out))
	assert.Contains(t, out, "Kept "+joinFile)
	assert.Contains(t, out, "Kept, as backups of the cluster's datastore: "+moved+", "+snapshot)

	// Nothing of fleet-role's is left on the host but what the uninstall
	// keeps and says so: the drop-in, and the snapshot beside the datastore
	// moved aside. The package and the unit are gone.
	assert.Equal(t, []string{joinFile, snapshot}, hostLeftovers(t, h))
	assert.Equal(t, "yes", h.Exec(t, "sh", "-c", "test -d "+moved+" && echo yes"))
	assert.Equal(t, "not-found", h.Exec(t, "systemctl", "show", "-p", "LoadState", "--value", "fleet-role-agent.service"))
	assert.Contains(t, h.Exec(t, "sh", "-c", "dpkg-query --show fleet-role 2>&1 || true"), "no packages found matching fleet-role")
	for _, p := range []string{"/etc/fleet-role", "/var/lib/fleet-role", "/usr/bin/fleet-role", "/usr/share/fleet-role"} {
		assert.Equal(t, "gone", h.Exec(t, "sh", "-c", "test -e "+p+" || echo gone"), p)
	}
	// k3s runs on, not restarted, enabled as it was; its files are as they were.
	assert.Equal(t, "active", h.Exec(t, "systemctl", "is-active", "k3s-agent.service"))
	assert.Equal(t, "enabled", h.Exec(t, "systemctl", "is-enabled", "k3s-agent.service"))
	assert.Equal(t, k3sBefore, h.Exec(t, "systemctl", "show", "-p", "MainPID,ActiveEnterTimestampMonotonic", "k3s-agent.service"))
	for p, content := range k3sFiles {
		assert.Equal(t, strings.TrimSpace(content), h.Exec(t, "cat", p), p)
	}
	assert.Empty(t, prefixLeftovers(t, prefix), "nothing of fleet-role's on the other host")

	// Nothing of fleet-role's is left on the cluster; k3s's and the
	// operator's things are.
	assert.Empty(t, clusterLeftovers(t, kube))
	assertForeignSurvive(t, kube, "runner-01", "runner-04")

	// A second run changes nothing.
	assert.Zero(t, changed(t, playbook(t, undeploy...)), "a second run changes nothing")
}

func mergeMaps(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

func TestUndeployAndDeployRefusedMidSwapUndeployForcedOnlyWhenAskedSaysWhatItLeaves(t *testing.T) {
	kube := kubeapi.Start(t)
	ctx := context.Background()
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yml")
	// No host of the fleet is reached: the controller alone, and the Nodes.
	require.NoError(t, os.WriteFile(inv, []byte("all:\n  children:\n    fleet_servers:\n      hosts: {}\n"), 0o644))
	common := []string{"-i", inv, "-e", "ansible_python_interpreter=/usr/bin/python3",
		"-e", "fleet_role_controller_kubeconfig=" + kube.Kubeconfig, "-e", "fleet_role_controller_binary=" + binary, "-e", "fleet_role_controller_helm=" + helmBinary,
		"-e", "fleet_role_controller_wait=false"}
	undeploy := append([]string{"undeploy.yml"}, common...)

	out, err := tool(t, "ansible-playbook", append([]string{"deploy.yml", "-e", "state=absent"}, common...)...)
	require.Error(t, err, out)
	assert.Contains(t, out, "ansible-playbook undeploy.yml removes it")
	_, err = kube.Client.CoreV1().Namespaces().Get(ctx, api.Namespace, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "deploy.yml -e state=absent installs nothing: %v", err)

	playbook(t, append([]string{"deploy.yml"}, common...)...)
	for _, n := range []string{"v1", "s1"} {
		createNode(t, kube, n)
	}
	grant(t, kube, "s1")
	writeForeign(t, kube)
	const id = "20261130-110000-v1"
	markNode(t, kube, "v1", api.RoleVoter, true, map[string]string{api.AnnotationCordonedBy: id})
	markNode(t, kube, "s1", api.RoleStandby, false, map[string]string{api.AnnotationCordonedBy: id,
		api.AnnotationRequest: `{"swap":"` + id + `","action":"promote","at":"2026-11-30T11:20:00Z"}`})
	for _, name := range []string{"v1", "s1"} {
		_, err := kube.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	// k3s's removal annotation, which the swap wrote for k3s to act on: k3s's.
	_, err = kube.Client.CoreV1().Nodes().Patch(ctx, "v1", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+api.AnnotationEtcdRemove+`":"true"}}}`), metav1.PatchOptions{})
	require.NoError(t, err)

	// A regrade holds the Lease: refused.
	writeControllerState(t, kube, nil, "")
	l, err := kube.Client.CoordinationV1().Leases(api.Namespace).Get(ctx, api.LeaseName, metav1.GetOptions{})
	require.NoError(t, err)
	l.Spec.HolderIdentity = ptr.To("regrade-runbook")
	_, err = kube.Client.CoordinationV1().Leases(api.Namespace).Update(ctx, l, metav1.UpdateOptions{})
	require.NoError(t, err)
	out, err = tool(t, "ansible-playbook", undeploy...)
	require.Error(t, err, out)
	assert.Contains(t, out, "Not uninstalling: the Lease fleet-role/regrade is held by regrade-runbook: a regrade is under way")

	// A swap being rolled back: refused.
	swap := &api.SwapRecord{ID: id, Out: "v1", In: "s1", Origin: api.OriginAutomatic,
		StartedAt: time.Date(2026, 11, 30, 11, 0, 0, 0, time.UTC), Phase: api.PhaseRollback}
	writeControllerState(t, kube, swap, api.StepRollback)
	out, err = tool(t, "ansible-playbook", undeploy...)
	require.Error(t, err, out)
	assert.Contains(t, out, "Not uninstalling: swap "+id+" (v1 out, s1 in, automatic) is under way at its step rollback")
	// deploy.yml too, before it changes anything, unless forced.
	out, err = tool(t, "ansible-playbook", append([]string{"deploy.yml"}, common...)...)
	require.Error(t, err, out)
	assert.Contains(t, out, "Not deploying: swap "+id+" (v1 out, s1 in, automatic) is under way at its step rollback")
	_, err = kube.Client.AppsV1().Deployments(api.Namespace).Get(ctx, "fleet-role-controller", metav1.GetOptions{})
	assert.NoError(t, err, "refused: the controller's Deployment is still there")

	// Forced: done, saying what it leaves.
	require.NotEmpty(t, clusterLeftovers(t, kube))
	out = playbook(t, append(undeploy, "-e", "force=true")...)
	assert.Positive(t, changed(t, out))
	assert.Contains(t, out, "Uninstalling anyway (force): swap "+id)
	for _, name := range []string{"s1", "v1"} {
		assert.Contains(t, out, name+" was cordoned by swap "+id+" and stays so: kubectl uncordon "+name)
		n, err := kube.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		require.NoError(t, err)
		assert.True(t, n.Spec.Unschedulable, "%s is left cordoned, for the operator", name)
	}
	v1, err := kube.Client.CoreV1().Nodes().Get(ctx, "v1", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "true", v1.Annotations[api.AnnotationEtcdRemove], "k3s's annotation stays")
	assert.Empty(t, clusterLeftovers(t, kube), "nothing of fleet-role's: the controller's objects, the Nodes' marks, s1's agent RBAC")
	assertForeignSurvive(t, kube, "v1", "s1")

	assert.Zero(t, changed(t, playbook(t, append(undeploy, "-e", "force=true")...)), "a second run changes nothing")
}

func TestTheAgentsUninstallKeepsWhatK3sNeedsAndTheBackupsUnlessAsked(t *testing.T) {
	prefix := t.TempDir()
	stageServer(t, prefix)
	dir := t.TempDir()
	play := func(tasks string) string {
		p := filepath.Join(dir, tasks+".yml")
		require.NoError(t, os.WriteFile(p, []byte(`- hosts: runner-01
  gather_facts: false
  tasks:
    - name: The agent role's `+tasks+`
      ansible.builtin.import_role:
        name: fleet_role_agent
        tasks_from: `+tasks+`.yml
`), 0o644))
		return p
	}
	// A Docker host: the cluster's token file for k3s's containers.
	args := []string{"-i", prefixInventory(t), "-e", "fleet_role_agent_prefix=" + prefix,
		"-e", "fleet_role_agent_manage_service=false", "-e", "fleet_role_agent_binary=" + binary,
		"-e", "ansible_python_interpreter=/usr/bin/python3", "-e", "fleet_role_agent_credentials=false",
		"-e", "fleet_role_agent_platform=docker", "-e", "fleet_role_agent_k3s_token=K10secret::server:0123",
		"-e", "fleet_role_agent_docker_image=" + testhost.SystemdImage}
	playbook(t, append([]string{play("main")}, args...)...)

	// What the agent writes as it runs, and k3s's own files beside it.
	const db = "/var/lib/rancher/k3s/server/db"
	const joinFile = "/etc/rancher/k3s/config.yaml.d/90-fleet-role.yaml"
	const snapshot = db + "/snapshots/fleet-role-20261130-110000-v1-1764500400"
	const moved = db + "/etcd-removed-1764500500"
	for _, p := range []string{joinFile, snapshot, db + "/snapshots/fleet-role-20261130-120000-v1-1764504000.part",
		moved + "/member/snap/db", moved + ".1/member/snap/db", "/var/lib/fleet-role/agent-state.json",
		"/var/lib/fleet-role/systemd-k3s.service.start", "/var/lib/rancher/k3s/.fleet-role-probe",
		// k3s's.
		db + "/snapshots/etcd-snapshot-v1-1764496800", db + "/etcd/member/snap/db", "/etc/rancher/k3s/config.yaml",
		"/etc/rancher/k3s/config.yaml.d/50-operator.yaml", "/etc/rancher/node/password"} {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(prefix, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(prefix, p), []byte(p), 0o600))
	}
	k3s := []string{db + "/snapshots/etcd-snapshot-v1-1764496800", db + "/etcd/member/snap/db", "/etc/rancher/k3s/config.yaml",
		"/etc/rancher/k3s/config.yaml.d/50-operator.yaml", "/etc/rancher/node/password"}

	absent := append([]string{play("absent")}, args...)
	out := playbook(t, absent...)
	assert.Positive(t, changed(t, out))
	assert.Contains(t, out, "Kept /etc/fleet-role/k3s-token: k3s's containers mount it")
	assert.Contains(t, out, "Kept /etc/rancher/k3s/config.yaml.d/90-fleet-role.yaml")
	assert.Equal(t, []string{"/etc/fleet-role", "/etc/fleet-role/k3s-token", joinFile, snapshot}, prefixLeftovers(t, prefix),
		"the token file k3s's containers mount, the drop-in, a whole snapshot; not the one cut short")
	assert.DirExists(t, filepath.Join(prefix, moved))
	assert.DirExists(t, filepath.Join(prefix, moved+".1"))
	assert.Zero(t, changed(t, playbook(t, absent...)), "a second run changes nothing")

	// Asked, the drop-in and the backups go too; k3s's files never.
	out = playbook(t, append(absent, "-e", "fleet_role_agent_remove_join_file=true", "-e", "fleet_role_agent_remove_backups=true")...)
	assert.Positive(t, changed(t, out))
	assert.Equal(t, []string{"/etc/fleet-role", "/etc/fleet-role/k3s-token"}, prefixLeftovers(t, prefix))
	assert.NoDirExists(t, filepath.Join(prefix, moved))
	assert.NoDirExists(t, filepath.Join(prefix, moved+".1"))
	for _, p := range k3s {
		assert.FileExists(t, filepath.Join(prefix, p), "k3s's")
	}
	assert.DirExists(t, filepath.Join(prefix, "/etc/rancher/k3s/config.yaml.d"), "k3s's drop-in directory")
}
