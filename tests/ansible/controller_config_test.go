package ansible_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
)

// controllerArgs are the arguments of a run of the controller role
// against api, from this machine, not waiting for the Deployment (no
// controller-manager runs beside the test's API server).
func controllerArgs(t *testing.T, kube *kubeapi.Server) []string {
	t.Helper()
	dir := t.TempDir()
	inv := filepath.Join(dir, "inventory.yml")
	require.NoError(t, os.WriteFile(inv, []byte(`all:
  children:
    fleet_servers:
      hosts:
        runner-01: {ansible_host: 10.0.0.1}
`), 0o644))
	play := controllerPlay(t)
	return []string{"-i", inv, play, "-e", "fleet_role_controller_kubeconfig=" + kube.Kubeconfig, "-e", "fleet_role_controller_binary=" + binary, "-e", "fleet_role_controller_helm=" + helmBinary,
		"-e", "fleet_role_controller_wait=false", "-e", "ansible_python_interpreter=/usr/bin/python3"}
}

// deployed is what the cluster holds of the controller after a run.
type deployed struct {
	dep      *appsv1.Deployment
	data     string // the ConfigMap's controller.toml
	cfg      config.Controller
	checksum string // the pod template's
}

func readDeployed(t *testing.T, kube *kubeapi.Server) deployed {
	t.Helper()
	ctx := context.Background()
	dep, err := kube.Client.AppsV1().Deployments(api.Namespace).Get(ctx, "fleet-role-controller", metav1.GetOptions{})
	require.NoError(t, err)
	cm, err := kube.Client.CoreV1().ConfigMaps(api.Namespace).Get(ctx, "fleet-role-controller-config", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, []string{"controller.toml"}, keys(cm.Data), "the checksum is of the ConfigMap's one key")
	c, err := config.ParseController([]byte(cm.Data["controller.toml"]))
	require.NoError(t, err)
	return deployed{dep: dep, data: cm.Data["controller.toml"], cfg: c,
		checksum: dep.Spec.Template.Annotations[api.AnnotationConfigChecksum]}
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// templateWithout is the Deployment's pod template without its checksum.
func templateWithout(d *appsv1.Deployment) any {
	tpl := d.Spec.Template.DeepCopy()
	delete(tpl.Annotations, api.AnnotationConfigChecksum)
	return tpl
}

func TestAChangedControllerConfigurationRollsTheControllersPodsAnUnchangedOneChangesNothingAndARunWithoutDryRunKeepsTheClusters(t *testing.T) {
	kube := kubeapi.Start(t)
	args := controllerArgs(t, kube)

	// Deployed with the dry run on, as it is by default.
	assert.Positive(t, changed(t, playbook(t, args...)))
	first := readDeployed(t, kube)
	assert.True(t, first.cfg.DryRun)
	require.NotEmpty(t, first.checksum, "the pod template carries the configuration's checksum")
	assert.Equal(t, sha256Hex(first.data), first.checksum, "the checksum is the sha256 of what the ConfigMap holds: %q", first.data)

	// -e dry_run=false: the ConfigMap says so and the pod template
	// changes with it, so the Deployment rolls its Pods.
	dryRunOff := append(args[:len(args):len(args)], "-e", "dry_run=false")
	assert.Positive(t, changed(t, playbook(t, dryRunOff...)))
	second := readDeployed(t, kube)
	assert.False(t, second.cfg.DryRun)
	assert.Equal(t, sha256Hex(second.data), second.checksum)
	assert.NotEqual(t, first.checksum, second.checksum, "a changed configuration changes the pod template")
	assert.Greater(t, second.dep.Generation, first.dep.Generation, "the Deployment's spec changed: a rollout")
	assert.Equal(t, templateWithout(first.dep), templateWithout(second.dep), "and nothing else of the pod template did")

	// The same run again changes nothing, and rolls nothing.
	assert.Zero(t, changed(t, playbook(t, dryRunOff...)), "a third run changes nothing")
	third := readDeployed(t, kube)
	assert.Equal(t, second.checksum, third.checksum)
	assert.Equal(t, second.dep.Generation, third.dep.Generation, "no rollout")

	// A run without -e dry_run (to add a host, to upgrade) keeps the dry
	// run the cluster has: off, nothing changed, nothing rolled.
	assert.Zero(t, changed(t, playbook(t, args...)), "a run without -e dry_run keeps the dry run off")
	kept := readDeployed(t, kube)
	assert.False(t, kept.cfg.DryRun)
	assert.Equal(t, second.dep.Generation, kept.dep.Generation, "no rollout")

	// The checksum is of the content alone: back to the dry run, back to
	// the first checksum.
	assert.Positive(t, changed(t, playbook(t, append(args[:len(args):len(args)], "-e", "dry_run=true")...)))
	assert.Equal(t, first.checksum, readDeployed(t, kube).checksum)
}
