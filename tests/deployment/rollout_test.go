package deployment

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

func TestTheFencepostsAreResolvedAsTheDeploymentControllerResolvesThem(t *testing.T) {
	pct := func(s string) *intstr.IntOrString { v := intstr.FromString(s); return &v }
	num := func(n int32) *intstr.IntOrString { v := intstr.FromInt32(n); return &v }
	tests := []struct {
		name               string
		ru                 *appsv1.RollingUpdateDeployment
		desired            int
		surge, unavailable int
	}{
		{"25% of 2: a surge of 1 (rounded up), none unavailable (rounded down)", &appsv1.RollingUpdateDeployment{MaxSurge: pct("25%"), MaxUnavailable: pct("25%")}, 2, 1, 0},
		{"25% of 4: one each", &appsv1.RollingUpdateDeployment{MaxSurge: pct("25%"), MaxUnavailable: pct("25%")}, 4, 1, 1},
		{"both zero: one unavailable", &appsv1.RollingUpdateDeployment{MaxSurge: num(0), MaxUnavailable: pct("10%")}, 2, 0, 1},
		{"unavailable capped at desired", &appsv1.RollingUpdateDeployment{MaxSurge: num(0), MaxUnavailable: num(5)}, 2, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, u, err := fenceposts(tt.ru, tt.desired)
			require.NoError(t, err)
			assert.Equal(t, []int{tt.surge, tt.unavailable}, []int{s, u})
		})
	}
}

// fleet is a simulated set of replicas that become ready a pass after
// they start.
type fleet struct {
	n    int
	pods map[string]*simPod
}

type simPod struct {
	rev   string
	m     member
	since int // the pass it started
}

func (f *fleet) split(rev string) (newer, older []member) {
	for _, name := range slices.Sorted(maps.Keys(f.pods)) {
		p := f.pods[name]
		if p.rev == rev {
			newer = append(newer, p.m)
		} else {
			older = append(older, p.m)
		}
	}
	return newer, older
}

// roll runs passes of rolling until the revision alone runs desired
// replicas, all ready, checking at each pass that no more than
// desired+surge replicas run and no fewer than desired-unavailable are
// available (once there were as many); it returns the passes.
func (f *fleet) roll(t *testing.T, rev string, desired, surge, unavailable int) int {
	t.Helper()
	was := 0
	for pass := 1; pass < 50; pass++ {
		for _, p := range f.pods {
			if !p.m.ready && p.since < pass {
				p.m.ready, p.m.available = true, true
			}
		}
		newer, older := f.split(rev)
		avail := countAvailable(newer) + countAvailable(older)
		if was >= desired-unavailable {
			require.GreaterOrEqual(t, avail, desired-unavailable, "pass %d: too few available", pass)
		}
		was = max(was, avail)
		if len(older) == 0 && len(newer) == desired && countAvailable(newer) == desired {
			return pass
		}
		start, stop := rolling(desired, surge, unavailable, newer, older)
		for _, s := range stop {
			delete(f.pods, s)
		}
		for range start {
			f.n++
			name := fmt.Sprintf("%s-%d", rev, f.n)
			f.pods[name] = &simPod{rev: rev, m: member{name: name, created: time.Unix(int64(f.n), 0)}, since: pass}
		}
		require.LessOrEqual(t, len(f.pods), desired+surge, "pass %d: too many replicas", pass)
	}
	t.Fatal("the rollout does not end")
	return 0
}

func TestARollingUpdateOfTwoReplicasStartsANewOneBeforeItStopsAnOldOneAndEndsWithTwoNewOnes(t *testing.T) {
	f := &fleet{pods: map[string]*simPod{}}
	f.roll(t, "a", 2, 1, 0)
	first := slices.Collect(maps.Keys(f.pods))
	f.roll(t, "b", 2, 1, 0)
	for name, p := range f.pods {
		assert.Equal(t, "b", p.rev)
		assert.NotContains(t, first, name)
	}
}

func TestARollingUpdateWithRoomToBeUnavailableKeepsEnoughAvailable(t *testing.T) {
	f := &fleet{pods: map[string]*simPod{}}
	f.roll(t, "a", 4, 1, 1)
	f.roll(t, "b", 4, 1, 1)
	f.roll(t, "c", 3, 0, 1)
}

func TestUnavailableOldReplicasAreStoppedFirst(t *testing.T) {
	older := []member{
		{name: "old-ready", created: time.Unix(1, 0), ready: true, available: true, readySince: time.Unix(2, 0)},
		{name: "old-broken", created: time.Unix(3, 0)},
	}
	newer := []member{{name: "new", created: time.Unix(4, 0), ready: true, available: true, readySince: time.Unix(5, 0)}}
	start, stop := rolling(2, 1, 0, newer, older)
	assert.Zero(t, start)
	assert.Equal(t, []string{"old-broken"}, stop, "the broken one goes, the ready one stays for the minimum")
}

func TestRecreateStopsTheOldReplicasBeforeItStartsNewOnes(t *testing.T) {
	start, stop := recreate(2, nil, []member{{name: "a"}, {name: "b"}})
	assert.Zero(t, start)
	assert.Equal(t, []string{"a", "b"}, stop)
	start, stop = recreate(2, nil, nil)
	assert.Equal(t, 2, start)
	assert.Empty(t, stop)
}

