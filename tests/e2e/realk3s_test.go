package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/api"
)

// unitStop watches a host's unit until it is seen stopped, for the time
// it was first seen so: no earlier than the unit stopped.
type unitStop struct {
	mu      sync.Mutex
	stopped time.Time
	done    chan struct{}
	quit    chan struct{}
}

func (f *Fleet) watchUnitStop(h *Host, unit string) *unitStop {
	w := &unitStop{done: make(chan struct{}), quit: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			if out, _ := h.exec("systemctl", "is-active", unit); out != "active" && out != "activating" && out != "reloading" && out != "deactivating" {
				w.mu.Lock()
				w.stopped = time.Now()
				w.mu.Unlock()
				return
			}
			select {
			case <-w.quit:
				return
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	f.t.Cleanup(w.stop)
	return w
}

func (w *unitStop) stop() {
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
	<-w.done
}

// at is when the unit was first seen stopped; zero while it was not.
func (w *unitStop) at() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stopped
}

// sampleSeen is a host's first probe sample taken after a moment: when
// its agent took it, and when the test first read it on the Node.
type sampleSeen struct{ At, Read time.Time }

// probesAfter records, for each host that has none yet, the probe sample
// on its Node if it was taken after since.
func (f *Fleet) probesAfter(since time.Time, seen map[string]sampleSeen) error {
	nodes, err := f.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err
	}
	read := time.Now()
	for _, n := range nodes.Items {
		if _, ok := f.Hosts[n.Name]; !ok || !seen[n.Name].At.IsZero() {
			continue
		}
		var p api.Probe
		if err := json.Unmarshal([]byte(n.Annotations[api.AnnotationProbe]), &p); err != nil {
			continue
		}
		if p.At.After(since) {
			seen[n.Name] = sampleSeen{At: p.At, Read: read}
		}
	}
	return nil
}

// swapReporting runs a swap by hand (fleet-role swap OUT IN) and waits
// for its end; meanwhile, from when the outgoing voter's k3s.service is
// first seen stopped, it reads every Node for the first probe sample of
// each host taken after that, and waits for one of each (up to a minute
// after the stop) before it returns.
func (f *Fleet) swapReporting(t *testing.T, out, in string, timeout time.Duration) (*api.SwapResult, time.Time, map[string]sampleSeen) {
	t.Helper()
	prev := f.Status().Last
	stop := f.watchUnitStop(f.Hosts[out], "k3s.service")
	_, stderr, code := f.CLI("swap", out, in)
	require.Equal(t, 0, code, stderr)
	seen := map[string]sampleSeen{}
	var res *api.SwapResult
	f.Wait(timeout, "the swap ends", func() error {
		if at := stop.at(); !at.IsZero() {
			_ = f.probesAfter(at, seen)
		}
		st := f.Status()
		if st.Last != nil && st.Swap == nil && (prev == nil || st.Last.ID != prev.ID) {
			res = st.Last
			return nil
		}
		return fmt.Errorf("step %s: %s", st.Step, st.Reason)
	})
	stopped := stop.at()
	require.False(t, stopped.IsZero(), "%s's k3s.service was seen stopped", out)
	f.Wait(time.Until(stopped.Add(time.Minute)), "every host's agent reports a probe sample after "+out+"'s k3s stopped", func() error {
		if err := f.probesAfter(stopped, seen); err != nil {
			return err
		}
		for _, n := range f.Order {
			if seen[n].At.IsZero() {
				return fmt.Errorf("%s has no sample after %s", n, stopped.Format("15:04:05.000"))
			}
		}
		return nil
	})
	for _, n := range f.Order {
		assert.LessOrEqual(t, seen[n].Read.Sub(stopped), time.Minute, "%s's first sample after %s's k3s stopped was read within a minute", n, out)
	}
	return res, stopped, seen
}

// threeVotersNoLearner checks etcd's member list: three voters, no
// learner.
func (f *Fleet) threeVotersNoLearner(t *testing.T) {
	t.Helper()
	m, err := f.Members()
	require.NoError(t, err)
	t.Logf("etcd's members: voters %v, learners %v", m.Voters, m.Learners)
	assert.Len(t, m.Voters, 3, "three voters")
	assert.Empty(t, m.Learners, "no learner")
}

// TestOnRealK3s runs the real-k3s scenarios on one fleet, deployed from
// nothing by the playbook with its default variables, in order: each
// starts from where the one before left the fleet.
func TestOnRealK3s(t *testing.T) {
	start := time.Now()
	lap := start
	took := func(what string) {
		t.Logf("timing: %s: %s (%s in all)", what, time.Since(lap).Round(time.Second), time.Since(start).Round(time.Second))
		lap = time.Now()
	}
	// Note: the waits here (10 and 20 minutes) are the test's outer
	// limits, not what it asserts: five real k3s hosts share two cores,
	// and each swap runs at fleet-role's default bounds (a 5 s election,
	// k3s's learner promotion, the probe's windows); the runs measured
	// 1-2.5 minutes a swap and under a minute to a fit host.
	d := DeployOnK3s(t, Options{Hosts: RealK3sHosts, Log: t.Logf})
	took("deployed from nothing on real k3s")
	d.threeVotersNoLearner(t)

	t.Run("TheSwapOfTheBootstrapServerCompletesWithEveryAgentReportingAfterItsK3sStoppedAndASecondSwapCompletesEachLeavingThreeVotersAndNoLearner", func(t *testing.T) {
		d.WaitFit(10 * time.Minute)
		took("every host fit")

		// The bootstrap server (cluster-init) out, the standby in, with
		// writes to etcd and to the API (through the kubernetes Service)
		// throughout, counted.
		c := d.Etcd()
		writes, apiWrites := d.StartWrites(c), d.StartAPIWrites()
		res, stopped, seen := d.swapReporting(t, "v1", "s1", 20*time.Minute)
		count, apiCount := writes.Count(), apiWrites.Count()
		writes.Stop()
		apiWrites.Stop()
		t.Logf("v1 out, s1 in: %s: %s; writes to etcd: %s; to the API: %s", res.Result, res.Reason, count, apiCount)
		for _, n := range d.Order {
			t.Logf("%s: its first probe sample after v1's k3s was seen stopped: taken %s after, read %s after", n,
				seen[n].At.Sub(stopped).Round(time.Millisecond), seen[n].Read.Sub(stopped).Round(time.Millisecond))
		}
		require.Equal(t, api.ResultCompleted, res.Result, res.Reason)
		require.NoError(t, d.Check(api.ResultCompleted))
		d.threeVotersNoLearner(t)
		writesAcross(t, d, c, count)
		took("the swap of the bootstrap server v1 for s1")

		// A second swap: v2 out, and v1, staged still, in again (its
		// agent names a live voter for it to join through).
		d.Wait(10*time.Minute, "v1 is eligible again", func() error { return d.Eligible("v1") })
		took("v1 eligible again")
		res = d.swap(t, "v2", "v1", 20*time.Minute)
		t.Logf("v2 out, v1 in: %s: %s", res.Result, res.Reason)
		d.ended(t, res, api.ResultCompleted)
		d.threeVotersNoLearner(t)
		took("the second swap, v2 for v1")
	})
}
