package controller

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nicholas-fedor/shoutrrr/pkg/router"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/api/logkey"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/swapplan"
)

// Notifier tells a swap's start, end, rollback, abandon and stuck, a dry
// run's decision, and a pause and its resume to the configured shoutrrr
// URLs, as kured tells its reboots: off the pass, each message to every
// URL, in order for each URL. A send that fails is tried again after a
// backoff that doubles up to a limit, while the other URLs' messages go
// on. The messages not sent yet, at most max_queued (the oldest dropped
// past it, and counted), are kept in the status ConfigMap
// (api.NotifyQueueKey), so that a restart or a new leader sends them.
// Note: the queue is saved before each send, so a message sent just
// before a restart that did not get to save its removal is sent again;
// only one queued in the moment before a crash, not saved yet, is lost.
type Notifier struct {
	dests      []*destination
	backoff    time.Duration
	maxBackoff time.Duration
	max        int
	log        *slog.Logger
	now        func() time.Time
	outcomes   *prometheus.CounterVec
	queued     prometheus.Gauge
	wake       chan struct{}
	// sendTimeout bounds one send.
	sendTimeout time.Duration

	mu    sync.Mutex
	queue []queuedMessage
	seq   uint64
	// dirty: the queue changed since it was last saved.
	dirty bool
	// dryRunTold is the dry run's decision last told.
	dryRunTold *api.Decision
	// pause is the pause last seen, once a pass has seen one or none.
	pause      *api.Pause
	pauseKnown bool
}

// destination is one URL and when it may be tried again after a failure.
type destination struct {
	id   string
	send func(msg string) error
	next time.Time
}

type queuedMessage struct {
	api.QueuedNotification
	seq uint64
}

// notifyStore keeps the queue across restarts.
type notifyStore interface {
	saveNotifyQueue(ctx context.Context, q api.NotifyQueue) error
}

// NewNotifier reads the URLs (and the file of more of them) and makes the
// services they name; nil when none is configured. A URL shoutrrr does not
// know is an error wrapping config.ErrInvalid that names its key and
// place, not the URL (it may hold a token).
func NewNotifier(n config.Notify, log *slog.Logger) (*Notifier, error) {
	type entry struct{ key, url string }
	var urls []entry
	for i, u := range n.URLs {
		urls = append(urls, entry{fmt.Sprintf("notify.urls[%d]", i), u})
	}
	if n.URLsFile != "" {
		data, err := os.ReadFile(n.URLsFile)
		if err != nil {
			return nil, fmt.Errorf("%w: notify.urls_file: %v", config.ErrInvalid, err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		for line := 1; sc.Scan(); line++ {
			if u := strings.TrimSpace(sc.Text()); u != "" && !strings.HasPrefix(u, "#") {
				urls = append(urls, entry{fmt.Sprintf("notify.urls_file %s line %d", n.URLsFile, line), u})
			}
		}
	}
	if len(urls) == 0 {
		return nil, nil
	}
	var errs []error
	var dests []*destination
	for _, e := range urls {
		r, err := router.New(nil)
		if err == nil {
			err = r.AddService(e.url)
		}
		if err != nil {
			scheme, _, _ := strings.Cut(e.url, ":")
			msg := strings.ReplaceAll(err.Error(), e.url, scheme+"://…")
			errs = append(errs, fmt.Errorf("%s (%s://…): %s", e.key, scheme, msg))
			continue
		}
		id := urlID(e.url)
		if slices.ContainsFunc(dests, func(d *destination) bool { return d.id == id }) {
			continue // the same URL twice is told once
		}
		dests = append(dests, &destination{id: id, send: func(msg string) error { return r.Send(msg, nil)[0] }})
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", config.ErrInvalid, errors.Join(errs...))
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	def := config.DefaultController().Notify // for what a caller left zero
	if n.RetryBackoff <= 0 {
		n.RetryBackoff = def.RetryBackoff
	}
	if n.MaxRetryBackoff < n.RetryBackoff {
		n.MaxRetryBackoff = max(def.MaxRetryBackoff, n.RetryBackoff)
	}
	if n.MaxQueued < 1 {
		n.MaxQueued = def.MaxQueued
	}
	return &Notifier{dests: dests, backoff: n.RetryBackoff, maxBackoff: n.MaxRetryBackoff, max: n.MaxQueued,
		log: log, now: time.Now, wake: make(chan struct{}, 1), sendTimeout: notifySendTimeout}, nil
}

// notifySendTimeout bounds one send of a notification.
const notifySendTimeout = 30 * time.Second

// urlID names a URL in the saved queue by the start of its SHA-256.
func urlID(u string) string {
	sum := sha256.Sum256([]byte(u))
	return hex.EncodeToString(sum[:6])
}

// register counts the notifications on reg.
func (n *Notifier) register(reg prometheus.Registerer) {
	n.outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_role_notifications_total",
		Help: "Notifications to each URL by outcome: sent; failed (a send that failed, tried again after a backoff); dropped (the oldest, the queue full, or its URL no longer configured)."},
		[]string{"outcome"})
	n.queued = prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_role_notifications_queued",
		Help: "Notifications waiting to be sent, one for each URL, at most [notify] max_queued."})
	for _, o := range []string{notifySent, notifyFailed, notifyDropped} {
		n.outcomes.WithLabelValues(o)
	}
	reg.MustRegister(n.outcomes, n.queued)
}

