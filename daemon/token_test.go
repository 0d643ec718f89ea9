package daemon

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// signToken makes a ServiceAccount token as the API server would, but
// signed with a test key (the agent never checks the signature).
func signToken(t *testing.T, ns, name string, aud []string, issued time.Time, lifetime time.Duration, id string) string {
	t.Helper()
	c := tokenClaims{RegisteredClaims: jwt.RegisteredClaims{
		Subject:   "system:serviceaccount:" + ns + ":" + name,
		Audience:  aud,
		IssuedAt:  jwt.NewNumericDate(issued),
		NotBefore: jwt.NewNumericDate(issued),
		ExpiresAt: jwt.NewNumericDate(issued.Add(lifetime)),
		ID:        id,
	}}
	c.Kubernetes.Namespace = ns
	c.Kubernetes.ServiceAccount.Name = name
	c.Kubernetes.ServiceAccount.UID = "uid-" + name
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString([]byte("test key"))
	require.NoError(t, err)
	return s
}

// tokenAPI plays the API server's TokenRequest on a fake clientset,
// recording each request and failing while fail is set.
type tokenAPI struct {
	t     *testing.T
	clock *clocktesting.FakeClock
	mu    sync.Mutex
	asked []*authenticationv1.TokenRequest
	names []string
	fail  error
}

func newTokenAPI(t *testing.T, clk *clocktesting.FakeClock) (*tokenAPI, *k8sfake.Clientset) {
	api := &tokenAPI{t: t, clock: clk}
	kube := k8sfake.NewClientset()
	kube.PrependReactor("create", "serviceaccounts", func(a k8stesting.Action) (bool, runtime.Object, error) {
		c := a.(k8stesting.CreateActionImpl)
		if c.GetSubresource() != "token" {
			return false, nil, nil
		}
		tr := c.GetObject().(*authenticationv1.TokenRequest)
		api.mu.Lock()
		defer api.mu.Unlock()
		if api.fail != nil {
			return true, nil, api.fail
		}
		name := c.Name
		api.asked = append(api.asked, tr.DeepCopy())
		api.names = append(api.names, c.GetNamespace()+"/"+name)
		out := tr.DeepCopy()
		out.Status.Token = signToken(t, c.GetNamespace(), name, tr.Spec.Audiences, api.clock.Now(), time.Duration(*tr.Spec.ExpirationSeconds)*time.Second, "renewed")
		return true, out, nil
	})
	return api, kube
}

func (api *tokenAPI) requests() ([]*authenticationv1.TokenRequest, []string) {
	api.mu.Lock()
	defer api.mu.Unlock()
	return append([]*authenticationv1.TokenRequest(nil), api.asked...), append([]string(nil), api.names...)
}

func tokenFixture(t *testing.T, lifetime time.Duration) (*tokenRenewer, *tokenAPI, *clocktesting.FakeClock, string) {
	t.Helper()
	start := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clk := clocktesting.NewFakeClock(start)
	api, kube := newTokenAPI(t, clk)
	path := filepath.Join(t.TempDir(), "token")
	first := signToken(t, "fleet-role", "fleet-role-agent-h2", []string{"https://kubernetes.default.svc.cluster.local", "k3s"}, start, lifetime, "first")
	require.NoError(t, os.WriteFile(path, []byte(first+"\n"), 0o600))
	return newTokenRenewer(path, kube.CoreV1(), clk, slog.New(slog.DiscardHandler)), api, clk, first
}

func readToken(t *testing.T, path string) saToken {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	tok, err := parseToken(string(b))
	require.NoError(t, err)
	return tok
}

func TestATokenIsNotRenewedBeforeHalfItsLifetimeHasPassed(t *testing.T) {
	r, api, clk, _ := tokenFixture(t, 24*time.Hour)
	for _, at := range []time.Duration{0, time.Hour, 12*time.Hour - time.Second} {
		clk.SetTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC).Add(at))
		renewed, err := r.check(context.Background())
		require.NoError(t, err)
		assert.False(t, renewed, "%s into a 24h token", at)
	}
	asked, _ := api.requests()
	assert.Empty(t, asked, "no TokenRequest")
	assert.Equal(t, "first", readToken(t, r.path).id)
}

