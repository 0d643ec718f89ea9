package controller_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
)

// gatedWebhook answers 503 while it refuses, and records the bodies it
// took.
type gatedWebhook struct {
	mu       sync.Mutex
	refusing bool
	refused  int
	took     []string
	srv      *httptest.Server
}

func newGatedWebhook(t *testing.T) *gatedWebhook {
	w := &gatedWebhook{refusing: true}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.refusing {
			w.refused++
			http.Error(rw, "down", http.StatusServiceUnavailable)
			return
		}
		w.took = append(w.took, string(body))
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *gatedWebhook) accept() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.refusing = false
}

func (w *gatedWebhook) taken() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.took...)
}

// notifyQueue is the queue the status ConfigMap keeps.
func (e *env) notifyQueue() []api.QueuedNotification {
	_, data := e.status()
	var q api.NotifyQueue
	if v := data[api.NotifyQueueKey]; v != "" {
		require.NoError(e.t, json.Unmarshal([]byte(v), &q))
	}
	return q.Queued
}

func TestADryRunDecisionAndAPauseAWebhookRefusedAreKeptInTheStatusConfigMapAcrossARestartAndSentOnceAfter(t *testing.T) {
	hook := newGatedWebhook(t)
	e := newEnv(t, 3, 1, 0)
	e.cfg.DryRun = true
	e.cfg.Verdicts.Window = 3
	e.cfg.Notify = config.Notify{URLs: []string{"generic://" + strings.TrimPrefix(hook.srv.URL, "http://") + "/hook?disabletls=yes"},
		RetryBackoff: 200 * time.Millisecond, MaxRetryBackoff: time.Second, MaxQueued: 10}
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].FsyncMs = 40 })
	e.start()

	// Note: the decision needs a window of 3 samples at the probe period
	// (2 s) and a pass (1 s): some 10 s; 60 s, and 30 s for what follows
	// within a pass or a retry (200 ms to 1 s), are outer limits for a
	// busy 2-core machine, not bounds these steps must meet.
	var q []api.QueuedNotification
	require.Eventually(t, func() bool { q = e.notifyQueue(); return len(q) == 1 && q[0].Attempts > 1 }, 60*time.Second, 50*time.Millisecond,
		"the dry run's decision, refused and kept: %+v", q)
	assert.Contains(t, q[0].Message, "fleet-role: dry run decided, and did not carry out, a swap of v2 out for s1 in: dry run: would swap v2 for s1")
	_, stderr, code := e.cli("pause", "--reason", "kernel upgrades this week")
	require.Equal(t, 0, code, stderr)
	require.Eventually(t, func() bool { q = e.notifyQueue(); return len(q) == 2 }, 30*time.Second, 50*time.Millisecond, "the pause queued too: %+v", q)
	assert.Regexp(t, `^fleet-role: paused by \S+ at \S+: kernel upgrades this week; no swap starts until fleet-role resume$`, q[1].Message)
	assert.NotEqual(t, "", e.metric(`fleet_role_notifications_total{outcome="failed"}`))
	assert.Equal(t, `fleet_role_notifications_queued 2`, e.metric("fleet_role_notifications_queued"))
	e.stop()

	q = e.notifyQueue()
	require.Len(t, q, 2, "kept across the restart")
	hook.accept()
	e.start()
	require.Eventually(t, func() bool { return len(hook.taken()) >= 2 }, 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return len(e.notifyQueue()) == 0 }, 30*time.Second, 50*time.Millisecond, "the queue saved empty once sent")
	// The restarted controller judges the hosts anew: once its own
	// window of samples makes the decision again, it would tell it.
	require.Eventually(t, func() bool { return e.metric("fleet_role_dry_run_would_swap") == "fleet_role_dry_run_would_swap 1" },
		60*time.Second, 50*time.Millisecond, "the restarted controller makes the decision again")
	time.Sleep(2 * time.Second) // two passes and more than one retry: a send told again would be here
	taken := hook.taken()
	require.Len(t, taken, 2, "each sent once: the restarted controller does not tell again what it found told: %q", taken)
	assert.Contains(t, taken[0], "a swap of v2 out for s1 in")
	assert.Contains(t, taken[1], "paused by")
	assert.Equal(t, `fleet_role_notifications_total{outcome="sent"} 2`, e.metric(`fleet_role_notifications_total{outcome="sent"}`))
	assert.Equal(t, `fleet_role_notifications_total{outcome="dropped"} 0`, e.metric(`fleet_role_notifications_total{outcome="dropped"}`))

	_, stderr, code = e.cli("resume")
	require.Equal(t, 0, code, stderr)
	require.Eventually(t, func() bool { return len(hook.taken()) == 3 }, 30*time.Second, 50*time.Millisecond, "the resume told")
	assert.Contains(t, hook.taken()[2], "fleet-role: resumed; the pause by")
}
