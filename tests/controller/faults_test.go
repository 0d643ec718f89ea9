package controller_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/controller"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
)

// Faults mid-swap on the simulated fleet: the API server restarted at
// every step, two people asking at once, an agent cut off from the API
// server, a host's clock jumped. docs/hostile.md lists them with their
// outcomes.

// supervise runs the controller as its Deployment does: started again
// when it exits (its leadership lost while the API server was down),
// until the test ends. It returns how many times it exited.
func (e *env) supervise() *atomic.Int64 {
	var exits atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := 0; ctx.Err() == nil; n++ {
			c, err := controller.New(controller.Options{Config: e.cfg, Client: e.client(), Identity: fmt.Sprintf("replica-%d", n)})
			if err != nil {
				e.t.Error(err)
				return
			}
			if err := c.Run(ctx); err != nil {
				exits.Add(1)
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second): // the kubelet's restart back-off, shortened
			}
		}
	}()
	e.t.Cleanup(func() { cancel(); <-done })
	return &exits
}

// answered counts the reports the agents wrote for the swap, by host and
// action: each request of a swap is answered once unless it is repeated.
func answered(e *env, swap string) map[string]int {
	n := map[string]int{}
	for _, w := range e.d.Written() {
		if w.Swap == swap {
			n[w.Node+" "+w.Action+" "+w.State]++
		}
	}
	return n
}

// afterEachStep makes every controller made from now on call fault once
// it has sent a status of a step not seen before, before the write
// returns: the controller, waiting on its write, takes no further action
// until fault returns. A write that failed counts (one refused as a
// conflict, its cache behind after a restart, say): the controller
// reached the step. A write whose context ended does not: it is a
// replica's that lost its leadership, whose pass goes on until that
// write returns (client-go's leader election does not wait for it), a
// replica that reached no step. Faults run one at a time. It returns the
// steps seen so far.
func (e *env) afterEachStep(fault func(step string)) func() []string {
	var mu, faulting sync.Mutex
	var seen []string
	e.rest.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			step := statusStep(r)
			resp, err := rt.RoundTrip(r)
			if step == "" || r.Context().Err() != nil {
				return resp, err
			}
			faulting.Lock()
			defer faulting.Unlock()
			mu.Lock()
			isNew := len(seen) == 0 || seen[len(seen)-1] != step
			if isNew {
				seen = append(seen, step)
			}
			mu.Unlock()
			if isNew {
				fault(step)
			}
			return resp, err
		})
	})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// statusStep is the swap's step in a write of the status ConfigMap (in
