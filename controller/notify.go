package controller

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/nicholas-fedor/shoutrrr/pkg/router"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/api/logkey"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/swapplan"
)

// notifyQueue is how many messages may wait to be sent; past it a message
// is dropped, and counted, rather than a pass held up.
const notifyQueue = 64

// Notifier tells a swap's start, end, rollback, abandon and stuck to the
// configured shoutrrr URLs, as kured tells its reboots: one message after
// another, in order, off the pass, each to every URL.
type Notifier struct {
	router *router.ServiceRouter
	urls   int
	queue  chan string
	log    *slog.Logger
	sent   *prometheus.CounterVec
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
	r, err := router.New(nil)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, e := range urls {
		if err := r.AddService(e.url); err != nil {
			scheme, _, _ := strings.Cut(e.url, ":")
			msg := strings.ReplaceAll(err.Error(), e.url, scheme+"://…")
			errs = append(errs, fmt.Errorf("%s (%s://…): %s", e.key, scheme, msg))
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", config.ErrInvalid, errors.Join(errs...))
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Notifier{router: r, urls: len(urls), queue: make(chan string, notifyQueue), log: log}, nil
}

// register counts the notifications on reg.
func (n *Notifier) register(reg prometheus.Registerer) {
	n.sent = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_role_notifications_total",
		Help: "Notifications of a swap's start, end, rollback, abandon and stuck, by outcome: sent, failed (by a URL) or dropped (the queue full)."},
		[]string{"outcome"})
	reg.MustRegister(n.sent)
}

// run sends what is queued until stop is closed.
func (n *Notifier) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case msg := <-n.queue:
			for _, err := range n.router.Send(msg, nil) {
				if err != nil {
					n.count("failed")
					n.log.Warn("notification not sent", logkey.Err, err)
				} else {
					n.count("sent")
				}
			}
		}
	}
}

func (n *Notifier) count(outcome string) {
	if n.sent != nil {
		n.sent.WithLabelValues(outcome).Inc()
	}
}

// told queues the message a carried-out action is news of, if it is.
func (n *Notifier) told(plan swapplan.Plan) {
	if n == nil {
		return
	}
	msg := NotifyMessage(plan)
	if msg == "" {
		return
	}
	select {
	case n.queue <- msg:
	default:
		n.count("dropped")
		n.log.Warn("notification dropped: the queue is full", logkey.Reason, msg)
	}
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
