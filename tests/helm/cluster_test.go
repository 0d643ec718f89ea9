package helm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/helm"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

var binary string

func TestMain(m *testing.M) {
	os.Exit(testhost.RunWithFleetRole(m, &binary))
}

// install applies a render to a fresh API server, as helm install would
// create its objects, and reads them back.
func install(t *testing.T, values map[string]any) (*kubeapi.Server, *appsv1.Deployment) {
	t.Helper()
	kube := kubeapi.Start(t)
	b, _ := render(t, api.Namespace, values)
	kubeapi.Apply(t, kube.Client, b)
	dep, err := kube.Client.AppsV1().Deployments(api.Namespace).Get(context.Background(), "fleet-role-controller", metav1.GetOptions{})
	require.NoError(t, err, "the API server takes the Deployment")
	return kube, dep
}

func TestTheControllersPodsAreAdmittedUnderTheRestrictedPodSecurityProfile(t *testing.T) {
	kube, dep := install(t, packagedValues)
	ctx := context.Background()
	tpl := dep.Spec.Template.Spec
	require.NotNil(t, tpl.SecurityContext.RunAsNonRoot)
	assert.True(t, *tpl.SecurityContext.RunAsNonRoot)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, tpl.SecurityContext.SeccompProfile.Type)
	sc := tpl.Containers[0].SecurityContext
	assert.True(t, *sc.ReadOnlyRootFilesystem)
	assert.False(t, *sc.AllowPrivilegeEscalation)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)

	// The API server's PodSecurity admission judges a Pod of the template
	// in a namespace that enforces the restricted profile.
	ns, err := kube.Client.CoreV1().Namespaces().Get(ctx, api.Namespace, metav1.GetOptions{})
	require.NoError(t, err)
	ns.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	_, err = kube.Client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
	require.NoError(t, err)
	pod := func(name string, spec corev1.PodSpec) error {
		_, err := kube.Client.CoreV1().Pods(api.Namespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: dep.Spec.Template.Labels}, Spec: spec}, metav1.CreateOptions{})
		return err
	}
	assert.NoError(t, pod("controller", *tpl.DeepCopy()), "the controller's Pod is admitted")
	loose := tpl.DeepCopy()
	loose.Containers[0].SecurityContext.AllowPrivilegeEscalation = nil
	err = pod("loose", *loose)
	assert.True(t, apierrors.IsForbidden(err), "the profile is enforced: %v", err)
}

// access is who may use the CLI in these tests.
var access = map[string]any{"namespace": map[string]any{"create": true}, "access": map[string]any{
	"operators": []any{map[string]any{"kind": "User", "name": "olivia", "apiGroup": "rbac.authorization.k8s.io"}},
	"viewers":   []any{map[string]any{"kind": "User", "name": "victor", "apiGroup": "rbac.authorization.k8s.io"}},
}}

// allowed asks the API server whether user may do what attrs say.
func allowed(t *testing.T, c kubernetes.Interface, user string, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	r, err := c.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:authenticated"}, ResourceAttributes: &attrs},
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	return r.Status.Allowed
}

