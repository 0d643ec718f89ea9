package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/api/logkey"
)

// reporter writes the pending report on the Node, retrying with backoff
// until the API server takes it; the report stays in the state file until
// then, so that one made while the host had no route to the API server,
// or before the agent restarted, is delivered after.
type reporter struct {
	st       *store
	annotate func(ctx context.Context, key, value string) error
	wake     chan struct{}
	backoff  wait.Backoff
	log      *slog.Logger
}

func newReporter(st *store, annotate func(ctx context.Context, key, value string) error, log *slog.Logger) *reporter {
	return &reporter{
		st:       st,
		annotate: annotate,
		wake:     make(chan struct{}, 1),
		backoff:  wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: 1 << 30, Cap: 30 * time.Second},
		log:      log,
	}
}

// poke tells the reporter a report is pending.
func (r *reporter) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *reporter) run(ctx context.Context) {
	b := r.backoff
	for {
		p := r.st.get().Pending
		if p == nil {
			select {
			case <-ctx.Done():
				return
			case <-r.wake:
				continue
			}
		}
		data, err := json.Marshal(p)
		if err != nil {
			r.log.Error("a pending report cannot be encoded; dropping it", logkey.Err, err)
			_ = r.st.update(func(s *api.AgentState) { s.Pending = nil })
			continue
		}
		if err := r.annotate(ctx, api.AnnotationReport, string(data)); err != nil {
			wait := b.Step()
			r.log.Warn("report not written; retrying", logkey.Swap, p.Swap, logkey.Action, p.Action, logkey.State, p.State,
				logkey.RetryIn, wait.Round(time.Millisecond), logkey.Err, err)
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			continue
		}
		b = r.backoff
		r.log.Info("report written", logkey.Swap, p.Swap, logkey.Action, p.Action, logkey.State, p.State)
		if err := r.st.update(func(s *api.AgentState) {
			if s.Pending != nil {
				if cur, _ := json.Marshal(s.Pending); bytes.Equal(cur, data) {
					s.Pending = nil
				}
			}
		}); err != nil {
			r.log.Error("a written report is still kept as pending", logkey.Err, err)
		}
	}
}
