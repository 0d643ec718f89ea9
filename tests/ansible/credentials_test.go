package ansible_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
)

// credentialsFleet is two hosts of a fleet of three servers, each the
// machine Ansible runs on, each in a prefix of its own.
type credentialsFleet struct {
	t      *testing.T
	api    *kubeapi.Server
	prefix map[string]string
	args   []string
}

func newCredentialsFleet(t *testing.T, kube *kubeapi.Server) *credentialsFleet {
	dir := t.TempDir()
	f := &credentialsFleet{t: t, api: kube, prefix: map[string]string{}}
	var hosts strings.Builder
	for i, h := range []string{"runner-01", "runner-02", "runner-03"} {
		f.prefix[h] = filepath.Join(dir, h)
		stageServer(t, f.prefix[h])
		fmt.Fprintf(&hosts, "        %s: {ansible_connection: local, ansible_host: 10.0.0.%d, fleet_role_agent_prefix: %s}\n", h, i+1, f.prefix[h])
	}
	inv := filepath.Join(dir, "inventory.yml")
	require.NoError(t, os.WriteFile(inv, []byte("all:\n  children:\n    fleet_servers:\n      hosts:\n"+hosts.String()), 0o644))
	play := filepath.Join(dir, "agent.yml")
	require.NoError(t, os.WriteFile(play, []byte(`- hosts: runner-01:runner-02
  gather_facts: false
  roles:
    - role: fleet_role_agent
`), 0o644))
	f.args = []string{"-i", inv, play, "-e", "fleet_role_agent_manage_service=false", "-e", "fleet_role_agent_binary=" + binary,
		"-e", "ansible_python_interpreter=/usr/bin/python3"}
	if kube != nil {
		f.args = append(f.args, "-e", "fleet_role_agent_admin_kubeconfig="+kube.Kubeconfig, "-e", "fleet_role_agent_api_server="+kube.URL)
	}
	return f
}

func (f *credentialsFleet) run(extra ...string) string {
	f.t.Helper()
	return playbook(f.t, append(append([]string(nil), f.args...), extra...)...)
}

func (f *credentialsFleet) path(host, p string) string { return filepath.Join(f.prefix[host], p) }

func (f *credentialsFleet) token(host string) string {
	f.t.Helper()
	b, err := os.ReadFile(f.path(host, "/var/lib/fleet-role/token"))
	require.NoError(f.t, err)
	return string(b)
}

// client is the host's agent's client, from the kubeconfig the role wrote
// (its token file found in the host's prefix).
func (f *credentialsFleet) client(host string) kubernetes.Interface {
	f.t.Helper()
	kc, err := clientcmd.LoadFromFile(f.path(host, "/etc/fleet-role/kubeconfig"))
	require.NoError(f.t, err)
	for _, u := range kc.AuthInfos {
		u.TokenFile = f.path(host, u.TokenFile)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*kc, nil).ClientConfig()
	require.NoError(f.t, err)
	c, err := kubernetes.NewForConfig(rc)
	require.NoError(f.t, err)
	return c
}

func claimsOf(t *testing.T, token string) jwt.MapClaims {
	t.Helper()
	c := jwt.MapClaims{}
	_, _, err := jwt.NewParser().ParseUnverified(token, c)
	require.NoError(t, err)
	return c
}