func TestTheOperatorAndViewerRolesAllowWhatTheCLIDoesAndNothingMore(t *testing.T) {
	kube, _ := install(t, access)
	ns, leases := api.Namespace, api.NodeLeaseNamespace
	type check struct {
		verb, group, resource, namespace, name string
		operator, viewer                       bool
	}
	for _, c := range []check{
		// swap and swap --cancel read the cluster as a pass does...
		{"list", "", "nodes", "", "", true, false},
		{"get", "", "nodes", "", "a1", true, false},
		{"list", "coordination.k8s.io", "leases", leases, "", true, false},
		{"get", "coordination.k8s.io", "leases", ns, api.LeaseName, true, false},
		// ...and write their request, cancel or pause into the status.
		{"get", "", "configmaps", ns, api.StatusConfigMap, true, true},
		{"update", "", "configmaps", ns, api.StatusConfigMap, true, false},
		{"create", "", "configmaps", ns, "", true, false},
		// Nothing the controller alone does.
		{"patch", "", "nodes", "", "a1", false, false},
		{"update", "coordination.k8s.io", "leases", ns, api.LeaseName, false, false},
		{"get", "coordination.k8s.io", "leases", ns, "fleet-role-controller", false, false},
		{"list", "coordination.k8s.io", "leases", ns, "", false, false},
		{"delete", "", "configmaps", ns, api.StatusConfigMap, false, false},
		{"update", "", "configmaps", ns, "fleet-role-controller-config", false, false},
		{"get", "", "configmaps", ns, "fleet-role-controller-config", false, false},
		{"list", "", "configmaps", ns, "", false, false},
		{"get", "", "configmaps", "kube-system", api.StatusConfigMap, false, false},
		{"get", "", "secrets", ns, "any", false, false},
		{"create", "", "pods/eviction", "apps", "web", false, false},
		{"update", "apps", "deployments", ns, "fleet-role-controller", false, false},
	} {
		attrs := authorizationv1.ResourceAttributes{Verb: c.verb, Group: c.group, Resource: c.resource, Namespace: c.namespace, Name: c.name}
		if sub, ok := strings.CutPrefix(c.resource, "pods/"); ok {
			attrs.Resource, attrs.Subresource = "pods", sub
		}
		assert.Equal(t, c.operator, allowed(t, kube.Client, "olivia", attrs), "operator: %+v", c)
		assert.Equal(t, c.viewer, allowed(t, kube.Client, "victor", attrs), "viewer: %+v", c)
		assert.False(t, allowed(t, kube.Client, "mallory", attrs), "nobody else: %+v", c)
	}

	// The CLI itself, as each of them.
	dir := t.TempDir()
	cli := func(user string, args ...string) (string, error) {
		t.Helper()
		kc := filepath.Join(dir, user+".kubeconfig")
		require.NoError(t, kube.WriteImpersonatingKubeconfig(kc, user))
		out, err := exec.Command(binary, append(args, "--kubeconfig", kc)...).CombinedOutput()
		return string(out), err
	}
	out, err := cli("olivia", "pause", "--reason", "maintenance")
	require.NoError(t, err, "an operator pauses before any status: %s", out)
	cm, err := kube.Client.CoreV1().ConfigMaps(ns).Get(context.Background(), api.StatusConfigMap, metav1.GetOptions{})
	require.NoError(t, err)
	assert.Contains(t, cm.Data[api.PauseKey], "maintenance", "the pause is written")
	out, err = cli("victor", "status")
	require.NoError(t, err, "a viewer reads the status: %s", out)
	out, err = cli("victor", "resume")
	require.Error(t, err, "a viewer does not resume: %s", out)
	assert.Contains(t, out, "forbidden")
	out, err = cli("olivia", "resume")
	require.NoError(t, err, "an operator resumes: %s", out)
	out, err = cli("mallory", "status")
	require.Error(t, err, "nobody else reads the status: %s", out)
	assert.Contains(t, out, "forbidden")
}

func TestTwoReleasesInstallSideBySideEachBindingItsOwnAccount(t *testing.T) {
	kube := kubeapi.Start(t)
	ctx := context.Background()
	for _, r := range []struct{ name, namespace string }{{"fleet-role", api.Namespace}, {"blue", "blue"}} {
		values := map[string]any{"namespace": map[string]any{"create": true}, "access": access["access"]}
		rel, objs := renderRelease(t, r.name, r.namespace, values)
		kubeapi.Apply(t, kube.Client, rel.Manifests)
		for _, o := range objs {
			if b, ok := o.(*rbacv1.ClusterRoleBinding); ok {
				got, err := kube.Client.RbacV1().ClusterRoleBindings().Get(ctx, b.Name, metav1.GetOptions{})
				require.NoError(t, err)
				assert.Equal(t, b.Subjects, got.Subjects, "%s is the release %s's own", b.Name, r.name)
			}
		}
	}
	roles, err := kube.Client.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=fleet-role"})
	require.NoError(t, err)
	assert.Len(t, roles.Items, 6, "each release's three ClusterRoles, none shared")
	// Each controller may do what it does in its own namespace only.
	for _, c := range []struct {
		account, namespace string
		allowed            bool
	}{
		{"system:serviceaccount:fleet-role:fleet-role-controller", api.Namespace, true},
		{"system:serviceaccount:blue:blue-fleet-role-controller", "blue", true},
		{"system:serviceaccount:blue:blue-fleet-role-controller", api.Namespace, false},
	} {
		attrs := authorizationv1.ResourceAttributes{Verb: "update", Resource: "configmaps", Namespace: c.namespace, Name: api.StatusConfigMap}
		assert.Equal(t, c.allowed, allowed(t, kube.Client, c.account, attrs), "%+v", c)
	}
}

func TestHelmTestsPodIsAdmittedUnderTheRestrictedProfileAndMayReadTheStatus(t *testing.T) {
	kube, _ := install(t, packagedValues)
	ctx := context.Background()
	ns, err := kube.Client.CoreV1().Namespaces().Get(ctx, api.Namespace, metav1.GetOptions{})
	require.NoError(t, err)
	ns.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	_, err = kube.Client.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{})
	require.NoError(t, err)
	r, _ := renderRelease(t, helm.ReleaseName, api.Namespace, packagedValues)
	hooks, err := kubeapi.Decode(r.Hooks)
	require.NoError(t, err)
	require.Len(t, hooks, 1)
	pod := hooks[0].(*corev1.Pod)
	_, err = kube.Client.CoreV1().Pods(api.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err, "the API server admits helm test's Pod")
	account := "system:serviceaccount:" + api.Namespace + ":" + pod.Spec.ServiceAccountName
	assert.True(t, allowed(t, kube.Client, account, authorizationv1.ResourceAttributes{
		Verb: "get", Resource: "configmaps", Namespace: api.Namespace, Name: api.StatusConfigMap}), "its account reads the status, as fleet-role status does")
}