func TestATokenHalfWayThroughItsLifeIsRenewedForItsOwnServiceAccountWithItsLifetimeAndAudiences(t *testing.T) {
	r, api, clk, _ := tokenFixture(t, 24*time.Hour)
	clk.Step(12 * time.Hour)
	renewed, err := r.check(context.Background())
	require.NoError(t, err)
	assert.True(t, renewed)

	asked, names := api.requests()
	require.Len(t, asked, 1)
	assert.Equal(t, []string{"fleet-role/fleet-role-agent-h2"}, names, "its own ServiceAccount, named by the token")
	assert.Equal(t, int64(24*3600), *asked[0].Spec.ExpirationSeconds, "the lifetime Ansible chose")
	assert.Equal(t, []string{"https://kubernetes.default.svc.cluster.local", "k3s"}, asked[0].Spec.Audiences)
	assert.Nil(t, asked[0].Spec.BoundObjectRef)

	tok := readToken(t, r.path)
	assert.Equal(t, "renewed", tok.id, "the file holds the new token")
	assert.Equal(t, clk.Now().Add(24*time.Hour).Unix(), tok.expires.Unix())
	fi, err := os.Stat(r.path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(r.path), ".token.tmp-*"))
	assert.Empty(t, left, "written atomically: no temporary file left")

	renewed, err = r.check(context.Background())
	require.NoError(t, err)
	assert.False(t, renewed, "the new token is not due")
}

func TestARenewalTheAPIServerRefusesKeepsTheOldTokenAndIsTriedAgain(t *testing.T) {
	r, api, clk, first := tokenFixture(t, time.Hour)
	clk.Step(40 * time.Minute)
	api.fail = errors.New("dial tcp 10.0.0.1:6443: connect: connection refused")
	_, err := r.check(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "request a token for fleet-role/fleet-role-agent-h2")
	assert.NotContains(t, err.Error(), "expired")
	b, err := os.ReadFile(r.path)
	require.NoError(t, err)
	assert.Equal(t, first+"\n", string(b), "the old token is left as it was")

	api.fail = nil
	clk.Step(tokenCheckEvery)
	renewed, err := r.check(context.Background())
	require.NoError(t, err)
	assert.True(t, renewed)
}

func TestAnExpiredTokenThatCannotBeRenewedSaysTheAnsibleRoleMintsANewOne(t *testing.T) {
	r, api, clk, _ := tokenFixture(t, time.Hour)
	clk.Step(2 * time.Hour)
	api.fail = errors.New("Unauthorized")
	_, err := r.check(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "the token expired at 2026-11-30T13:00:00Z")
	assert.Contains(t, err.Error(), "run the Ansible role for this host")
}

func TestATokenFileThatHoldsNoServiceAccountTokenIsNotRenewed(t *testing.T) {
	r, api, _, _ := tokenFixture(t, time.Hour)
	for _, content := range []string{"", "not a jwt", signToken(t, "", "", nil, time.Now(), time.Hour, "x")} {
		require.NoError(t, os.WriteFile(r.path, []byte(content), 0o600))
		_, err := r.check(context.Background())
		assert.ErrorIs(t, err, errNotAServiceAccountToken, "%q", content)
	}
	require.NoError(t, os.Remove(r.path))
	_, err := r.check(context.Background())
	assert.ErrorIs(t, err, os.ErrNotExist)
	asked, _ := api.requests()
	assert.Empty(t, asked)
}

