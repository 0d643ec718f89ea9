package main

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// places is a machine with no cluster anywhere yet: a home of its own, no
// KUBECONFIG, k3s's kubeconfig at a path of the test's, not in a Pod.
type places struct {
	dir, home, k3s string
}

func noCluster(t *testing.T) places {
	t.Helper()
	p := places{dir: t.TempDir()}
	p.home = filepath.Join(p.dir, "home")
	p.k3s = filepath.Join(p.dir, "etc-rancher-k3s", "k3s.yaml")
	require.NoError(t, os.MkdirAll(p.home, 0o755))
	t.Setenv("HOME", p.home)
	t.Setenv("KUBECONFIG", "")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	old := k3sKubeconfig
	k3sKubeconfig = p.k3s
	t.Cleanup(func() { k3sKubeconfig = old })
	return p
}

// kubeconfig writes a kubeconfig at path whose one context, named name,
// reaches server.
func kubeconfig(t *testing.T, path, name, server string) string {
	t.Helper()
	c := clientcmdapi.NewConfig()
	c.Clusters[name] = &clientcmdapi.Cluster{Server: server}
	c.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: "token-" + name}
	c.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name}
	c.CurrentContext = name
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, clientcmd.WriteToFile(*c, path))
	return path
}

func (p places) homeConfig() string { return filepath.Join(p.home, ".kube", "config") }

func TestFindClusterLooksWhereKubectlLooksThenAtK3sThenInCluster(t *testing.T) {
	type setup func(t *testing.T, p places) (explicit string)
	explicitFile := func(t *testing.T, p places) string {
		return kubeconfig(t, filepath.Join(p.dir, "explicit.yaml"), "explicit", "https://explicit.example:6443")
	}
	listed := func(t *testing.T, p places) {
		a := kubeconfig(t, filepath.Join(p.dir, "a.yaml"), "a", "https://a.example:6443")
		b := kubeconfig(t, filepath.Join(p.dir, "b.yaml"), "b", "https://b.example:6443")
		t.Setenv("KUBECONFIG", strings.Join([]string{filepath.Join(p.dir, "missing.yaml"), a, b}, string(filepath.ListSeparator)))
	}
	home := func(t *testing.T, p places) { kubeconfig(t, p.homeConfig(), "home", "https://home.example:6443") }
	k3s := func(t *testing.T, p places) { kubeconfig(t, p.k3s, "default", "https://127.0.0.1:6443") }
	for _, tc := range []struct {
		name   string
		setup  setup
		server string
	}{
		{"--kubeconfig comes before everything else", func(t *testing.T, p places) string {
			listed(t, p)
			home(t, p)
			k3s(t, p)
			return explicitFile(t, p)
		}, "https://explicit.example:6443"},
		{"KUBECONFIG comes before ~/.kube/config, its files merged and the first's context current", func(t *testing.T, p places) string {
			listed(t, p)
			home(t, p)
			k3s(t, p)
			return ""
		}, "https://a.example:6443"},
		{"~/.kube/config comes before k3s's kubeconfig", func(t *testing.T, p places) string {
			home(t, p)
			k3s(t, p)
			return ""
		}, "https://home.example:6443"},
		{"k3s's kubeconfig is used when kubectl's places hold nothing", func(t *testing.T, p places) string {
			k3s(t, p)
			return ""
		}, "https://127.0.0.1:6443"},
		{"a KUBECONFIG whose files are all missing is passed by", func(t *testing.T, p places) string {
			home(t, p) // not looked at: KUBECONFIG is set
			k3s(t, p)
			t.Setenv("KUBECONFIG", filepath.Join(p.dir, "missing.yaml"))
			return ""
		}, "https://127.0.0.1:6443"},
		{"an empty ~/.kube/config is passed by", func(t *testing.T, p places) string {
			require.NoError(t, os.MkdirAll(filepath.Dir(p.homeConfig()), 0o755))
			require.NoError(t, os.WriteFile(p.homeConfig(), nil, 0o600))
			k3s(t, p)
			return ""
		}, "https://127.0.0.1:6443"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := noCluster(t)
			explicit := tc.setup(t, p)
			rc, err := findCluster(explicit, "")
			require.NoError(t, err)
			assert.Equal(t, tc.server, rc.Host)
		})
	}
}