func TestTheTemplateHashNamesTheTemplateAndChangesWithIt(t *testing.T) {
	tpl := corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	same := *tpl.DeepCopy()
	assert.Equal(t, TemplateHash(&tpl, nil), TemplateHash(&same, nil))
	assert.Regexp(t, `^[bcdfghjklmnpqrstvwxz2456789]+$`, TemplateHash(&tpl, nil), "safe to put in a name")
	changed := *tpl.DeepCopy()
	changed.Annotations = map[string]string{"fleet-role.io/config-checksum": "x"}
	assert.NotEqual(t, TemplateHash(&tpl, nil), TemplateHash(&changed, nil))
	assert.NotEqual(t, TemplateHash(&tpl, nil), TemplateHash(&tpl, ptr.To[int32](1)), "a collision count makes another")
}

// controllerTemplate is the pod template of the controller's Deployment
// in packaging/kubernetes/controller.yaml.
func controllerTemplate(t *testing.T) *corev1.PodTemplateSpec {
	b, err := os.ReadFile(filepath.Join(testhost.Root(), "packaging", "kubernetes", "controller.yaml"))
	require.NoError(t, err)
	objs, err := kubeapi.Decode(b)
	require.NoError(t, err)
	var deps []*appsv1.Deployment
	for _, o := range objs {
		if d, ok := o.(*appsv1.Deployment); ok {
			deps = append(deps, d)
		}
	}
	require.Len(t, deps, 1)
	return &deps[0].Spec.Template
}

func TestTheControllersPodTemplateIsRunAsTheKubeletWouldRunIt(t *testing.T) {
	tpl := controllerTemplate(t)
	require.NoError(t, supported(tpl))
	cfg, host, nc, err := containerConfig(tpl, "fleet-role-controller-abc-12345", "net1", apiServer{host: "10.78.1.1", port: 6443},
		podDirs{volumes: map[string]string{"config": "/v/config"}, serviceAccount: "/v/sa"}, map[string]string{"l": "1"})
	require.NoError(t, err)
	assert.Equal(t, "fleet-role:unset", cfg.Image)
	assert.Empty(t, cfg.Entrypoint, "no command: the image's entrypoint")
	assert.Equal(t, []string{"controller", "--config", "/etc/fleet-role/controller.toml"}, []string(cfg.Cmd))
	assert.Equal(t, "65532:65532", cfg.User)
	assert.Equal(t, "fleet-role-controller-abc-12345", cfg.Hostname)
	assert.Subset(t, cfg.Env, []string{"KUBERNETES_SERVICE_HOST=10.78.1.1", "KUBERNETES_SERVICE_PORT=6443"})
	assert.True(t, host.ReadonlyRootfs)
	assert.Equal(t, []string{"ALL"}, []string(host.CapDrop))
	assert.Contains(t, host.SecurityOpt, "no-new-privileges:true")
	assert.Equal(t, int64(256<<20), host.Memory)
	assert.Equal(t, []string{"/v/config:/etc/fleet-role:ro", "/v/sa:" + ServiceAccountDir + ":ro"}, host.Binds)
	assert.Equal(t, "always", string(host.RestartPolicy.Name))
	assert.Equal(t, 30, *cfg.StopTimeout, "the default grace period")
	assert.Contains(t, nc.EndpointsConfig, "net1")
}

func TestWhatTheStandInCannotRunIsAnErrorNamingIt(t *testing.T) {
	tpl := controllerTemplate(t)
	tpl.Spec.Containers = append(tpl.Spec.Containers, tpl.Spec.Containers[0])
	tpl.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{}}}
	tpl.Spec.Volumes = append(tpl.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	err := supported(tpl)
	require.Error(t, err)
	for _, want := range []string{"2 containers", "env[X].valueFrom", "volumes[data]"} {
		assert.Contains(t, err.Error(), want)
	}
}

func TestAVolumeIsWrittenAtomicallyAndItsRemovedKeysGo(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, writeAtomically(dir, map[string]fileData{"a": {[]byte("1"), 0o644}, "b": {[]byte("2"), 0o644}}))
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "<" + err.Error() + ">"
		}
		return string(b)
	}
	assert.Equal(t, "1", read("a"))
	first, err := os.Readlink(filepath.Join(dir, "..data"))
	require.NoError(t, err)
	link, err := os.Readlink(filepath.Join(dir, "a"))
	require.NoError(t, err)
	assert.Equal(t, "..data/a", link, "a key is a link into ..data")

	require.NoError(t, writeAtomically(dir, map[string]fileData{"a": {[]byte("3"), 0o644}}))
	assert.Equal(t, "3", read("a"))
	assert.NoFileExists(t, filepath.Join(dir, "b"), "a key no longer there goes")
	second, err := os.Readlink(filepath.Join(dir, "..data"))
	require.NoError(t, err)
	assert.NotEqual(t, first, second)
	assert.NoDirExists(t, filepath.Join(dir, first), "the old data goes")
	fi, err := os.Stat(filepath.Join(dir, second))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm(), "others may read it")
}
