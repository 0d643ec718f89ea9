package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// Writes are timed every writeEvery, each given writeTimeout.
const (
	writeEvery   = 250 * time.Millisecond
	writeTimeout = 10 * time.Second
)

// timedSteps are the steps whose cost to the cluster's writes is timed:
// the leadership move and the member removal (by the agents, or by a
// voter when the outgoing one cannot).
var timedSteps = map[string]bool{api.StepStepDown: true, api.StepRemoveMember: true, api.StepRemoveByVoter: true}

// writeTimer times what a swap's leadership move and member removal cost
// the cluster's writes: while a pass finds the swap at one of those steps,
// it renews the controller's own Lease api.WritesLease, one write after
// another, and keeps per swap how many writes failed and the longest gap
// between two that succeeded. A timer restarted with the controller keeps
// what the new process timed.
type writeTimer struct {
	client kubernetes.Interface
	ns     string
	// failed counts the writes that failed, as they fail.
	failed prometheus.Counter

	mu     sync.Mutex
	swap   string
	cost   api.WriteCost
	stop   context.CancelFunc
	done   chan struct{}
	timing bool
}

func newWriteTimer(client kubernetes.Interface, ns string, failed prometheus.Counter) *writeTimer {
	return &writeTimer{client: client, ns: ns, failed: failed}
}

// follow starts the timing when the plan finds the swap at a timed step,
// and stops it when it is at any other (or none).
func (w *writeTimer) follow(ctx context.Context, plan swapplan.Plan) {
	at := plan.Swap != nil && plan.Swap.EndedAt == nil && timedSteps[plan.Step]
	w.mu.Lock()
	if plan.Swap != nil && plan.Swap.ID != w.swap {
		w.stopLocked()
		w.swap, w.cost = plan.Swap.ID, api.WriteCost{}
	}
	if w.timing && w.ended() {
		w.timing = false // its context ended with the term it began in
	}
	switch {
	case at && !w.timing:
		ctx, cancel := context.WithCancel(ctx)
		w.stop, w.done, w.timing = cancel, make(chan struct{}), true
		go w.run(ctx, w.done)
	case !at && w.timing:
		w.stopLocked()
	}
	w.mu.Unlock()
}

// stopLocked stops the timing and waits for it; w.mu is held, and the
// timing's goroutine takes it only between writes.
func (w *writeTimer) stopLocked() {
	if !w.timing {
		return
	}
	w.stop()
	done := w.done
	w.timing = false
	w.mu.Unlock()
	<-done
	w.mu.Lock()
}

// ended says the timing's goroutine has returned; w.mu is held.
func (w *writeTimer) ended() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// result is what the timing found of the swap; nil when it timed nothing.
func (w *writeTimer) result(swap string) *api.WriteCost {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.swap != swap || w.cost.Writes == 0 {
		return nil
	}
	c := w.cost
	return &c
}

// run writes until stopped: each write, when it succeeds, closes the gap
// since the last success (or the timing's start).
func (w *writeTimer) run(ctx context.Context, done chan struct{}) {
	defer close(done)
	last := time.Now()
	tick := time.NewTicker(writeEvery)
	defer tick.Stop()
	for {
		err := w.write(ctx)
		if ctx.Err() != nil {
			return // stopped mid-write: neither a success nor a failure
		}
		now := time.Now()
		w.mu.Lock()
		w.cost.Writes++
		if err != nil {
			w.cost.Failed++
			w.failed.Inc()
		} else {
			w.cost.LongestGap = max(w.cost.LongestGap, api.Duration(now.Sub(last)))
			last = now
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// write renews the Lease, creating it where there is none.
func (w *writeTimer) write(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	now := metav1.NewMicroTime(time.Now())
	patch := fmt.Appendf(nil, `{"spec":{"renewTime":%q}}`, now.UTC().Format(metav1.RFC3339Micro))
	_, err := w.client.CoordinationV1().Leases(w.ns).Patch(ctx, api.WritesLease, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		holder := api.ControllerHolder
		_, err = w.client.CoordinationV1().Leases(w.ns).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: w.ns, Name: api.WritesLease},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, RenewTime: &now},
		}, metav1.CreateOptions{})
	}
	return err
}