func TestFindClusterMergesTheKubeconfigListAsKubectlDoes(t *testing.T) {
	p := noCluster(t)
	// The first file names the current context; only the second defines it.
	first := clientcmdapi.NewConfig()
	first.CurrentContext = "b"
	path := filepath.Join(p.dir, "first.yaml")
	require.NoError(t, clientcmd.WriteToFile(*first, path))
	second := kubeconfig(t, filepath.Join(p.dir, "second.yaml"), "b", "https://b.example:6443")
	t.Setenv("KUBECONFIG", path+string(filepath.ListSeparator)+second)
	rc, err := findCluster("", "")
	require.NoError(t, err)
	assert.Equal(t, "https://b.example:6443", rc.Host)
	assert.Equal(t, "token-b", rc.BearerToken)
}

func TestFindClusterSaysEachPlaceItTriedAndWhyNot(t *testing.T) {
	p := noCluster(t)
	_, err := findCluster("", "")
	require.ErrorIs(t, err, errNoCluster)
	assert.Equal(t, "no cluster to reach; tried --kubeconfig: not given; KUBECONFIG: not set; "+
		p.homeConfig()+": no such file; "+p.k3s+": no such file; "+
		"in-cluster: not in a Pod (KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set)", err.Error())

	list := filepath.Join(p.dir, "x.yaml") + string(filepath.ListSeparator) + filepath.Join(p.dir, "y.yaml")
	t.Setenv("KUBECONFIG", list)
	_, err = findCluster("", "")
	require.ErrorIs(t, err, errNoCluster)
	assert.Contains(t, err.Error(), "tried KUBECONFIG="+list+": none of its files exists; "+p.k3s+": no such file; in-cluster: ")
}

func TestFindClusterStopsAtAPlaceThatIsThereButBroken(t *testing.T) {
	t.Run("a missing --kubeconfig is an error, not a reason to look elsewhere", func(t *testing.T) {
		p := noCluster(t)
		kubeconfig(t, p.homeConfig(), "home", "https://home.example:6443")
		missing := filepath.Join(p.dir, "missing.yaml")
		_, err := findCluster(missing, "")
		require.Error(t, err)
		assert.NotErrorIs(t, err, errNoCluster)
		assert.Contains(t, err.Error(), "--kubeconfig "+missing+": ")
		assert.ErrorIs(t, err, fs.ErrNotExist)
	})
	t.Run("an empty --kubeconfig is an error", func(t *testing.T) {
		p := noCluster(t)
		kubeconfig(t, p.k3s, "default", "https://127.0.0.1:6443")
		empty := filepath.Join(p.dir, "empty.yaml")
		require.NoError(t, os.WriteFile(empty, nil, 0o600))
		_, err := findCluster(empty, "")
		require.EqualError(t, err, "--kubeconfig "+empty+": no configuration in it")
	})
	t.Run("a ~/.kube/config that does not parse is an error naming it", func(t *testing.T) {
		p := noCluster(t)
		kubeconfig(t, p.k3s, "default", "https://127.0.0.1:6443")
		require.NoError(t, os.MkdirAll(filepath.Dir(p.homeConfig()), 0o755))
		require.NoError(t, os.WriteFile(p.homeConfig(), []byte("apiVersion: v1\nkind: Config\nclusters: {not: a list}\n"), 0o600))
		_, err := findCluster("", "")
		require.Error(t, err)
		assert.True(t, strings.HasPrefix(err.Error(), p.homeConfig()+": "), err.Error())
	})
	t.Run("a ~/.kube/config with no current context is an error naming it", func(t *testing.T) {
		p := noCluster(t)
		kubeconfig(t, p.k3s, "default", "https://127.0.0.1:6443")
		c := clientcmdapi.NewConfig()
		c.Clusters["home"] = &clientcmdapi.Cluster{Server: "https://home.example:6443"}
		require.NoError(t, os.MkdirAll(filepath.Dir(p.homeConfig()), 0o755))
		require.NoError(t, clientcmd.WriteToFile(*c, p.homeConfig()))
		_, err := findCluster("", "")
		require.EqualError(t, err, p.homeConfig()+": no current context, or its cluster has no server")
	})
	t.Run("a broken k3s kubeconfig is an error naming it", func(t *testing.T) {
		p := noCluster(t)
		require.NoError(t, os.MkdirAll(filepath.Dir(p.k3s), 0o755))
		require.NoError(t, os.WriteFile(p.k3s, []byte("clusters: 7\n"), 0o600))
		_, err := findCluster("", "")
		require.Error(t, err)
		assert.True(t, strings.HasPrefix(err.Error(), p.k3s+": "), err.Error())
	})
}