func TestTheAgentRoleMakesEachHostsCredentialsOnTheRealAPIServerAndLeavesAFreshTokenAlone(t *testing.T) {
	kube := kubeapi.Start(t)
	ctx := context.Background()
	for _, n := range []string{"runner-01", "runner-02"} {
		_, err := kube.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	f := newCredentialsFleet(t, kube)

	// Check mode on a fresh cluster: a server-side dry run, nothing kept.
	out := f.run("--check")
	assert.Positive(t, changed(t, out))
	_, err := kube.Client.CoreV1().ServiceAccounts(api.Namespace).Get(ctx, "fleet-role-agent-runner-01", metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "the dry run kept no ServiceAccount: %v", err)
	assert.NoFileExists(t, f.path("runner-01", "/var/lib/fleet-role/token"))

	out = f.run()
	assert.Positive(t, changed(t, out))
	assert.Contains(t, out, "the host has no token yet")
	for _, h := range []string{"runner-01", "runner-02"} {
		tok := f.token(h)
		assert.NotContains(t, out, tok, "the token is not logged")
		c := claimsOf(t, tok)
		assert.Equal(t, "system:serviceaccount:fleet-role:fleet-role-agent-"+h, c["sub"])
		exp, _ := c.GetExpirationTime()
		iat, _ := c.GetIssuedAt()
		assert.Equal(t, "168h0m0s", exp.Sub(iat.Time).String(), "fleet_role_agent_token_lifetime")
		for _, p := range []string{"/var/lib/fleet-role/token", "/etc/fleet-role/kubeconfig"} {
			fi, err := os.Stat(f.path(h, p))
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "%s of %s", p, h)
		}
		kc, err := clientcmd.LoadFromFile(f.path(h, "/etc/fleet-role/kubeconfig"))
		require.NoError(t, err)
		ctxt := kc.Contexts[kc.CurrentContext]
		assert.Equal(t, kube.URL, kc.Clusters[ctxt.Cluster].Server, "the address given, not the host's own k3s")
		assert.NotEmpty(t, kc.Clusters[ctxt.Cluster].CertificateAuthorityData, "the CA of the administrator's kubeconfig")
		assert.Equal(t, "/var/lib/fleet-role/token", kc.AuthInfos[ctxt.AuthInfo].TokenFile, "the token read from its file")
		assert.Empty(t, kc.AuthInfos[ctxt.AuthInfo].Token)
		a, err := config.LoadAgent(f.path(h, "/etc/fleet-role/agent.toml"))
		require.NoError(t, err)
		assert.Equal(t, "/var/lib/fleet-role/token", a.TokenFile, "the agent renews the token the kubeconfig reads")
		assert.Equal(t, "/etc/fleet-role/kubeconfig", a.Kubeconfig)
	}

	// Host A's credentials: its own Node and Events, not host B's Node.
	a := f.client("runner-01")
	_, err = a.CoreV1().Nodes().Patch(ctx, "runner-01", types.MergePatchType, []byte(`{"metadata":{"annotations":{"fleet-role.io/probe":"{}"}}}`), metav1.PatchOptions{})
	require.NoError(t, err, "host A patches its own Node")
	_, err = a.CoreV1().Nodes().Patch(ctx, "runner-02", types.MergePatchType, []byte(`{"metadata":{"annotations":{"fleet-role.io/probe":"{}"}}}`), metav1.PatchOptions{})
	assert.True(t, apierrors.IsForbidden(err), "host A patching host B's Node: want 403, got %v", err)
	_, err = a.CoreV1().Events("default").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "runner-01."},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "runner-01"}, Reason: "Test", Message: "m", Type: corev1.EventTypeNormal}, metav1.CreateOptions{})
	require.NoError(t, err, "host A records an Event")
	_, err = f.client("runner-02").CoreV1().Nodes().Patch(ctx, "runner-01", types.MergePatchType, []byte(`{"metadata":{"annotations":{"x":"y"}}}`), metav1.PatchOptions{})
	assert.True(t, apierrors.IsForbidden(err), "host B patching host A's Node: want 403, got %v", err)

	// A second run with fresh tokens changes nothing, and mints nothing.
	first := map[string]string{"runner-01": f.token("runner-01"), "runner-02": f.token("runner-02")}
	assert.Zero(t, changed(t, f.run()), "a second run changes nothing")
	assert.Zero(t, changed(t, f.run("--check")), "nor does check mode say it would")
	for h, tok := range first {
		assert.Equal(t, tok, f.token(h), "%s's token is left alone", h)
	}

	// A token expiring within fleet_role_agent_token_renew_within is replaced.
	out = f.run("-e", "fleet_role_agent_token_lifetime=400h", "-e", "fleet_role_agent_token_renew_within=200h")
	assert.Positive(t, changed(t, out))
	assert.Regexp(t, regexp.MustCompile(`the host's token expires at \S+, within 720000s`), out)
	for h, tok := range first {
		next := f.token(h)
		assert.NotEqual(t, tok, next, "%s's token is replaced", h)
		exp, _ := claimsOf(t, next).GetExpirationTime()
		iat, _ := claimsOf(t, next).GetIssuedAt()
		assert.Equal(t, "400h0m0s", exp.Sub(iat.Time).String())
	}
	assert.Zero(t, changed(t, f.run()), "and then left alone")

	// Revoked: the ServiceAccount deleted, every token of it is refused; a
	// run makes it anew and mints host A a token, host B keeping its own.
	revoked, kept := f.token("runner-01"), f.token("runner-02")
	require.NoError(t, kube.Client.CoreV1().ServiceAccounts(api.Namespace).Delete(ctx, "fleet-role-agent-runner-01", metav1.DeleteOptions{}))
	out = f.run()
	assert.Positive(t, changed(t, out))
	assert.Contains(t, out, "the host's token is of an earlier ServiceAccount fleet-role/fleet-role-agent-runner-01")
	assert.NotEqual(t, revoked, f.token("runner-01"))
	assert.Equal(t, kept, f.token("runner-02"))
	_, err = f.client("runner-01").CoreV1().Nodes().Get(ctx, "runner-01", metav1.GetOptions{})
	require.NoError(t, err, "host A's new token works")
	old, err := kubernetes.NewForConfig(&rest.Config{Host: kube.URL, BearerToken: revoked, TLSClientConfig: rest.TLSClientConfig{CAFile: kube.CAFile}})
	require.NoError(t, err)
	assert.Eventually(t, func() bool {
		_, err = old.CoreV1().Nodes().Get(ctx, "runner-01", metav1.GetOptions{})
		return apierrors.IsUnauthorized(err)
	}, 10*time.Second, 100*time.Millisecond, "the revoked token: want 401, got %v", err)
}

