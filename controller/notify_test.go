package controller

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/swapplan"
)

// flakyWebhook answers its first failures requests 503, then 200, and
// records each request's body and time.
type flakyWebhook struct {
	mu       sync.Mutex
	failures int
	bodies   []string
	at       []time.Time
	srv      *httptest.Server
}

func newFlakyWebhook(t *testing.T, failures int) *flakyWebhook {
	w := &flakyWebhook{failures: failures}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.mu.Lock()
		defer w.mu.Unlock()
		w.bodies = append(w.bodies, string(body))
		w.at = append(w.at, time.Now())
		if w.failures != 0 {
			w.failures--
			http.Error(rw, "down for maintenance", http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(w.srv.Close)
	return w
}

// setFailures makes the next n requests fail; -1 makes every one fail.
func (w *flakyWebhook) setFailures(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failures = n
}

func (w *flakyWebhook) received() ([]string, []time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.bodies...), append([]time.Time(nil), w.at...)
}

func (w *flakyWebhook) url() string {
	return "generic://" + strings.TrimPrefix(w.srv.URL, "http://") + "/hook?disabletls=yes"
}

// memStore keeps the saved queues, as the status ConfigMap would.
type memStore struct {
	mu    sync.Mutex
	saved []api.NotifyQueue
}

func (s *memStore) saveNotifyQueue(_ context.Context, q api.NotifyQueue) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saved = append(s.saved, q)
	return nil
}

func (s *memStore) last() *api.NotifyQueue {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.saved) == 0 {
		return nil
	}
	q := s.saved[len(s.saved)-1]
	return &q
}

func newTestNotifier(t *testing.T, n config.Notify) (*Notifier, *prometheus.Registry) {
	t.Helper()
	nt, err := NewNotifier(n, nil)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	nt.register(reg)
	return nt, reg
}

// start runs the notifier until the test ends, or until the returned stop.
func start(t *testing.T, n *Notifier, saved *api.NotifyQueue, store notifyStore) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	n.restore(saved)
	go func() { defer close(done); n.run(ctx, store) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func counted(t *testing.T, reg *prometheus.Registry, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "fleet_role_notifications_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// Note: the notifier's tests wait at most 10 s for sends that take some
// hundred milliseconds of backoff against a local webhook: an outer limit
// for a busy 2-core machine, not a bound.

func TestAFailedSendIsTriedAgainAfterABackoffThatDoublesAndIsCountedUntilItIsSentOnce(t *testing.T) {
	hook := newFlakyWebhook(t, 2)
	n, reg := newTestNotifier(t, config.Notify{URLs: []string{hook.url()}, RetryBackoff: 100 * time.Millisecond, MaxRetryBackoff: time.Second, MaxQueued: 10})
	store := &memStore{}
	start(t, n, nil, store)

	n.say("fleet-role: paused by alice")
	require.Eventually(t, func() bool { b, _ := hook.received(); return len(b) == 3 }, 10*time.Second, 5*time.Millisecond)
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 1.0, counted(t, reg, notifySent))
		assert.Equal(c, &api.NotifyQueue{Queued: []api.QueuedNotification{}}, store.last(), "the queue saved empty once it is sent")
	}, 10*time.Second, 5*time.Millisecond)
	time.Sleep(300 * time.Millisecond) // a fourth send would come by now
	bodies, at := hook.received()
	require.Len(t, bodies, 3, "sent once, after two failures")
	for _, b := range bodies {
		assert.Contains(t, b, "fleet-role: paused by alice")
	}
	assert.GreaterOrEqual(t, at[1].Sub(at[0]), 100*time.Millisecond, "the first retry waits retry_backoff")
	assert.GreaterOrEqual(t, at[2].Sub(at[1]), 200*time.Millisecond, "the second waits twice as long")
	assert.Equal(t, 2.0, counted(t, reg, notifyFailed))
	assert.Equal(t, 0.0, counted(t, reg, notifyDropped))
	assert.Equal(t, 0.0, testutil.ToFloat64(n.queued))
}

func TestTheRetryBackoffDoublesFromRetryBackoffUpToMaxRetryBackoff(t *testing.T) {
	for attempts, want := range map[int]time.Duration{1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 7: 5 * time.Minute, 1000: 5 * time.Minute} {
		assert.Equal(t, want, retryAfter(attempts, 5*time.Second, 5*time.Minute), "after %d failed sends", attempts)
	}
	assert.Equal(t, 7*time.Second, retryAfter(3, 5*time.Second, 7*time.Second), "a limit that is no doubling of the backoff is kept")
}

