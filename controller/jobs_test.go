package controller

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// runnerAPI serves EphemeralRunners by path, counting the requests.
type runnerAPI struct {
	mu     sync.Mutex
	bodies map[string]string
	asked  []string
}

func (a *runnerAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, r.URL.Path)
	body, ok := a.bodies[r.URL.Path]
	if !ok {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, body)
}

func (a *runnerAPI) take() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.asked
	a.asked = nil
	return out
}

func runnerPod(uid, name, owner string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "arc", Name: name, UID: types.UID(uid)}}
	if owner != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "actions.github.com/v1alpha1", Kind: "EphemeralRunner", Name: owner}}
	}
	return p
}

// Each runner pod's job is read from its EphemeralRunner once it names
// one; a runner with no job yet is read again only after jobReread; a
// pod owned by something else is never read for; a pod no longer waited
// on is forgotten.
func TestTheJobOfARunnerPodIsReadFromItsEphemeralRunnerOnceNamedAndAgainOnlyAfterAWhileUntilThen(t *testing.T) {
	const path = "/apis/actions.github.com/v1alpha1/namespaces/arc/ephemeralrunners/"
	srv := &runnerAPI{bodies: map[string]string{
		path + "r-busy": `{"status":{"phase":"Running","jobId":"7","jobRepositoryName":"octo-org/app","jobDisplayName":"build (ubuntu)","workflowRunId":4242}}`,
		path + "r-idle": `{"status":{"phase":"Pending"}}`,
	}}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	client, err := kubernetes.NewForConfig(&rest.Config{Host: ts.URL})
	require.NoError(t, err)
	j := newJobs(client, slog.New(slog.DiscardHandler))
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

	pods := []*corev1.Pod{runnerPod("1", "busy", "r-busy"), runnerPod("2", "idle", "r-idle"), runnerPod("3", "plain", ""), runnerPod("4", "gone", "r-gone")}
	assert.Equal(t, map[string]string{"arc/busy": "octo-org/app: build (ubuntu) (run 4242)"}, j.of(ctx, pods, now))
	assert.ElementsMatch(t, []string{path + "r-busy", path + "r-idle", path + "r-gone"}, srv.take())

	assert.Len(t, j.of(ctx, pods, now.Add(jobReread-time.Second)), 1)
	assert.Empty(t, srv.take(), "nothing read again within jobReread")

	srv.mu.Lock()
	srv.bodies[path+"r-idle"] = `{"status":{"phase":"Running","jobId":"8"}}`
	srv.mu.Unlock()
	assert.Equal(t, map[string]string{"arc/busy": "octo-org/app: build (ubuntu) (run 4242)", "arc/idle": "job 8"}, j.of(ctx, pods, now.Add(jobReread)))
	assert.ElementsMatch(t, []string{path + "r-idle", path + "r-gone"}, srv.take(), "the runners with no job read again, the named one not")

	assert.Empty(t, j.of(ctx, nil, now.Add(2*jobReread)))
	assert.Empty(t, srv.take())
	assert.Empty(t, j.known, "pods no longer waited on are forgotten")
}