// The outcomes fleet_role_notifications_total counts.
const (
	notifySent    = "sent"
	notifyFailed  = "failed"
	notifyDropped = "dropped"
)

func (n *Notifier) count(outcome string) {
	if n.outcomes != nil {
		n.outcomes.WithLabelValues(outcome).Inc()
	}
}

// retryAfter is the wait after a message's attempts-th failed send:
// backoff, doubled at each failure after the first, at most maxBackoff.
func retryAfter(attempts int, backoff, maxBackoff time.Duration) time.Duration {
	d := backoff
	for i := 1; i < attempts && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// run sends what is queued until ctx ends, saving the queue in store
// (nil: nowhere) whenever it changes. It runs while this replica leads,
// after restore and before the first pass.
func (n *Notifier) run(ctx context.Context, store notifyStore) {
	for {
		wait := time.Duration(-1)
		if n.isDirty() && store != nil {
			if err := n.save(ctx, store); err != nil {
				n.log.Warn("notification queue not saved; it is saved again", logkey.Err, err)
				wait = n.backoff
			}
		}
		if m, d, next := n.next(); d != nil {
			err := n.send(ctx, d, m.Message)
			if ctx.Err() != nil {
				return
			}
			n.sent(m, d, err)
			continue
		} else if next >= 0 && (wait < 0 || next < wait) {
			wait = next
		}
		var timer <-chan time.Time
		stop := func() bool { return false }
		if wait >= 0 {
			t := time.NewTimer(wait)
			timer, stop = t.C, t.Stop
		}
		select {
		case <-ctx.Done():
			stop()
			return
		case <-n.wake:
		case <-timer:
		}
		stop()
	}
}

// send sends msg to d within sendTimeout. Note: shoutrrr's services take
// no context, and its webhook waits for an answer without a limit; a send
// past it is a failure, left to finish on its own (were it to, the
// message is sent twice).
func (n *Notifier) send(ctx context.Context, d *destination, msg string) error {
	done := make(chan error, 1)
	go func() { done <- d.send(msg) }()
	t := time.NewTimer(n.sendTimeout)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("send: no answer within %s", n.sendTimeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// restore puts the saved messages, older than any queued since, first (a
// message to a URL no longer configured is dropped), and takes the saved
// decision and pause as the ones last told.
func (n *Notifier) restore(saved *api.NotifyQueue) {
	if saved == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var kept []queuedMessage
	for _, q := range saved.Queued {
		if n.dest(q.To) == nil {
			n.count(notifyDropped)
			n.log.Warn("notification dropped: its URL is no longer configured", logkey.Reason, q.Message)
			continue
		}
		n.seq++
		kept = append(kept, queuedMessage{QueuedNotification: q, seq: n.seq})
	}
	n.queue = append(kept, n.queue...)
	n.dryRunTold = saved.DryRunTold
	n.pause, n.pauseKnown = saved.Pause, true
	n.trim()
	n.dirty = true
}

func (n *Notifier) dest(id string) *destination {
	for _, d := range n.dests {
		if d.id == id {
			return d
		}
	}
	return nil
}

func (n *Notifier) isDirty() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dirty
}

// save writes the queue as it is now.
func (n *Notifier) save(ctx context.Context, store notifyStore) error {
	n.mu.Lock()
	q := api.NotifyQueue{Queued: make([]api.QueuedNotification, 0, len(n.queue)), DryRunTold: n.dryRunTold, Pause: n.pause}
	for _, m := range n.queue {
		q.Queued = append(q.Queued, m.QueuedNotification)
	}
	n.dirty = false
	n.mu.Unlock()
	if err := store.saveNotifyQueue(ctx, q); err != nil {
		n.mu.Lock()
		n.dirty = true
		n.mu.Unlock()
		return err
	}
	return nil
}

// next is the first message whose URL may be tried now, or, when none
// may, how long until one may (-1: nothing is queued).
func (n *Notifier) next() (queuedMessage, *destination, time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	now := n.now()
	wait := time.Duration(-1)
	for _, m := range n.queue {
		d := n.dest(m.To)
		if !d.next.After(now) {
			return m, d, 0
		}
		if w := d.next.Sub(now); wait < 0 || w < wait {
			wait = w
		}
	}
	return queuedMessage{}, nil, wait
}

// sent takes a sent message off the queue, or counts its failure and
// holds its URL back for the backoff.
func (n *Notifier) sent(m queuedMessage, d *destination, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	defer n.changed()
	i := slices.IndexFunc(n.queue, func(q queuedMessage) bool { return q.seq == m.seq })
	if err == nil {
		n.count(notifySent)
		d.next = time.Time{}
		if i >= 0 {
			n.queue = slices.Delete(n.queue, i, i+1)
		}
		return
	}
	n.count(notifyFailed)
	m.Attempts++
	wait := retryAfter(m.Attempts, n.backoff, n.maxBackoff)
	d.next = n.now().Add(wait)
	if i >= 0 {
		n.queue[i].Attempts = m.Attempts
	}
	n.log.Warn("notification not sent; it is tried again", logkey.Err, err, logkey.Attempt, m.Attempts, logkey.RetryIn, wait)
}

// changed marks the queue to be saved and sets the gauge; n.mu is held.
func (n *Notifier) changed() {
	n.dirty = true
	if n.queued != nil {
		n.queued.Set(float64(len(n.queue)))
	}
}

// trim drops the oldest messages past max_queued; n.mu is held.
func (n *Notifier) trim() {
	for len(n.queue) > n.max {
		n.count(notifyDropped)
		n.log.Warn("notification dropped: the queue is full", logkey.Reason, n.queue[0].Message)
		n.queue = slices.Delete(n.queue, 0, 1)
	}
	n.changed()
}

// say queues msg for every URL.
func (n *Notifier) say(msg string) {
	if n == nil || msg == "" {
		return
	}
	n.mu.Lock()
	now := n.now().UTC()
	for _, d := range n.dests {
		n.seq++
		n.queue = append(n.queue, queuedMessage{QueuedNotification: api.QueuedNotification{To: d.id, Message: msg, At: now}, seq: n.seq})
	}
	n.trim()
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// told queues the message a carried-out action is news of, if it is.
func (n *Notifier) told(plan swapplan.Plan) {
	if n == nil {
		return
	}
	n.say(NotifyMessage(plan))
}

// dryRun queues a dry run's decision once: the decision last told is
// kept with the queue, so that a restart does not tell it again, and is
// forgotten once a pass with every verdict made (none partial, as after a
// restart) reports no decision, so that one that comes back is told.
func (n *Notifier) dryRun(dryRun bool, plan swapplan.Plan, verdicts map[string]api.Verdict) {
	if n == nil {
		return
	}
	n.mu.Lock()
	d := plan.Decision
	if !dryRun || d == nil || plan.Swap != nil {
		if n.dryRunTold != nil && verdictsMade(verdicts) {
			n.dryRunTold = nil
			n.changed()
		}
		n.mu.Unlock()
		return
	}
	if n.dryRunTold != nil && n.dryRunTold.Out == d.Out && n.dryRunTold.In == d.In {
		n.mu.Unlock()
		return
	}
	n.dryRunTold = &api.Decision{Out: d.Out, In: d.In}
	n.mu.Unlock()
	n.say(fmt.Sprintf("fleet-role: dry run decided, and did not carry out, a swap of %s out for %s in: %s", d.Out, d.In, plan.Reason))
}

// verdictsMade: there are verdicts, and none waits for a full window.
func verdictsMade(verdicts map[string]api.Verdict) bool {
	for _, v := range verdicts {
		if v.State == api.VerdictPartial {
			return false
		}
	}
	return len(verdicts) > 0
}

// paused queues a pause or a resume when the pause in force differs from
// the one last told: the one kept with the queue, or, when none is kept,
// the one the status last published, so that a pause made while no
// controller ran is told.
func (n *Notifier) paused(snap swapplan.Snapshot) {
	if n == nil {
		return
	}
	n.mu.Lock()
	if !n.pauseKnown {
		n.pause, n.pauseKnown = snap.Status.Pause, true
	}
	msg := PauseMessage(n.pause, snap.Pause)
	if msg != "" {
		n.pause = snap.Pause
		n.changed()
	}
	n.mu.Unlock()
	n.say(msg)
}

// PauseMessage is what a change of the pause from prev to cur tells, or
// "" when it did not change.
func PauseMessage(prev, cur *api.Pause) string {
	by := func(p *api.Pause) string {
		if p.By == "" {
			return "someone"
		}
		return p.By
	}
	switch {
	case cur != nil && (prev == nil || !samePause(*prev, *cur)):
		return fmt.Sprintf("fleet-role: paused by %s at %s: %s; no swap starts until fleet-role resume", by(cur), cur.At.UTC().Format(time.RFC3339), cur.Reason)
	case cur == nil && prev != nil:
		return fmt.Sprintf("fleet-role: resumed; the pause by %s (%s) is lifted", by(prev), prev.Reason)
	}
	return ""
}

func samePause(a, b api.Pause) bool {
	return a.By == b.By && a.Reason == b.Reason && a.At.Equal(b.At)
}

// NotifyMessage is what a carried-out action tells, or "" when it is no
// news: a swap's start, its rollback, abandon or stuck, and its end. A
// clear-finished is no news: it is no swap's (none is under way), the
// end that left the host pending told that, and the alert on
// fleet_role_unfinished_demotions resolves when it is cleared.
func NotifyMessage(plan swapplan.Plan) string {
	rec := plan.Swap
	if rec == nil {
		return ""
	}
	head := fmt.Sprintf("fleet-role: swap %s (%s out, %s in, %s)", rec.ID, rec.Out, rec.In, rec.Origin)
	switch plan.Action.Type {
	case api.ActionStart:
		return fmt.Sprintf("%s started: %s", head, plan.Reason)
	case api.ActionRollback:
		return fmt.Sprintf("%s is rolling back: %s", head, plan.Reason)
	case api.ActionAbandon:
		return fmt.Sprintf("%s is abandoned: %s", head, plan.Reason)
	case api.ActionStuck:
		return fmt.Sprintf("%s is stuck and needs an operator: %s", head, plan.Reason)
	case api.ActionEnd:
		msg := fmt.Sprintf("%s ended %s", head, rec.Result)
		if rec.Reason != "" {
			msg += ": " + rec.Reason
		}
		return msg
	}
	return ""
}

// saveNotifyQueue writes the notifications not sent yet in the status
// ConfigMap (none: the key removed), one write at a time with the pass's.
func (e *executor) saveNotifyQueue(ctx context.Context, q api.NotifyQueue) error {
	value := ""
	if len(q.Queued) > 0 || q.DryRunTold != nil || q.Pause != nil {
		b, err := json.Marshal(q)
		if err != nil {
			return err
		}
		value = string(b)
	}
	e.statusMu.Lock()
	defer e.statusMu.Unlock()
	cm := e.cache.statusObject()
	if cm == nil && value == "" || cm != nil && cm.Data[api.NotifyQueueKey] == value {
		return nil
	}
	var out *corev1.ConfigMap
	var err error
	if cm == nil {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: api.StatusConfigMap},
			Data: map[string]string{api.NotifyQueueKey: value}}
		out, err = e.client.CoreV1().ConfigMaps(e.ns).Create(ctx, cm, metav1.CreateOptions{})
	} else {
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		if value == "" {
			delete(cm.Data, api.NotifyQueueKey)
		} else {
			cm.Data[api.NotifyQueueKey] = value
		}
		out, err = e.client.CoreV1().ConfigMaps(e.ns).Update(ctx, cm, metav1.UpdateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write %s/%s %s: %w", e.ns, api.StatusConfigMap, api.NotifyQueueKey, err)
	}
	e.cache.setStatus(out)
	return nil
}

// savedNotifyQueue is the queue the status ConfigMap keeps, nil when none
// reads.
func savedNotifyQueue(cm *corev1.ConfigMap, log *slog.Logger) *api.NotifyQueue {
	if cm == nil || cm.Data[api.NotifyQueueKey] == "" {
		return nil
	}
	var q api.NotifyQueue
	if err := json.Unmarshal([]byte(cm.Data[api.NotifyQueueKey]), &q); err != nil {
		log.Warn("the saved notification queue does not read; it is dropped", logkey.Err, err)
		return nil
	}
	return &q
}