// protobuf or JSON), or "".
func statusStep(r *http.Request) string {
	if r.Method == http.MethodGet || r.GetBody == nil || !strings.HasSuffix(r.URL.Path, "/configmaps/"+api.StatusConfigMap) {
		return ""
	}
	body, err := r.GetBody()
	if err != nil {
		return ""
	}
	defer body.Close()
	b, err := io.ReadAll(body)
	if err != nil {
		return ""
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(b, nil, nil)
	cm, ok := obj.(*corev1.ConfigMap)
	if err != nil || !ok {
		return ""
	}
	var st api.Status
	if json.Unmarshal([]byte(cm.Data[api.StatusKey]), &st) != nil || st.Swap == nil {
		return ""
	}
	return st.Step
}

// happyPath are the steps a swap of a voter for a standby publishes on
// the simulated fleet when nothing goes wrong (the runners' and the
// gates' steps pass within the pass that reaches them, unless a fault
// left the voters' samples stale).
var happyPath = []string{api.StepStart, api.StepSnapshot, api.StepCordonIn, api.StepDrainIn, api.StepPromote, api.StepJoin,
	api.StepCordonOut, api.StepDrainOut, api.StepStepDown, api.StepRemoveMember, api.StepMemberGone, api.StepCleanUp, api.StepUncordon}

// happyPathLeadingAnew are the steps of happyPath a controller publishes
// when a new replica leads after each step: the learner catches up (1 s)
// before the old replica's leadership expires (4 s), so the join, a wait
// on it, has passed by the new replica's first pass and is never
// published.
var happyPathLeadingAnew = slices.DeleteFunc(slices.Clone(happyPath), func(s string) bool { return s == api.StepJoin })

func TestTheAPIServerRestartedAtEveryStepRepeatsNoActionAndTheSwapFinishes(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	// The bounds are long enough for a restart on a busy machine: this is
	// about the restarts, not the bounds.
	b := &e.cfg.Bounds
	for _, d := range []*time.Duration{&b.Snapshot, &b.Runners, &b.Drain, &b.Promote, &b.Join, &b.StepDown, &b.RemoveMember, &b.MemberGone, &b.Uncordon, &b.Rollback} {
		*d = 3 * time.Minute
	}
	// Note: the API server is restarted once each step is published,
	// before the controller goes on. While it is down the fleet is frozen
	// (fleetsim plays nothing it cannot list), so a request the
	// controller wrote is answered only once the API server is back, and
	// the step that waits for the answer is published in its turn. It
	// stays down past the renew deadline: the controller loses its
	// leadership at each step, as on a busy machine, where the API
	// server takes that long to serve again, and a new replica resumes.
	le := e.cfg.LeaderElection
	seen := e.afterEachStep(func(string) {
		e.api.StopAPIServer()
		time.Sleep(le.RenewDeadline + le.RetryPeriod)
		// Note: on the controller's goroutine, where FailNow may not be
		// called.
		assert.NoError(t, e.api.StartAPIServer())
	})
	exits := e.supervise()
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	// An outer limit: each restart is a kube-apiserver start (about 19 s
	// alone, less under way: 12 of them took 117 s here), and the bounds
	// are 3 min.
	res := e.waitEnd(10 * time.Minute)
	require.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assertCompleted(t, e, "v1", "s1")
	t.Logf("the API server restarted after %d steps: %v; the controller exited %d times", len(seen()), seen(), exits.Load())
	assert.Subset(t, seen(), happyPathLeadingAnew, "the steps the API server restarted at")
	assert.Positive(t, exits.Load(), "the controller lost its leadership while the API server was down")
	for key, n := range answered(e, res.ID) {
		assert.Equal(t, 1, n, "%s answered more than once: a request repeated; the reports: %+v", key, e.d.Written())
	}
	for _, want := range []string{"s1 promote done", "v1 step-down done", "v1 finish done"} {
		assert.Contains(t, answered(e, res.ID), want)
	}
}

func TestTwoPeopleAskingForDifferentSwapsAtOnceOneWinsAndTheOtherIsRefusedWithTheReason(t *testing.T) {
	e := newEnv(t, 3, 2, 0)
	race := func() (winner, loser string) {
		t.Helper()
		asks := [][]string{{"v1", "s1"}, {"v2", "s2"}}
		type result struct {
			out, stderr string
			code        int
		}
		results := make([]result, len(asks))
		var start, wg sync.WaitGroup
		start.Add(1)
		for i, a := range asks {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start.Wait()
				out, stderr, code := e.cli("swap", a[0], a[1])
				results[i] = result{out, stderr, code}
			}()
		}
		start.Done()
		wg.Wait()
		var won, lost []string
		var w []string
		var refusal string
		for i, r := range results {
			switch r.code {
			case 0:
				won, w = append(won, asks[i][0]), asks[i]
			case 1:
				lost, refusal = append(lost, asks[i][0]), r.stderr
			default:
				t.Fatalf("exit %d: %s", r.code, r.stderr)
			}
		}
		require.Len(t, won, 1, "exactly one wins: %+v", results)
		require.Len(t, lost, 1)
		// Refused for the winner's request, or, once the controller took
		// it up, for its swap: either names the winner's pair.
		assert.Regexp(t, `refused: (\S+'s request to swap `+w[0]+` for `+w[1]+` \(at .*\) waits to be carried out: fleet-role swap --cancel withdraws it|swap \S+ \(`+w[0]+` out, `+w[1]+` in\) is under way)`, refusal)
		return won[0], lost[0]
	}
	// With no controller running the request waits, and each race is
	// decided by the API server's conditional update alone.
	for range 4 {
		winner, _ := race()
		_, data := e.status()
		var q api.ManualRequest
		require.NoError(t, json.Unmarshal([]byte(data[api.RequestKey]), &q))
		assert.Equal(t, winner, q.Out, "the request in force is the winner's")
		out, stderr, code := e.cli("swap", "--cancel")
		require.Equal(t, 0, code, stderr)
		assert.Contains(t, out, "withdrawn: ")
	}
	e.start()
	winner, loser := race()
	res := e.waitEnd(3 * time.Minute)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, winner, res.Out)
	time.Sleep(3 * time.Second)
	st, _ := e.status()
	assert.Nil(t, st.Swap, "the loser's swap never starts")
	assert.NotEqual(t, loser, st.Last.Out)
}