// runPod runs a Pod's one container as a kubelet would, here with no
// kubelet: the fleet-role binary (the image's) with the container's
// arguments, the files of its ConfigMap volumes where it mounts them, as
// the Pod's ServiceAccount. It returns the output and the exit code.
func runPod(ctx context.Context, kube *kubeapi.Server, pod *corev1.Pod) (string, int, error) {
	if len(pod.Spec.Containers) != 1 {
		return "", 0, fmt.Errorf("pod %s: %d containers, want 1", pod.Name, len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	dir, err := os.MkdirTemp("", "fleet-role-pod-")
	if err != nil {
		return "", 0, err
	}
	defer os.RemoveAll(dir)
	args := slices.Clone(c.Args)
	for _, m := range c.VolumeMounts {
		for _, v := range pod.Spec.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			cm, err := kube.Client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				return "", 0, fmt.Errorf("the volume %s's ConfigMap: %w", v.Name, err)
			}
			at := filepath.Join(dir, m.Name)
			if err := os.MkdirAll(at, 0o755); err != nil {
				return "", 0, err
			}
			for k, data := range cm.Data {
				if err := os.WriteFile(filepath.Join(at, k), []byte(data), 0o644); err != nil {
					return "", 0, err
				}
			}
			for i, a := range args {
				if rest, ok := strings.CutPrefix(a, m.MountPath+"/"); ok {
					args[i] = filepath.Join(at, rest)
				}
			}
		}
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := kube.WriteImpersonatingKubeconfig(kc, "system:serviceaccount:"+pod.Namespace+":"+pod.Spec.ServiceAccountName); err != nil {
		return "", 0, err
	}
	out, err := exec.CommandContext(ctx, binary, append(args, "--kubeconfig", kc)...).CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(out), ee.ExitCode(), nil
	}
	return string(out), 0, err
}

// kubelet plays the kubelet for helm test's Pods in namespace until ctx
// ends: each Pod created Pending is run (runPod) and its phase set by how
// its command exited, as a kubelet reports a container that ran to its
// end.
func kubelet(ctx context.Context, t *testing.T, kube *kubeapi.Server, namespace string) {
	w, err := kube.Client.CoreV1().Pods(namespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("watch the Pods: %v", err)
		return
	}
	defer w.Stop()
	for e := range w.ResultChan() {
		pod, ok := e.Object.(*corev1.Pod)
		if !ok || e.Type != watch.Added || pod.Status.Phase != "" && pod.Status.Phase != corev1.PodPending {
			continue
		}
		out, code, err := runPod(ctx, kube, pod)
		if err != nil {
			t.Errorf("run the Pod %s: %v", pod.Name, err)
			return
		}
		t.Logf("pod %s exited %d: %s", pod.Name, code, out)
		pod.Status.Phase = corev1.PodSucceeded
		if code != 0 {
			pod.Status.Phase = corev1.PodFailed
		}
		if _, err := kube.Client.CoreV1().Pods(namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
			t.Errorf("the Pod %s's status: %v", pod.Name, err)
			return
		}
	}
}

func TestHelmTestFailsWhileNoStatusIsPublishedAndPassesOnceOneIs(t *testing.T) {
	kube := kubeapi.Start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := api.Namespace
	getter := genericclioptions.NewConfigFlags(false)
	getter.KubeConfig, getter.Namespace = &kube.Kubeconfig, &ns
	cfg := new(action.Configuration)
	require.NoError(t, cfg.Init(getter, ns, "secret", t.Logf))
	ch, err := loader.Load(helm.ChartDir())
	require.NoError(t, err)
	install := action.NewInstall(cfg)
	install.ReleaseName, install.Namespace, install.CreateNamespace = helm.ReleaseName, ns, true // helm install --create-namespace
	_, err = install.Run(ch, helm.WithTag(nil))
	require.NoError(t, err, "helm install")
	go kubelet(ctx, t, kube, ns)

	test := action.NewReleaseTesting(cfg)
	// The Pod runs as soon as it is created (kubelet here); a minute is
	// Helm's wait's outer limit on a busy machine.
	test.Namespace, test.Timeout = ns, time.Minute
	_, err = test.Run(helm.ReleaseName)
	require.Error(t, err, "no controller has published a status")
	assert.Contains(t, err.Error(), "failed")

	st, err := json.Marshal(api.Status{Voters: []string{"v1", "v2", "v3"}, UpdatedAt: time.Now().UTC()})
	require.NoError(t, err)
	_, err = kube.Client.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: api.StatusConfigMap},
		Data:       map[string]string{api.StatusKey: string(st)}}, metav1.CreateOptions{})
	require.NoError(t, err)
	rel, err := test.Run(helm.ReleaseName)
	require.NoError(t, err, "helm test")
	require.Len(t, rel.Hooks, 1)
	assert.Equal(t, "Succeeded", string(rel.Hooks[0].LastRun.Phase))
}
