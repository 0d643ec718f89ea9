package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// The timing through a real API server is tests/controller's part; here,
// when it runs and what it counts.

func atStep(id, step string) swapplan.Plan {
	return swapplan.Plan{Step: step, Swap: &api.SwapRecord{ID: id}}
}

func TestTheWritesAreTimedOnlyWhileTheSwapIsAtItsLeadershipMoveOrMemberRemovalAndAFailedOneWidensTheGap(t *testing.T) {
	ctx := context.Background()
	client := k8sfake.NewClientset()
	var patches atomic.Int32
	client.PrependReactor("patch", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		if patches.Add(1) == 3 {
			return true, nil, errors.New("etcdserver: leader changed")
		}
		return false, nil, nil
	})
	failed := prometheus.NewCounter(prometheus.CounterOpts{Name: "failed"})
	w := newWriteTimer(client, "fleet-role", failed)

	w.follow(ctx, atStep("s1", api.StepDrainOut))
	assert.Nil(t, w.result("s1"), "nothing is timed before the step-down")
	w.follow(ctx, atStep("s1", api.StepStepDown))
	// Note: a write every quarter second against a fake clientset; the
	// 10 s waits below are outer limits for a busy machine, not timing.
	require.Eventually(t, func() bool { return patches.Load() >= 3 }, 10*time.Second, 10*time.Millisecond)
	w.follow(ctx, atStep("s1", api.StepRemoveMember))
	require.Eventually(t, func() bool { return patches.Load() >= 5 }, 10*time.Second, 10*time.Millisecond)
	w.follow(ctx, atStep("s1", api.StepMemberGone))
	n := patches.Load()
	time.Sleep(3 * writeEvery)
	assert.Equal(t, n, patches.Load(), "the timing stopped at the member-gone")

	got := w.result("s1")
	require.NotNil(t, got)
	assert.InDelta(t, int(n), got.Writes, 1, "each write made, but one the stop cut short")
	assert.Equal(t, 1, got.Failed)
	assert.Equal(t, 1.0, testutil.ToFloat64(failed))
	// Two ticks between successes, less the jitter of the writes.
	assert.Greater(t, time.Duration(got.LongestGap), writeEvery*3/2, "the write that failed left two ticks between successes")
	l, err := client.CoordinationV1().Leases("fleet-role").Get(ctx, api.WritesLease, metav1.GetOptions{})
	require.NoError(t, err, "the first write made the Lease")
	assert.Equal(t, api.ControllerHolder, *l.Spec.HolderIdentity)

	// A new swap starts from nothing; the last one's figures are gone.
	w.follow(ctx, atStep("s2", api.StepCordonIn))
	assert.Nil(t, w.result("s1"))
	assert.Nil(t, w.result("s2"))
	// An ended swap at a timed step (its end pending) is not timed.
	ended := atStep("s2", api.StepStepDown)
	ended.Swap.EndedAt = &time.Time{}
	w.follow(ctx, ended)
	time.Sleep(2 * writeEvery)
	assert.Nil(t, w.result("s2"))
}

func TestATimingWhoseContextEndedWithItsTermIsStartedAgain(t *testing.T) {
	client := k8sfake.NewClientset()
	var patches atomic.Int32
	client.PrependReactor("patch", "leases", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches.Add(1)
		return false, nil, nil
	})
	w := newWriteTimer(client, "fleet-role", prometheus.NewCounter(prometheus.CounterOpts{Name: "failed"}))
	term, lost := context.WithCancel(context.Background())
	w.follow(term, atStep("s1", api.StepStepDown))
	// Note: 10 s is an outer limit for writes a quarter second apart.
	require.Eventually(t, func() bool { return patches.Load() >= 1 }, 10*time.Second, 10*time.Millisecond)
	lost()
	time.Sleep(2 * writeEvery)
	n := patches.Load()
	var before int // a write the term's end cut short is not counted
	if r := w.result("s1"); r != nil {
		before = r.Writes
	}
	w.follow(context.Background(), atStep("s1", api.StepStepDown))
	// Note: the writes are counted once they return, after the fake has
	// seen them; the wait is for the count, not the fake's.
	require.Eventually(t, func() bool {
		r := w.result("s1")
		return patches.Load() > n && r != nil && r.Writes > before
	}, 10*time.Second, 10*time.Millisecond, "timed again in the next term")
	w.follow(context.Background(), atStep("s1", api.StepMemberGone))
	require.NotNil(t, w.result("s1"))
	assert.Greater(t, w.result("s1").Writes, before, "the next term's writes are counted")
}
