package deployment

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// makeImage builds the controller's image as make image does, and names
// it: fleet-role:<make image-tag>, its only tag.
func makeImage(t *testing.T) string {
	t.Helper()
	testhost.RequireDocker(t)
	cmd := exec.Command("make", "image", "BIN="+t.TempDir())
	cmd.Dir = testhost.Root()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), out.String())
	tag, err := exec.Command("make", "-s", "-C", testhost.Root(), "image-tag").Output()
	require.NoError(t, err)
	return "fleet-role:" + strings.TrimSpace(string(tag))
}

// apply applies fleet-role's packaged manifests (the chart's render,
// packaging/kubernetes/controller.yaml) with the Deployment's image the
// one given, as a user gives the chart's image.tag.
func apply(t *testing.T, kube *kubeapi.Server, image string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testhost.Root(), "packaging", "kubernetes", "controller.yaml"))
	require.NoError(t, err)
	const chartDefault = "image: fleet-role:unset"
	require.Contains(t, string(b), chartDefault)
	kubeapi.Apply(t, kube.Client, bytes.ReplaceAll(b, []byte(chartDefault), []byte("image: "+image)))
}

// status is the Deployment's status, as a line for a failure.
func status(d *appsv1.Deployment) string {
	s := fmt.Sprintf("generation %d observed %d: replicas %d updated %d ready %d available %d", d.Generation, d.Status.ObservedGeneration,
		d.Status.Replicas, d.Status.UpdatedReplicas, d.Status.ReadyReplicas, d.Status.AvailableReplicas)
	for _, c := range d.Status.Conditions {
		s += fmt.Sprintf("; %s=%s (%s)", c.Type, c.Status, c.Reason)
	}
	return s
}

func TestTheControllersDeploymentRunsBothReplicasUnderItsServiceAccountAndRollsThemOnATemplateChange(t *testing.T) {
	testhost.RequireDocker(t)
	image := makeImage(t)
	nw := testhost.NewNetwork(t)
	kube := kubeapi.StartOn(t, nw.Gateway)
	apply(t, kube, image)
	u, err := url.Parse(kube.URL)
	require.NoError(t, err)
	port, _ := strconv.Atoi(u.Port())
	ca, err := os.ReadFile(kube.CAFile)
	require.NoError(t, err)
	// Until every node holds the image, no replica starts: ErrImagePull.
	var held atomic.Bool
	held.Store(true)
	r := Start(t, Options{Client: kube.Client, Namespace: api.Namespace, Name: "fleet-role-controller", Network: nw.Name,
		APIHost: nw.Gateway, APIPort: port, CA: ca, Dir: t.TempDir(), VolumeSync: time.Second, Log: t.Logf,
		NodeImages: func(_ context.Context, image string) error {
			if held.Load() {
				return errors.New("not in the image store of v2")
			}
			return nil
		}})
	ctx := context.Background()
	deps := kube.Client.AppsV1().Deployments(api.Namespace)
	require.Eventually(t, func() bool { return r.Err() != nil }, time.Minute, 100*time.Millisecond)
	assert.ErrorContains(t, r.Err(), "ErrImagePull: "+image+": not in the image store of v2")
	time.Sleep(2 * time.Second)
	assert.Empty(t, r.Replicas(), "no replica while a node lacks the image")
	held.Store(false)

	// rolledOut waits for the Deployment's generation to be observed with
	// both replicas of its template ready and available.
	rolledOut := func(what string) []Replica {
		t.Helper()
		var d *appsv1.Deployment
		require.Eventually(t, func() bool {
			d, err = deps.Get(ctx, "fleet-role-controller", metav1.GetOptions{})
			require.NoError(t, err)
			return d.Status.ObservedGeneration == d.Generation && d.Status.Replicas == 2 && d.Status.UpdatedReplicas == 2 &&
				d.Status.ReadyReplicas == 2 && d.Status.AvailableReplicas == 2
		}, 2*time.Minute, 200*time.Millisecond, "%s: %s; stand-in: %v; replicas %+v", what, func() string {
			if d == nil {
				return "no deployment"
			}
			return status(d)
		}(), r.Err(), r.Replicas())
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable {
				assert.Equal(t, corev1.ConditionTrue, c.Status, "%s: Available", what)
			}
		}
		reps := r.Replicas()
		require.Len(t, reps, 2)
		hash := TemplateHash(&d.Spec.Template, d.Status.CollisionCount)
		for _, rep := range reps {
			assert.Equal(t, hash, rep.Hash, "%s: every replica is of the template", what)
		}
		return reps
	}
	first := rolledOut("the first rollout")

	// Both replicas run the controller in-cluster, as the ServiceAccount:
	// one leads (the Lease names it: its hostname is its Pod's name), and
	// it writes its status ConfigMap, which only its RBAC allows.
	leases := kube.Client.CoordinationV1().Leases(api.Namespace)
	var holder string
	require.Eventually(t, func() bool {
		l, err := leases.Get(ctx, "fleet-role-controller", metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return false
		}
		holder = *l.Spec.HolderIdentity
		return true
	}, time.Minute, 200*time.Millisecond, "a replica leads; logs:\n%s", r.Logs(first[0].Pod))
	assert.True(t, strings.HasPrefix(holder, first[0].Pod+"-") || strings.HasPrefix(holder, first[1].Pod+"-"), "the leader %s is a replica", holder)
	require.Eventually(t, func() bool {
		_, err := kube.Client.CoreV1().ConfigMaps(api.Namespace).Get(ctx, api.StatusConfigMap, metav1.GetOptions{})
		return err == nil
	}, time.Minute, 200*time.Millisecond, "the leader writes its status")

	// A changed pod template rolls both replicas.
	_, err = deps.Patch(ctx, "fleet-role-controller", types.MergePatchType,
		[]byte(`{"spec":{"template":{"metadata":{"annotations":{"fleet-role.io/config-checksum":"changed"}}}}}`), metav1.PatchOptions{})
	require.NoError(t, err)
	second := rolledOut("the rollout of a changed template")
	for _, rep := range second {
		assert.NotEqual(t, first[0].Pod, rep.Pod)
		assert.NotEqual(t, first[1].Pod, rep.Pod)
	}
	var stopped []string
	for _, s := range r.Stopped() {
		stopped = append(stopped, s.Pod)
	}
	assert.ElementsMatch(t, []string{first[0].Pod, first[1].Pod}, stopped, "the first replicas were stopped")

	// A changed ConfigMap alone reaches the mounted files; the controller
	// exits on it and is started again with it (restartPolicy Always).
	cms := kube.Client.CoreV1().ConfigMaps(api.Namespace)
	cm, err := cms.Get(ctx, "fleet-role-controller-config", metav1.GetOptions{})
	require.NoError(t, err)
	cm.Data["controller.toml"] = strings.Replace(cm.Data["controller.toml"], "dry_run = true", "dry_run = false", 1)
	_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, rep := range r.Replicas() {
			if rep.Restarts == 0 {
				return false
			}
		}
		return true
	}, time.Minute, 200*time.Millisecond, "both replicas restart on their new configuration: %+v", r.Replicas())
	third := rolledOut("after the restarts")
	assert.Equal(t, second[0].Pod, third[0].Pod, "the same replicas, restarted")
	assert.Contains(t, r.Logs(third[0].Pod), "configuration changed; exiting to start again with it")
	assert.NoError(t, r.Err())
}
