package agent_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
)

// mintToken asks the API server, as its administrator, for a token of the
// node's agent ServiceAccount, as the Ansible role does.
func mintToken(tb testing.TB, kube *kubeapi.Server, node string, lifetime time.Duration) string {
	tb.Helper()
	secs := int64(lifetime / time.Second)
	tr, err := kube.Client.CoreV1().ServiceAccounts(api.Namespace).CreateToken(context.Background(), "fleet-role-agent-"+node,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	require.NoError(tb, err)
	return tr.Status.Token
}

// tokenKubeconfig writes a kubeconfig whose user reads its token from a
// file, as the Ansible role writes the agent's.
func tokenKubeconfig(tb testing.TB, kube *kubeapi.Server, path, tokenFile string) {
	tb.Helper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["fleet"] = &clientcmdapi.Cluster{Server: kube.URL, CertificateAuthority: kube.CAFile}
	kc.AuthInfos["agent"] = &clientcmdapi.AuthInfo{TokenFile: tokenFile}
	kc.Contexts["fleet"] = &clientcmdapi.Context{Cluster: "fleet", AuthInfo: "agent"}
	kc.CurrentContext = "fleet"
	require.NoError(tb, clientcmd.WriteToFile(*kc, path))
}

func annotation(key, value string) []byte {
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	return b
}

func TestAnAgentsTokenReachesItsOwnNodeItsEventsAndItsOwnTokenAndNothingElse(t *testing.T) {
	kube := kubeapi.Start(t)
	ctx := context.Background()
	for _, n := range []string{"host-a", "host-b"} {
		_, err := kube.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		require.NoError(t, err)
		grantNode(t, kube, n)
	}
	a, err := kubernetes.NewForConfig(&rest.Config{Host: kube.URL, BearerToken: mintToken(t, kube, "host-a", time.Hour),
		TLSClientConfig: rest.TLSClientConfig{CAFile: kube.CAFile}})
	require.NoError(t, err)
	nodes := a.CoreV1().Nodes()
	forbidden := func(err error, what string) {
		t.Helper()
		assert.True(t, apierrors.IsForbidden(err), "%s: want 403 Forbidden, got %v", what, err)
	}

	// Its own Node: read, watched and listed by name, annotated.
	_, err = nodes.Get(ctx, "host-a", metav1.GetOptions{})
	require.NoError(t, err)
	own := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "host-a").String()}
	list, err := nodes.List(ctx, own)
	require.NoError(t, err, "a list of its own Node by the field selector: RBAC honours resourceNames")
	require.Len(t, list.Items, 1)
	own.ResourceVersion = list.ResourceVersion
	w, err := nodes.Watch(ctx, own)
	require.NoError(t, err, "a watch of its own Node by the field selector")
	defer w.Stop()
	_, err = nodes.Patch(ctx, "host-a", types.MergePatchType, annotation(api.AnnotationProbe, `{"healthy":true}`), metav1.PatchOptions{})
	require.NoError(t, err, "host A annotates its own Node")
	select {
	case ev := <-w.ResultChan():
		assert.Equal(t, watch.Modified, ev.Type)
	case <-time.After(10 * time.Second):
		t.Fatal("the watch of its own Node saw no change")
	}

	// Another host's Node, or every Node: refused.
	_, err = nodes.Patch(ctx, "host-b", types.MergePatchType, annotation(api.AnnotationReport, `{}`), metav1.PatchOptions{})
	forbidden(err, "host A patches host B's Node")
	_, err = nodes.Get(ctx, "host-b", metav1.GetOptions{})
	forbidden(err, "host A reads host B's Node")
	_, err = nodes.List(ctx, metav1.ListOptions{})
	forbidden(err, "host A lists every Node")
	_, err = nodes.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "host-b").String()})
	forbidden(err, "host A watches host B's Node")
	// Nor more than annotations of its own: no status, no delete.
	_, err = nodes.Patch(ctx, "host-a", types.MergePatchType, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
	forbidden(err, "host A patches its own Node's status")
	forbidden(nodes.Delete(ctx, "host-a", metav1.DeleteOptions{}), "host A deletes its own Node")

	// Events on its Node.
	ev, err := a.CoreV1().Events("default").Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: "host-a."},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "host-a", UID: "host-a"},
		Reason:         "CorruptRoleFile", Message: "a test", Type: corev1.EventTypeWarning,
		Source: corev1.EventSource{Component: "fleet-role-agent", Host: "host-a"},
	}, metav1.CreateOptions{})
	require.NoError(t, err, "host A records an Event")
	_, err = a.CoreV1().Events("default").Patch(ctx, ev.Name, types.MergePatchType, []byte(`{"count":2}`), metav1.PatchOptions{})
	require.NoError(t, err, "and counts its repeats, as the event recorder does")

	// A new token of its own ServiceAccount, and of no other.
	secs := int64(600)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}
	_, err = a.CoreV1().ServiceAccounts(api.Namespace).CreateToken(ctx, "fleet-role-agent-host-a", req, metav1.CreateOptions{})
	require.NoError(t, err, "host A renews its own token")
	_, err = a.CoreV1().ServiceAccounts(api.Namespace).CreateToken(ctx, "fleet-role-agent-host-b", req, metav1.CreateOptions{})
	forbidden(err, "host A asks for host B's token")
	_, err = a.CoreV1().ServiceAccounts(api.Namespace).CreateToken(ctx, "fleet-role-controller", req, metav1.CreateOptions{})
	forbidden(err, "host A asks for the controller's token")

	// Nothing else.
	_, err = a.CoreV1().Secrets(api.Namespace).List(ctx, metav1.ListOptions{})
	forbidden(err, "host A lists Secrets")
	_, err = a.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	forbidden(err, "host A lists Pods")
	_, err = a.CoordinationV1().Leases(api.Namespace).Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: api.LeaseName, Namespace: api.Namespace}}, metav1.UpdateOptions{})
	forbidden(err, "host A writes the regrade Lease, which it reads to leave the outgoing voter's apiserver")
	_, err = a.CoordinationV1().Leases(api.Namespace).Get(ctx, api.LeaderElectionLease, metav1.GetOptions{})
	forbidden(err, "host A reads the controller's election Lease")
	_, err = a.CoordinationV1().Leases(api.Namespace).List(ctx, metav1.ListOptions{})
	forbidden(err, "host A lists the Leases of fleet-role's namespace")
}

