package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/fleet-role/fleet-role/api"
)

// swap asks for a manual swap and waits for its end.
func (f *Fleet) swap(t *testing.T, out, in string, timeout time.Duration) *api.SwapResult {
	t.Helper()
	prev := f.Status().Last
	_, stderr, code := f.CLI("swap", out, in)
	require.Equal(t, 0, code, stderr)
	return f.waitEnd(t, prev, timeout)
}

// waitEnd waits for a swap to end after prev, the last one before.
func (f *Fleet) waitEnd(t *testing.T, prev *api.SwapResult, timeout time.Duration) *api.SwapResult {
	t.Helper()
	defer func() {
		if t.Failed() {
			f.logStall(t)
		}
	}()
	var st api.Status
	f.Wait(timeout, "the swap ends", func() error {
		st = f.Status()
		if st.Last != nil && st.Swap == nil && (prev == nil || st.Last.ID != prev.ID) {
			// Note: the end records the result in the status, then
			// releases the Lease; a controller killed between the two
			// releases it once it leads again.
			if l := f.Lease(); l != nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
				return fmt.Errorf("ended %s, the Lease still held by %s", st.Last.Result, *l.Spec.HolderIdentity)
			}
			f.swapEnded()
			return nil
		}
		return fmt.Errorf("step %s: %s", st.Step, st.Reason)
	})
	return st.Last
}

// logStall logs, for a swap that did not end, what tells a controller
// that stopped passing from agents that stopped reporting: when the
// status was last written, who holds the Lease, each Node's last probe
// sample, and the last lines each agent logged of its apiservers.
func (f *Fleet) logStall(t *testing.T) {
	st := f.Status()
	holder := ""
	if l := f.Lease(); l != nil && l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	t.Logf("stalled: the status written at %s, the Lease held by %q", st.UpdatedAt.Format(time.RFC3339), holder)
	for _, n := range f.Order {
		var p api.Probe
		if node, err := f.Client.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{}); err == nil {
			_ = json.Unmarshal([]byte(node.Annotations[api.AnnotationProbe]), &p)
		}
		out, _ := f.Hosts[n].exec("sh", "-c", "journalctl --no-pager -o short-precise -u fleet-role-agent | grep -i apiserver | tail -n 4")
		t.Logf("stalled: %s's last probe sample %s; its agent on its apiservers: %s", n, p.At.Format(time.RFC3339), strings.ReplaceAll(out, "\n", " | "))
	}
}

// waitFreshProbe waits for a probe sample of the host taken after now.
func (f *Fleet) waitFreshProbe(name string, timeout time.Duration) {
	f.t.Helper()
	since := time.Now()
	f.Wait(timeout, name+" has a fresh probe sample", func() error {
		var p api.Probe
		if err := json.Unmarshal([]byte(f.Node(name).Annotations[api.AnnotationProbe]), &p); err != nil {
			return err
		}
		if !p.At.After(since) {
			return fmt.Errorf("its last sample is of %s", p.At.Format(time.RFC3339))
		}
		return nil
	})
}

// atStep waits for the swap under way to reach one of the steps.
func (f *Fleet) atStep(steps []string, timeout time.Duration) {
	f.Wait(timeout, "the swap reaches "+strings.Join(steps, " or "), func() error {
		st := f.Status()
		if st.Swap != nil && slices.Contains(steps, st.Step) {
			return nil
		}
		return fmt.Errorf("step %q: %s", st.Step, st.Reason)
	})
}

// everyStep runs a swap, calling at once each step the swap enters. The
// steps are read from a watch of the status ConfigMap, which delivers
// every write the controller makes (a step it passes between two polls
// is seen all the same); at is called in order, the events written
// meanwhile waiting for it.
func (f *Fleet) everyStep(t *testing.T, out, in string, at func(step string)) *api.SwapResult {
	t.Helper()
	prev := f.Status().Last
	// Note: 6 minutes, the bound of the poll this replaced: the longest
	// swap a fault scenario runs this way, the candidate that never comes
	// up, rolls back past its shortened bounds in 3m32s here; a swap whose
	// controller is killed at each of its dozen steps, each kill waiting
	// out the replicas' restart and the leadership's expiry, took 59 s.
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	cms := f.Client.CoreV1().ConfigMaps(api.Namespace)
	only := fields.OneTermEqualSelector("metadata.name", api.StatusConfigMap).String()
	list, err := cms.List(ctx, metav1.ListOptions{FieldSelector: only})
	require.NoError(t, err)
	rv := list.ResourceVersion
	_, stderr, code := f.CLI("swap", out, in)
	require.Equal(t, 0, code, stderr)
	seen := map[string]bool{}
	var st api.Status
	for ctx.Err() == nil {
		w, err := cms.Watch(ctx, metav1.ListOptions{FieldSelector: only, ResourceVersion: rv})
		if err != nil {
			time.Sleep(200 * time.Millisecond) // the API server's answer again, at the poll's pace
			continue
		}
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if ev.Type == watch.Error || !ok {
				rv = "" // too old: watched again from the current state
				break
			}
			rv = cm.ResourceVersion
			st = api.Status{}
			_ = json.Unmarshal([]byte(cm.Data[api.StatusKey]), &st)
			if st.Last != nil && st.Swap == nil && (prev == nil || st.Last.ID != prev.ID) {
				w.Stop()
				f.swapEnded()
				return st.Last
			}
			if st.Swap != nil && st.Step != "" && !seen[st.Step] {
				seen[st.Step] = true
				at(st.Step)
			}
		}
		w.Stop()
	}
	t.Fatalf("the swap did not end within 6m: step %s: %s\n%s", st.Step, st.Reason, f.Journals())
	return nil
}

// noSwapStarts checks, while five probe periods go by, that no swap
// starts, and then that no one holds the Lease.
func (f *Fleet) noSwapStarts(t *testing.T) {
	t.Helper()
	held := time.Now().Add(5 * f.opts.ProbePeriod)
	for time.Now().Before(held) {
		st := f.Status()
		require.Nil(t, st.Swap, "no swap starts: %s", st.Reason)
		time.Sleep(200 * time.Millisecond)
	}
	if l := f.Lease(); l != nil && l.Spec.HolderIdentity != nil {
		assert.Empty(t, *l.Spec.HolderIdentity, "no one holds the Lease")
	}
}

// heldNaming waits until the status says why the swap is held with want,
// no swap starting meanwhile: another gate may hold it as well for a while
// (a voter's sample over its fsync limit on a busy machine), and the gates
// name the first that holds.
func (f *Fleet) heldNaming(t *testing.T, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	var seen []string
	for {
		st := f.Status()
		require.Nil(t, st.Swap, "no swap starts: %s", st.Reason)
		if strings.Contains(st.Reason, want) {
			t.Logf("held: %s", st.Reason)
			return
		}
		if len(seen) == 0 || seen[len(seen)-1] != st.Reason {
			seen = append(seen, st.Reason)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the status does not say %q within %s; it said:\n%s", want, d, strings.Join(seen, "\n"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// ended checks that the swap ended with the result, and what must hold
// after every swap (Check).
func (f *Fleet) ended(t *testing.T, res *api.SwapResult, result string) {
	t.Helper()
	require.Equal(t, result, res.Result, res.Reason)
	require.NoError(t, f.Check(result))
}
