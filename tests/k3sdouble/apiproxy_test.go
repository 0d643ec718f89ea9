package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// upstreamAPI stands for the test's kube-apiserver: it says whose
// credentials it saw, and streams a watch until its client goes.
type upstreamAPI struct {
	hits atomic.Int32
}

func (u *upstreamAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.hits.Add(1)
	if r.URL.Query().Get("watch") == "true" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(w, "{\"type\":\"BOOKMARK\",\"n\":%d}\n", i); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	_, _ = fmt.Fprint(w, r.Header.Get("Authorization"))
}

// testProxy is a server's apiserver on TLS (HTTP/2, as client-go speaks
// it) in front of an upstream, hold its wait when stalled.
func testProxy(t *testing.T, hold time.Duration) (*apiProxy, *upstreamAPI, *http.Client, string) {
	t.Helper()
	up := &upstreamAPI{}
	us := httptest.NewServer(up)
	t.Cleanup(us.Close)
	target, err := url.Parse(us.URL)
	require.NoError(t, err)
	p := newAPIProxy(target, http.DefaultTransport, hold, slog.New(slog.DiscardHandler))
	ps := httptest.NewUnstartedServer(p)
	ps.EnableHTTP2 = true
	ps.StartTLS()
	t.Cleanup(ps.Close)
	return p, up, ps.Client(), ps.URL
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer the-clients-own")
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func statusOf(t *testing.T, body string) metav1.Status {
	t.Helper()
	var st metav1.Status
	require.NoError(t, json.Unmarshal([]byte(body), &st), body)
	return st
}

func TestAServerWhoseAPIServerIsNotUpAnswers503AtOnceAndForwardsNothing(t *testing.T) {
	_, up, c, u := testProxy(t, time.Minute)
	began := time.Now()
	code, body := get(t, c, u+"/api/v1/namespaces/default")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	st := statusOf(t, body)
	assert.Equal(t, "apiserver not ready", st.Message)
	assert.Equal(t, metav1.StatusReasonServiceUnavailable, st.Reason)
	assert.Less(t, time.Since(began), 5*time.Second, "at once")
	assert.Zero(t, up.hits.Load())
}

func TestAServingServerForwardsEachRequestWithItsClientsOwnCredentials(t *testing.T) {
	p, up, c, u := testProxy(t, time.Minute)
	p.set(apiServing)
	code, body := get(t, c, u+"/api/v1/namespaces/default")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "Bearer the-clients-own", body)
	assert.EqualValues(t, 1, up.hits.Load())
}

func TestAStalledServerHoldsARequestThenFailsItAtEtcdsRequestTimeout(t *testing.T) {
	p, up, c, u := testProxy(t, time.Second)
	p.set(apiServing)
	p.set(apiStalled)
	began := time.Now()
	code, body := get(t, c, u+"/api/v1/namespaces/default")
	assert.GreaterOrEqual(t, time.Since(began), time.Second, "held for the whole timeout")
	assert.Equal(t, http.StatusInternalServerError, code)
	assert.Contains(t, statusOf(t, body).Message, "etcdserver: request timed out")
	assert.Zero(t, up.hits.Load())
}

func TestAStalledServerForwardsARequestItHeldOnceItServesAgain(t *testing.T) {
	p, _, c, u := testProxy(t, time.Minute)
	p.set(apiServing)
	p.set(apiStalled)
	go func() {
		time.Sleep(300 * time.Millisecond)
		p.set(apiServing)
	}()
	began := time.Now()
	code, body := get(t, c, u+"/api/v1/namespaces/default")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "Bearer the-clients-own", body)
	assert.GreaterOrEqual(t, time.Since(began), 300*time.Millisecond, "held until then")
}

func TestAWatchThroughAServerThatStopsServingIsCut(t *testing.T) {
	p, _, c, u := testProxy(t, time.Minute)
	p.set(apiServing)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u+"/api/v1/nodes?watch=true", nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	lines := bufio.NewScanner(resp.Body)
	require.True(t, lines.Scan(), "the watch streams")

	p.set(apiStalled)
	cut := time.Now()
	for lines.Scan() {
		require.Less(t, time.Since(cut), 5*time.Second, "the watch goes on after its server stopped serving")
	}
	assert.Error(t, lines.Err(), "the watch ends in an error, not as a watch that closed cleanly")
	assert.NoError(t, ctx.Err(), "cut by the server, not by the client's deadline")
}

func TestTheAPIStateIsNotReadyUntilTheMemberVotesThenServingThenStalledOnceEtcdStopped(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd member")
	}
	s, err := testServer(t, "srv-api", 30, config{ClusterInit: true, Token: "secret"})
	require.NoError(t, err)
	assert.Equal(t, apiNotReady, s.apiState(), "before its first look at etcd")
	tickUntil(t, "the server is ready", s.ready.Load, s)
	assert.Equal(t, apiServing, s.apiState())
	s.halt()
	require.NoError(t, s.tick(context.Background()))
	assert.Equal(t, apiStalled, s.apiState(), "the apiserver runs on over an etcd that stopped")
}

func TestEtcdsRequestTimeoutIsFiveSecondsAndTwoElections(t *testing.T) {
	assert.Equal(t, 15*time.Second, etcdRequestTimeout(5000), "k3s's election timeout")
}