func TestAVotersAgentCutOffFromTheAPIServerMidSwapHoldsItAndItsReportsArriveOnceItIsBack(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.start()
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	var st api.Status
	require.Eventually(t, func() bool {
		st, _ = e.status()
		return st.Swap != nil && st.Step == api.StepJoin
	}, time.Minute, 20*time.Millisecond, "the join: %+v", st)
	cut := time.Now()
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].Cut = true })
	// Cut off for longer than every bound of a step it could stop at: the
	// swap holds, and nothing removes a member meanwhile.
	heldForV2 := regexp.MustCompile(`voter v2('s probe has been silent| has no fresh member list)`)
	require.Eventually(t, func() bool {
		st, _ = e.status()
		return heldForV2.MatchString(st.Reason)
	}, time.Minute, 50*time.Millisecond, "held for v2: %s", st.Reason)
	time.Sleep(30 * time.Second)
	st, _ = e.status()
	assert.Regexp(t, heldForV2, st.Reason, "still held")
	assert.Equal(t, 4, e.d.MemberCount(), "no member removed while a voter is silent")
	assert.False(t, e.node("v1").Annotations[api.AnnotationEtcdRemove] == "true", "OUT's removal not asked")
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].Cut = false })
	back := time.Now()
	res := e.waitEnd(3 * time.Minute)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assertCompleted(t, e, "v1", "s1")
	t.Logf("cut off for %s", back.Sub(cut).Round(time.Second))
	n, err := e.api.Client.CoreV1().Nodes().Get(context.Background(), "v2", metav1.GetOptions{})
	require.NoError(t, err)
	var p api.Probe
	require.NoError(t, json.Unmarshal([]byte(n.Annotations[api.AnnotationProbe]), &p))
	assert.True(t, p.At.After(back), "v2's samples arrive once it is back")
}

// TestAHostsClockJumpedMidSwapNeitherStopsTheSwapNorHidesASilentVoter
// jumps the clocks of v3 and the candidate at the join, back and then
// forward, and silences v3 for a while: its last sample, stamped by its
// clock, looks fresh for ten minutes after a forward jump, yet the swap
// must hold on it as silent (the controller times samples by when it saw
// them change), then complete once v3 samples again.
func TestAHostsClockJumpedMidSwapNeitherStopsTheSwapNorHidesASilentVoter(t *testing.T) {
	e := newEnv(t, 3, 2, 0)
	e.start()
	for _, jump := range []time.Duration{-10 * time.Minute, 10 * time.Minute} {
		out, in := "v1", "s1"
		if jump > 0 {
			out, in = "v2", "s2"
		}
		_, stderr, code := e.cli("swap", out, in)
		require.Equal(t, 0, code, stderr)
		var st api.Status
		require.Eventually(t, func() bool {
			st, _ = e.status()
			return st.Swap != nil && st.Swap.Out == out && st.Step == api.StepJoin
		}, time.Minute, 20*time.Millisecond, "the join: %+v", st)
		e.d.With(func(d *fleetsim.Driver) {
			for _, h := range []string{"v3", in} {
				d.Hosts[h].ClockOffset = jump
			}
			d.Hosts["v3"].SilentUntil = time.Now().Add(time.Hour)
		})
		// Seen once three probe periods (3 x 2 s) passed and a pass read
		// it: a minute is the slack a busy 2-core machine needs for the
		// controller's passes and the informers' lag, not a measured
		// bound; it passed in seconds here. Until the candidate votes,
		// the join waits on v3's member list, which is not fresh; past
		// the join, every step holds on v3's silent probe.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			st, _ = e.status()
			assert.Regexp(c, `voter v3 has no fresh member list|every step holds: voter v3's probe has been silent since`, st.Reason, "jump %s: v3 silent is not seen", jump)
			assert.NotNil(c, st.Swap, "the swap holds, it does not end")
		}, time.Minute, 20*time.Millisecond)
		e.d.With(func(d *fleetsim.Driver) { d.Hosts["v3"].SilentUntil = time.Time{} })
		res := e.waitEnd(3 * time.Minute)
		assert.Equal(t, api.ResultCompleted, res.Result, "jump %s: %s", jump, res.Reason)
		assertCompleted(t, e, out, in)
		e.d.With(func(d *fleetsim.Driver) {
			for _, h := range d.Hosts {
				h.ClockOffset = 0
			}
		})
	}
}