func TestTheAgentBinaryRunsOnItsServiceAccountTokenFile(t *testing.T) {
	kube := kubeapi.Start(t)
	h := newHost(t, kube)
	token := filepath.Join(h.dir, "state", "token")
	require.NoError(t, os.MkdirAll(filepath.Dir(token), 0o700))
	first := mintToken(t, kube, h.node, time.Hour)
	require.NoError(t, os.WriteFile(token, []byte(first), 0o600))
	kubeconfig := filepath.Join(h.dir, "kubeconfig")
	tokenKubeconfig(t, kube, kubeconfig, token)
	cfg, err := os.ReadFile(h.config)
	require.NoError(t, err)
	line := "kubeconfig = \"" + kubeconfig + "\"\n"
	require.Contains(t, string(cfg), line)
	require.NoError(t, os.WriteFile(h.config, []byte(strings.Replace(string(cfg), line, line+"token_file = \""+token+"\"\n", 1)), 0o600))

	h.role("agent")
	h.start()
	h.note("READY=1", 30*time.Second)
	require.Eventually(t, func() bool {
		n, err := kube.Client.CoreV1().Nodes().Get(context.Background(), h.node, metav1.GetOptions{})
		return err == nil && n.Annotations[api.AnnotationProbe] != ""
	}, 30*time.Second, 100*time.Millisecond, "the agent samples its host into its Node; agent log:\n%s", h.log)
	b, err := os.ReadFile(token)
	require.NoError(t, err)
	assert.Equal(t, first, string(b), "a fresh token is left as it is")
	assert.NotContains(t, h.log.String(), "token not renewed")
}