func TestAURLThatKeepsFailingDoesNotHoldBackTheMessagesOfAnother(t *testing.T) {
	down, up := newFlakyWebhook(t, -1), newFlakyWebhook(t, 0)
	n, reg := newTestNotifier(t, config.Notify{URLs: []string{down.url(), up.url()}, RetryBackoff: time.Hour, MaxRetryBackoff: time.Hour, MaxQueued: 10})
	start(t, n, nil, nil)

	n.say("first")
	n.say("second")
	require.Eventually(t, func() bool { b, _ := up.received(); return len(b) == 2 }, 10*time.Second, 5*time.Millisecond)
	bodies, _ := up.received()
	assert.Contains(t, bodies[0], "first")
	assert.Contains(t, bodies[1], "second")
	failed, _ := down.received()
	assert.Len(t, failed, 1, "the URL that failed waits its backoff, an hour")
	assert.Contains(t, failed[0], "first", "and its first message stays first")
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 2.0, counted(t, reg, notifySent))
		assert.Equal(c, 1.0, counted(t, reg, notifyFailed))
		assert.Equal(c, 2.0, testutil.ToFloat64(n.queued), "the failing URL's two messages wait")
	}, 10*time.Second, 5*time.Millisecond)
}

func TestPastMaxQueuedTheOldestMessageIsDroppedAndCountedAndTheRestAreSentInOrder(t *testing.T) {
	hook := newFlakyWebhook(t, 0)
	n, reg := newTestNotifier(t, config.Notify{URLs: []string{hook.url()}, MaxQueued: 2})
	n.say("one")
	n.say("two")
	n.say("three")
	assert.Equal(t, 1.0, counted(t, reg, notifyDropped))
	assert.Equal(t, 2.0, testutil.ToFloat64(n.queued))

	start(t, n, nil, nil)
	require.Eventually(t, func() bool { b, _ := hook.received(); return len(b) == 2 }, 10*time.Second, 5*time.Millisecond)
	bodies, _ := hook.received()
	assert.Contains(t, bodies[0], "two")
	assert.Contains(t, bodies[1], "three")
}

func TestTheQueueNotSentIsSavedAndARestartedNotifierSendsItFirstAndDropsWhatIsForAURLNoLongerConfigured(t *testing.T) {
	hook := newFlakyWebhook(t, -1)
	cfg := config.Notify{URLs: []string{hook.url()}, RetryBackoff: time.Hour, MaxRetryBackoff: time.Hour, MaxQueued: 10}
	first, _ := newTestNotifier(t, cfg)
	store := &memStore{}
	stop := start(t, first, nil, store)
	first.say("fleet-role: dry run decided, and did not carry out, a swap of v2 out for s1 in")
	require.Eventually(t, func() bool { q := store.last(); return q != nil && len(q.Queued) == 1 && q.Queued[0].Attempts == 1 },
		10*time.Second, 5*time.Millisecond, "saved with its failed attempt")
	stop()

	saved := store.last()
	saved.Queued = append(saved.Queued, api.QueuedNotification{To: urlID("generic://gone.example.org/hook"), Message: "to a URL taken out", At: time.Now()})
	hook.setFailures(0)
	second, reg := newTestNotifier(t, cfg)
	second.say("fleet-role: resumed")
	start(t, second, saved, store)
	require.Eventually(t, func() bool { b, _ := hook.received(); return len(b) == 3 }, 10*time.Second, 5*time.Millisecond)
	bodies, _ := hook.received()
	assert.Contains(t, bodies[1], "a swap of v2 out for s1 in", "the saved message, before the one queued since")
	assert.Contains(t, bodies[2], "fleet-role: resumed")
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, 2.0, counted(t, reg, notifySent))
		assert.Equal(c, 1.0, counted(t, reg, notifyDropped), "the message to a URL no longer configured")
		assert.Empty(c, store.last().Queued)
	}, 10*time.Second, 5*time.Millisecond)
}

func TestASendWithNoAnswerWithinTheTimeoutIsAFailureThatIsTriedAgain(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { <-release }))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	n, reg := newTestNotifier(t, config.Notify{URLs: []string{"generic://" + strings.TrimPrefix(srv.URL, "http://") + "/hook?disabletls=yes"},
		RetryBackoff: time.Hour, MaxRetryBackoff: time.Hour, MaxQueued: 10})
	n.sendTimeout = 50 * time.Millisecond
	start(t, n, nil, nil)
	n.say("no answer")
	assert.Eventually(t, func() bool { return counted(t, reg, notifyFailed) == 1 }, 10*time.Second, 5*time.Millisecond)
	assert.Equal(t, 1.0, testutil.ToFloat64(n.queued), "kept for its retry")
}

func TestThePauseMessageSaysWhoWhenAndWhyAndTheResumeWhichPauseItLifts(t *testing.T) {
	alice := &api.Pause{V: 1, By: "alice", Reason: "kernel upgrades this week", At: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	bob := &api.Pause{V: 1, Reason: "a disk swap", At: time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)}
	for _, tc := range []struct {
		name      string
		prev, cur *api.Pause
		want      string
	}{
		{"no pause is no news", nil, nil, ""},
		{"a pause is told with who, when and why", nil, alice,
			"fleet-role: paused by alice at 2026-12-01T09:00:00Z: kernel upgrades this week; no swap starts until fleet-role resume"},
		{"the same pause again is no news", alice, &api.Pause{V: 1, By: "alice", Reason: "kernel upgrades this week", At: alice.At}, ""},
		{"a new pause over another is told, someone when no one is named", alice, bob,
			"fleet-role: paused by someone at 2026-12-02T09:00:00Z: a disk swap; no swap starts until fleet-role resume"},
		{"a resume is told with the pause it lifts", alice, nil, "fleet-role: resumed; the pause by alice (kernel upgrades this week) is lifted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, PauseMessage(tc.prev, tc.cur))
		})
	}
}