func TestFindClusterPassesByAK3sKubeconfigThisUserCannotRead(t *testing.T) {
	if os.Geteuid() == 0 {
		asNobody(t)
		return
	}
	p := noCluster(t)
	kubeconfig(t, p.k3s, "default", "https://127.0.0.1:6443")
	require.NoError(t, os.Chmod(p.k3s, 0o000))
	_, err := findCluster("", "")
	require.ErrorIs(t, err, errNoCluster)
	assert.Contains(t, err.Error(), p.k3s+": not readable by this user; in-cluster: ")
}

func TestWhyNotSaysBrieflyWhyAFileCouldNotBeOpened(t *testing.T) {
	_, err := os.Open(filepath.Join(t.TempDir(), "missing"))
	assert.Equal(t, "no such file", whyNot(err))
	assert.Equal(t, "not readable by this user", whyNot(&fs.PathError{Op: "open", Path: "/etc/rancher/k3s/k3s.yaml", Err: fs.ErrPermission}))
	assert.Equal(t, "boom", whyNot(errors.New("boom")))
}

func TestACommandWithNoClusterExits1NamingThePlacesTried(t *testing.T) {
	p := noCluster(t)
	code, _, stderr := runCLI(t, "status")
	assert.Equal(t, 1, code)
	for _, place := range []string{"--kubeconfig", "KUBECONFIG", p.homeConfig(), p.k3s, "in-cluster"} {
		assert.Contains(t, stderr, place)
	}
}

// asNobody runs the test again, alone, in a copy of the test binary as
// the user nobody (setpriv, util-linux): root reads a file of any mode.
func asNobody(t *testing.T) {
	t.Helper()
	setpriv, err := exec.LookPath("setpriv")
	require.NoError(t, err, "setpriv (util-linux) runs the test as nobody")
	dir, err := os.MkdirTemp("", "as-nobody")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o1777))
	self, err := os.ReadFile(os.Args[0])
	require.NoError(t, err)
	bin := filepath.Join(dir, "cluster.test")
	require.NoError(t, os.WriteFile(bin, self, 0o755))
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", bin, "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "TMPDIR="+dir, "HOME="+dir)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "--- PASS: "+t.Name(), "%s", out)
	assert.NotContains(t, string(out), "--- SKIP", "%s", out)
}

// The controller finds a swap's outgoing voter's apiserver at its Node's
// InternalIP, k3s's port; a Node it cannot read is asked again later.
func TestANodesApiserverIsItsInternalIPAtK3sPortAndANodeNotFoundIsAskedAgain(t *testing.T) {
	client := k8sfake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "v1"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "v1"}, {Type: corev1.NodeInternalIP, Address: "10.0.0.1"}}}})
	n := &nodeAddresses{client: client, known: map[string]string{}}
	assert.Equal(t, "10.0.0.1:6443", n.address("v1"))
	assert.Empty(t, n.address("v2"))
	_, err := client.CoreV1().Nodes().Create(context.Background(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "v2"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "fd00::2"}}}}, metav1.CreateOptions{})
	require.NoError(t, err)
	assert.Equal(t, "[fd00::2]:6443", n.address("v2"))
}