func TestTheAgentRoleRefusesAnAPIServerAddressThatIsTheHostsOwnK3s(t *testing.T) {
	f := newCredentialsFleet(t, nil)
	for _, server := range []string{"https://127.0.0.1:6443", "https://localhost:6444", "https://10.0.0.1:6443"} {
		out, err := tool(t, "ansible-playbook", append(append([]string(nil), f.args...), "--limit", "runner-01", "-e", "fleet_role_agent_api_server="+server)...)
		require.Error(t, err, server)
		assert.Contains(t, out, "would be this host's own k3s", server)
	}

	// The default: the first server of the inventory other than the host.
	play := filepath.Join(t.TempDir(), "defaults.yml")
	require.NoError(t, os.WriteFile(play, []byte(`- hosts: runner-01:runner-02
  gather_facts: false
  roles:
    - role: fleet_role_agent
      fleet_role_agent_credentials: false
  tasks:
    - name: Say the API server
      ansible.builtin.debug:
        msg: "api_server={{ fleet_role_agent_api_server }}"
`), 0o644))
	args := append([]string{f.args[0], f.args[1], play}, f.args[3:]...)
	out := playbook(t, args...)
	got := map[string]string{}
	for _, m := range regexp.MustCompile(`ok: \[(\S+)\] => \{\s+"msg": "api_server=(\S+)"`).FindAllStringSubmatch(out, -1) {
		got[m[1]] = m[2]
	}
	assert.Equal(t, map[string]string{"runner-01": "https://10.0.0.2:6443", "runner-02": "https://10.0.0.1:6443"}, got,
		"each host reaches the first other server, not its own k3s:\n%s", out)
}