func queuedMessages(n *Notifier) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for _, m := range n.queue {
		out = append(out, m.Message)
	}
	return out
}

func TestAPauseAndItsResumeAreQueuedOnceEachAndAfterARestartThePauseLastToldOrPublishedIsNotToldAgain(t *testing.T) {
	alice := &api.Pause{V: 1, By: "alice", Reason: "kernel upgrades", At: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	n, _ := newTestNotifier(t, config.Notify{URLs: []string{"generic://hooks.example.org/fleet"}})
	n.paused(swapplan.Snapshot{Pause: alice, Status: api.Status{Pause: alice}})
	n.paused(swapplan.Snapshot{Pause: alice, Status: api.Status{Pause: alice}})
	assert.Empty(t, queuedMessages(n), "a pause the last controller published was told by it")
	n.paused(swapplan.Snapshot{Status: api.Status{Pause: alice}})
	n.paused(swapplan.Snapshot{})
	n.paused(swapplan.Snapshot{Pause: alice})
	n.paused(swapplan.Snapshot{Pause: alice, Status: api.Status{Pause: alice}})
	assert.Equal(t, []string{
		"fleet-role: resumed; the pause by alice (kernel upgrades) is lifted",
		"fleet-role: paused by alice at 2026-12-01T09:00:00Z: kernel upgrades; no swap starts until fleet-role resume",
	}, queuedMessages(n))

	restarted, _ := newTestNotifier(t, config.Notify{URLs: []string{"generic://hooks.example.org/fleet"}})
	restarted.paused(swapplan.Snapshot{Pause: alice})
	assert.Len(t, queuedMessages(restarted), 1, "a pause made while no controller ran, which no status published, is told at the first pass")

	told, _ := newTestNotifier(t, config.Notify{URLs: []string{"generic://hooks.example.org/fleet"}})
	told.restore(&api.NotifyQueue{Pause: alice})
	told.paused(swapplan.Snapshot{Pause: alice})
	assert.Empty(t, queuedMessages(told), "the pause kept with the queue was told, though no status published it")
	resumed, _ := newTestNotifier(t, config.Notify{URLs: []string{"generic://hooks.example.org/fleet"}})
	resumed.restore(&api.NotifyQueue{})
	resumed.paused(swapplan.Snapshot{Status: api.Status{Pause: alice}})
	assert.Empty(t, queuedMessages(resumed), "the queue kept says no pause was in force when last told: its resume was told")
}

func TestADryRunDecisionIsToldOnceEvenAcrossARestartAndAgainOnlyAfterAPassWithEveryVerdictMadeHadNone(t *testing.T) {
	v2s1 := swapplan.Plan{Decision: &api.Decision{Out: "v2", In: "s1", Reason: "v2 is unfit"}, Reason: "dry run: would swap v2 for s1 (v2 is unfit)"}
	v3s1 := swapplan.Plan{Decision: &api.Decision{Out: "v3", In: "s1", Reason: "v3 is unfit"}, Reason: "dry run: would swap v3 for s1 (v3 is unfit)"}
	made := map[string]api.Verdict{"v2": {State: api.VerdictFit}, "s1": {State: api.VerdictFit}}
	partial := map[string]api.Verdict{"v2": {State: api.VerdictPartial}, "s1": {State: api.VerdictFit}}
	n, _ := newTestNotifier(t, config.Notify{URLs: []string{"generic://hooks.example.org/fleet"}})
	n.dryRun(false, v2s1, made)
	assert.Empty(t, queuedMessages(n), "not in a dry run, a decision is carried out, not told as one")
	n.dryRun(true, v2s1, made)
	n.dryRun(true, v2s1, made)
	n.dryRun(true, swapplan.Plan{}, partial)
	n.dryRun(true, v2s1, made)
	assert.Equal(t, []string{"fleet-role: dry run decided, and did not carry out, a swap of v2 out for s1 in: dry run: would swap v2 for s1 (v2 is unfit)"}, queuedMessages(n),
		"once, though a pass with a partial verdict had none")
	store := &memStore{}
	require.NoError(t, n.save(context.Background(), store))

	restarted, _ := newTestNotifier(t, config.Notify{URLs: []string{"generic://hooks.example.org/fleet"}})
	restarted.restore(&api.NotifyQueue{DryRunTold: store.last().DryRunTold})
	restarted.dryRun(true, v2s1, made)
	assert.Empty(t, queuedMessages(restarted), "what the controller before the restart told")
	restarted.dryRun(true, v3s1, made)
	restarted.dryRun(true, swapplan.Plan{}, made)
	restarted.dryRun(true, v3s1, made)
	assert.Len(t, queuedMessages(restarted), 2, "another decision, and the same again after a pass with every verdict made and no decision")
}