func TestTheRenewerRenewsOnItsOwnAsTheClockPassesHalfTheLifetime(t *testing.T) {
	r, api, clk, _ := tokenFixture(t, time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	step := func() {
		require.Eventually(t, clk.HasWaiters, 5*time.Second, time.Millisecond, "the renewer waits on its ticker")
		clk.Step(tokenCheckEvery)
	}
	for range 29 {
		step()
	}
	asked, _ := api.requests()
	assert.Empty(t, asked, "29 minutes into an hour's token")
	step()
	require.Eventually(t, func() bool { return readToken(t, r.path).id == "renewed" }, 5*time.Second, 5*time.Millisecond)
	asked, _ = api.requests()
	assert.Len(t, asked, 1)
}

func TestARenewedTokenOnTheRealAPIServerIsTheOneTheAgentsClientSendsNext(t *testing.T) {
	t.Parallel()
	api := kubeapi.Start(t)
	ctx := context.Background()
	_, err := api.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "h2"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	// fleet-role's namespace and the rest of the controller's objects, as
	// packaged (the chart's render), then the agent's RBAC.
	ns, err := os.ReadFile(filepath.Join(testhost.Root(), "packaging", "kubernetes", "controller.yaml"))
	require.NoError(t, err)
	kubeapi.Apply(t, api.Client, ns)
	rbac, err := os.ReadFile(filepath.Join(testhost.Root(), "packaging", "kubernetes", "agent-rbac.yaml.j2"))
	require.NoError(t, err)
	kubeapi.Apply(t, api.Client, []byte(strings.ReplaceAll(string(rbac), "{{ node_name }}", "h2")))

	// The first token, as the Ansible role mints it (the shortest lifetime
	// the API server grants), and the kubeconfig reading it from its file.
	secs := int64(minTokenLifetime / time.Second)
	tr, err := api.Client.CoreV1().ServiceAccounts("fleet-role").CreateToken(ctx, "fleet-role-agent-h2",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	require.NoError(t, err)
	first, err := parseToken(tr.Status.Token)
	require.NoError(t, err)
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	require.NoError(t, os.WriteFile(path, []byte(tr.Status.Token), 0o600))
	kc := clientcmdapi.NewConfig()
	kc.Clusters["fleet"] = &clientcmdapi.Cluster{Server: api.URL, CertificateAuthority: api.CAFile}
	kc.AuthInfos["agent"] = &clientcmdapi.AuthInfo{TokenFile: path}
	kc.Contexts["fleet"] = &clientcmdapi.Context{Cluster: "fleet", AuthInfo: "agent"}
	kc.CurrentContext = "fleet"
	require.NoError(t, clientcmd.WriteToFile(*kc, filepath.Join(dir, "kubeconfig")))
	rc, err := clientcmd.BuildConfigFromFlags("", filepath.Join(dir, "kubeconfig"))
	require.NoError(t, err)
	client, err := kubernetes.NewForConfig(rc)
	require.NoError(t, err)
	sent := func() string {
		r, err := client.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		require.NoError(t, err)
		assert.Equal(t, "system:serviceaccount:fleet-role:fleet-role-agent-h2", r.Status.UserInfo.Username)
		return strings.Join(r.Status.UserInfo.Extra["authentication.kubernetes.io/credential-id"], ",")
	}
	require.Equal(t, "JTI="+first.id, sent(), "the client sends the first token")

	// The agent's own Node client works under its RBAC with that token.
	nc := newNodeClient(client.CoreV1(), "h2", slog.New(slog.DiscardHandler))
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	require.NoError(t, nc.start(runCtx, func() {}))
	require.Eventually(t, nc.synced, 10*time.Second, 10*time.Millisecond, "the watch of its own Node lists it")
	require.NoError(t, nc.annotate(ctx, "fleet-role.io/probe", `{"healthy":true}`))

	// Half the lifetime in (the fake clock says so), the agent renews the
	// token through the same client.
	clk := clocktesting.NewFakeClock(first.issued.Add(minTokenLifetime/2 + time.Second))
	r := newTokenRenewer(path, client.CoreV1(), clk, slog.New(slog.DiscardHandler))
	renewed, err := r.check(ctx)
	require.NoError(t, err)
	require.True(t, renewed)
	next := readToken(t, path)
	assert.NotEqual(t, first.id, next.id, "a new token")
	assert.Equal(t, "fleet-role-agent-h2", next.name)
	assert.Equal(t, minTokenLifetime, next.expires.Sub(next.issued), "with the first one's lifetime")

	// The client, made before, keeps working, and within client-go's
	// minute of caching the file sends the new token.
	require.Eventually(t, func() bool { return sent() == "JTI="+next.id }, 90*time.Second, time.Second,
		"client-go reads the kubeconfig's tokenFile again")
	require.NoError(t, nc.annotate(ctx, "fleet-role.io/probe", `{"healthy":false}`), "the agent's client, on the new token")
	n, err := api.Client.CoreV1().Nodes().Get(ctx, "h2", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, `{"healthy":false}`, n.Annotations["fleet-role.io/probe"])
}
