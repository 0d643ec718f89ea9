package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/role"
)

// The backoff between two attempts of a decision whose steps failed: 2 s,
// doubled each time up to a minute, each wait up to a fifth longer at
// random, so that the agents of hosts that fail alike do not retry in
// step. Note: without it a failing start was tried again at once, every
// attempt as long as the unit's start, and k3s's own writes in the data
// dir woke the loop each time: the agent did nothing else.
var retryBackoff = wait.Backoff{Duration: 2 * time.Second, Factor: 2, Jitter: 0.2, Steps: 8, Cap: time.Minute}

// retry is the decision whose steps last failed and when it may be tried
// again. Only the same decision waits: another one (a request that came
// meanwhile, a member gone) is carried out at once.
type retry struct {
	key      string
	attempts int
	backoff  wait.Backoff
	next     time.Time
	err      error
}

// decisionKey names a decision: what it does, its steps and the request it
// answers, if any.
func decisionKey(d role.Decision) string {
	var b strings.Builder
	b.WriteString(d.Do)
	for _, s := range d.Steps {
		b.WriteString(" " + string(s))
	}
	if d.Report != nil {
		b.WriteString(" " + d.Report.Swap + "/" + d.Report.Action)
		if q := d.Report.Answers; q != nil {
			b.WriteString("@" + q.At.UTC().Format(time.RFC3339Nano))
		}
	}
	return b.String()
}

// failed records a failed attempt of the decision and returns when it is
// tried again.
func (a *Agent) failed(key string, err error) time.Time {
	r := a.retry
	if r == nil || r.key != key {
		r = &retry{key: key, backoff: retryBackoff}
	}
	r.attempts++
	r.err = err
	r.next = a.clock.Now().Add(r.backoff.Step())
	a.retry = r
	return r.next
}

// errPreempted: the steps were stopped for something the host was told
// meanwhile.
var errPreempted = errors.New("stopped for a newer instruction on this host's Node")

// preemptible says a decision may be stopped midway by a newer
// instruction: one that answers no request (a server kept running, a
// demotion finished). A request's answer is carried out whole.
func preemptible(d role.Decision) bool {
	return d.Report == nil || d.Report.Answers == nil
}

// preemptOn returns a context that ends when the Node brings an
// instruction the facts f did not have: a request not yet handled, or a
// member-gone that names another swap. Note: a start of k3s's server may
// last up to the unit's start timeout (systemd's job, with
// Restart=always, waits out each failed start's restart delay); a
// step-down asked meanwhile must not wait behind it.
func (a *Agent) preemptOn(ctx context.Context, f role.Facts) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		for {
			if a.newInstruction(f) {
				cancel(errPreempted)
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-a.nodeChanged:
			}
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// newInstruction says the Node now carries an instruction that the facts
// f did not: a valid request other than the one handled and the one f
// had, or member-gone naming another swap than f's.
func (a *Agent) newInstruction(f role.Facts) bool {
	n := a.node.node()
	if n == nil {
		return false
	}
	if v, ok := n.Annotations[api.AnnotationRequest]; ok {
		var q api.Request
		if json.Unmarshal([]byte(v), &q) == nil && q.Validate() == nil && !sameRequest(&q, f.Handled) && !sameRequest(&q, f.Request) {
			return true
		}
	}
	gone := n.Annotations[api.AnnotationMemberGone]
	return gone != "" && gone != f.MemberGoneSwap
}

// sameRequest says both are one request: the same swap, action and time.
func sameRequest(q, o *api.Request) bool {
	return q != nil && o != nil && q.Swap == o.Swap && q.Action == o.Action && q.At.Equal(o.At)
}

// say tells the retry's wait on the status line.
func (r *retry) say(why string) string {
	return why + "; its last attempt failed (" + r.err.Error() + "): tried again at " + r.next.UTC().Format(time.TimeOnly)
}
