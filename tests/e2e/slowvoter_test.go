package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/fleet-role/fleet-role/api"
)

// slowDiskIOPS is what a disk turned slow takes of writes a second
// (Host.SlowDisk): on the double each synced write then waits about
// 300 ms; docs/testing.md has what it gives on real k3s.
const slowDiskIOPS = 10

// walFsync is etcd's own histogram of its WAL's fsyncs.
const walFsync = "etcd_disk_wal_fsync_duration_seconds"

// etcdHistogram reads a histogram of the host's etcd member from the
// member's own metrics, where k3s serves them on the host: loopback,
// port 2381, unless etcd-expose-metrics is set (k3s pkg/etcd/etcd.go,
// (*ETCD).metricsURL). Read inside the host, as an operator's curl on it
// would.
func (h *Host) etcdHistogram(name string) (*dto.Histogram, error) {
	out, err := h.exec("python3", "-c",
		`import sys, urllib.request; sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:2381/metrics", timeout=10).read().decode())`)
	if err != nil {
		return nil, fmt.Errorf("%s: etcd's metrics: %v: %s", h.Name, err, tail(out, 5))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(out + "\n"))
	if err != nil {
		return nil, fmt.Errorf("%s: etcd's metrics: %w", h.Name, err)
	}
	fam := families[name]
	if fam == nil || len(fam.GetMetric()) != 1 || fam.GetMetric()[0].GetHistogram() == nil {
		return nil, fmt.Errorf("%s: etcd's metrics have no histogram %s", h.Name, name)
	}
	return fam.GetMetric()[0].GetHistogram(), nil
}

// quantileBetween is the q-quantile of what a cumulative histogram
// counted from before to after, as Prometheus's histogram_quantile
// estimates it (linear within a bucket; the largest finite bound for a
// rank in the +Inf bucket), and how many it counted.
func quantileBetween(q float64, before, after *dto.Histogram) (time.Duration, uint64) {
	if after.GetSampleCount() < before.GetSampleCount() {
		before = &dto.Histogram{} // the member restarted since: what it counted from then
	}
	n := after.GetSampleCount() - before.GetSampleCount()
	if n == 0 {
		return 0, 0
	}
	prev := map[float64]uint64{}
	for _, b := range before.GetBucket() {
		prev[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	buckets := slices.Clone(after.GetBucket())
	sort.Slice(buckets, func(i, j int) bool { return buckets[i].GetUpperBound() < buckets[j].GetUpperBound() })
	rank := q * float64(n)
	lower, below := 0.0, uint64(0)
	for _, b := range buckets {
		upper := b.GetUpperBound()
		cum := b.GetCumulativeCount() - prev[upper]
		if math.IsInf(upper, 1) {
			break
		}
		if float64(cum) >= rank {
			in := float64(cum - below)
			frac := 1.0
			if in > 0 {
				frac = (rank - float64(below)) / in
			}
			return time.Duration((lower + (upper-lower)*frac) * float64(time.Second)), n
		}
		lower, below = upper, cum
	}
	return time.Duration(lower * float64(time.Second)), n
}

func TestTheQuantileOfAHistogramBetweenTwoReadingsIsTheDeltasAsPrometheusEstimatesIt(t *testing.T) {
	hist := func(count uint64, cum ...uint64) *dto.Histogram {
		bounds := []float64{0.001, 0.01, 0.1, 1, math.Inf(1)}
		h := &dto.Histogram{SampleCount: &count}
		for i := range cum {
			h.Bucket = append(h.Bucket, &dto.Bucket{UpperBound: &bounds[i], CumulativeCount: &cum[i]})
		}
		return h
	}
	before := hist(100, 90, 100, 100, 100, 100)
	// 100 more: 10 under 10 ms, 90 between 100 ms and 1 s.
	after := hist(200, 90, 110, 110, 200, 200)
	p99, n := quantileBetween(0.99, before, after)
	assert.Equal(t, uint64(100), n)
	// Rank 99 of 100: the 89th of 90 in (0.1, 1]: 0.1 + 0.9*89/90.
	assert.InDelta(t, 0.1+0.9*89/90, p99.Seconds(), 1e-9)
	p50, _ := quantileBetween(0.5, before, after)
	assert.InDelta(t, 0.1+0.9*40/90, p50.Seconds(), 1e-9, "the samples before are not counted")
	// Past every finite bound: the largest finite bound.
	inf := hist(300, 90, 110, 110, 200, 300)
	top, _ := quantileBetween(0.99, after, inf)
	assert.Equal(t, time.Second, top)
	none, n := quantileBetween(0.99, after, after)
	assert.Zero(t, none)
	assert.Zero(t, n)
	// A member restarted between the readings counts from its start.
	restarted, n := quantileBetween(0.5, after, hist(10, 0, 10, 10, 10, 10))
	assert.Equal(t, uint64(10), n)
	assert.InDelta(t, 0.001+0.009*5/10, restarted.Seconds(), 1e-9)
}

// leader is the host whose member leads etcd, as the first member that
// answers says.
func (f *Fleet) leader() (string, error) {
	var errs []string
	for _, h := range f.servers() {
		name, err := f.leaderSaidBy(h)
		if err == nil {
			return name, nil
		}
		errs = append(errs, h.Name+": "+err.Error())
	}
	return "", fmt.Errorf("no member says who leads: %s", strings.Join(errs, "; "))
}

// leaderSaidBy is the host whose member leads etcd, as h's member says.
func (f *Fleet) leaderSaidBy(h *Host) (string, error) {
	if _, err := f.membersFrom(h); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*f.electionTimeout())
	defer cancel()
	st, err := h.etcd.Status(ctx, f.etcdURL(h.IP))
	if err != nil {
		return "", err
	}
	resp, err := h.etcd.MemberList(ctx)
	if err != nil {
		return "", err
	}
	for _, m := range resp.Members {
		if m.ID == st.Leader {
			return strings.SplitN(m.Name, "-", 2)[0], nil
		}
	}
	return "", fmt.Errorf("the leader %x is not listed", st.Leader)
}

// gaps keeps, for each key, the last time seen and the longest gap
// between two times seen one after the other.
type gaps struct {
	mu      sync.Mutex
	last    map[string]time.Time
	longest map[string]time.Duration
}

func newGaps() *gaps {
	return &gaps{last: map[string]time.Time{}, longest: map[string]time.Duration{}}
}

func (g *gaps) see(key string, at time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if last, ok := g.last[key]; ok {
		if !at.After(last) {
			return
		}
		g.longest[key] = max(g.longest[key], at.Sub(last))
	}
	g.last[key] = at
}

// Longest is each key's longest gap.
func (g *gaps) Longest() map[string]time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return maps.Clone(g.longest)
}

// watchObjects watches one kind of object from now until the poller
// stops, handing each object an event carries to fn: watched again from
// the last resourceVersion seen when the watch ends (a server swapped
// out ends it), from the current state when that is too old.
func (f *Fleet) watchObjects(watchFn func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error), fn func(runtime.Object)) *poller {
	ctx, cancel := context.WithCancel(context.Background())
	p := &poller{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		<-p.quit
		cancel()
	}()
	go func() {
		defer close(p.done)
		rv := ""
		for ctx.Err() == nil {
			w, err := watchFn(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				select {
				case <-ctx.Done():
				case <-time.After(200 * time.Millisecond):
				}
				continue
			}
			for ev := range w.ResultChan() {
				m, ok := ev.Object.(metav1.Object)
				if ev.Type == watch.Error || !ok {
					rv = "" // too old: watched again from the current state
					break
				}
				rv = m.GetResourceVersion()
				fn(ev.Object)
			}
			w.Stop()
		}
	}()
	f.t.Cleanup(p.stop)
	return p
}

// slowVoterWatch records, while a voter's disk is slow, when the
// controller's status first said it unfit, first decided to swap it, and
// first had its swap under way; and the longest gaps in the controller
// replicas' election Lease renewals and in each host's probe samples on
// its Node (its agent's reports).
type slowVoterWatch struct {
	status                  *poller
	lease, probes           *poller
	mu                      sync.Mutex
	unfit, decided, started time.Time
	verdict                 api.Verdict
	renewals, reports       *gaps
}

func (f *Fleet) watchSlowVoter(out string) *slowVoterWatch {
	w := &slowVoterWatch{renewals: newGaps(), reports: newGaps()}
	w.status = f.every(250*time.Millisecond, func() bool {
		st := f.Status()
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if v := st.Verdicts[out]; w.unfit.IsZero() && v.State == api.VerdictUnfit {
			w.unfit, w.verdict = now, v
		}
		if w.decided.IsZero() && st.Decision != nil && st.Decision.Out == out {
			w.decided = now
		}
		if w.started.IsZero() && st.Swap != nil && st.Swap.Out == out {
			w.started = now
		}
		return true
	})
	leases := f.Client.CoordinationV1().Leases(api.Namespace)
	only := fields.OneTermEqualSelector("metadata.name", api.LeaderElectionLease).String()
	w.lease = f.watchObjects(func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		opts.FieldSelector = only
		return leases.Watch(ctx, opts)
	}, func(o runtime.Object) {
		if l, ok := o.(*coordinationv1.Lease); ok && l.Spec.RenewTime != nil {
			w.renewals.see("renewals", l.Spec.RenewTime.Time)
		}
	})
	w.probes = f.watchObjects(f.Client.CoreV1().Nodes().Watch, func(o runtime.Object) {
		n, ok := o.(*corev1.Node)
		if !ok {
			return
		}
		var p api.Probe
		if json.Unmarshal([]byte(n.Annotations[api.AnnotationProbe]), &p) == nil && !p.At.IsZero() {
			w.reports.see(n.Name, p.At)
		}
	})
	return w
}

func (w *slowVoterWatch) stop() {
	w.status.stop()
	w.lease.stop()
	w.probes.stop()
}

func (w *slowVoterWatch) seen() (unfit, decided, started time.Time, v api.Verdict) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.unfit, w.decided, w.started, w.verdict
}

// afterStepDown are the steps from the outgoing voter's step-down on:
// its leadership handed over, its server stopping or stopped.
var afterStepDown = []string{api.StepStepDown, api.StepRemoveMember, api.StepRemoveByVoter, api.StepMemberGone, api.StepCleanUp, api.StepUncordon}

// slowVoterSwapped turns out's disk slow and waits for the automatic
// swap of out for in: where dryRun, the controller is first in its dry
// run, reports the decision, and the playbook turns the dry run off. It
// checks the swap and the writes across it, and logs the figures
// docs/figures.md has.
//
// The writes: to etcd through every server's endpoint but out's, and to
// the API through a voter's apiserver other than out's (each k3s
// apiserver uses its own member alone), as the clients of the servers
// that stay; and to etcd through out's endpoint alone, as out's own
// apiserver does, measured, not held: a member whose disk is slow
// answers slowly whatever the swap does, and the swap is what ends it.
// The writes of the servers that stay are held to the write oracle
// (writesAcross) from the slowdown on where out follows: a follower's
// slow disk must not stall its peers' commits. Where out leads, every
// commit waits on its disk until its leadership is handed over (etcd's
// leader sends, then persists, and its next round waits for that): the
// writes are held to the oracle from the swap's step-down on, and before
// it only read back, their figures logged.
func (f *Fleet) slowVoterSwapped(t *testing.T, out, in string, dryRun bool) {
	t.Helper()
	waitForTheSuitesBeside(t)
	h := f.Hosts[out]
	leader, err := f.leader()
	require.NoError(t, err)
	var stay []*Host
	apiVia := ""
	for _, s := range f.servers() {
		if s != h {
			stay = append(stay, s)
			if apiVia == "" && f.Node(s.Name).Labels[api.LabelRole] == api.RoleVoter {
				apiVia = s.IP + ":6443"
			}
		}
	}
	c := f.etcdThrough(stay...)
	before, err := h.etcdHistogram(walFsync)
	require.NoError(t, err)
	writes, apiWrites := f.startEtcdWrites(c, c), f.startAPIWrites(apiVia)
	own := f.startEtcdWrites(f.etcdThrough(h), c)
	prev := f.Status().Last
	watch := f.watchSlowVoter(out)
	defer watch.stop()
	slowed := time.Now()
	h.SlowDisk(slowDiskIOPS)
	lifted := false
	defer func() {
		if !lifted {
			h.SlowDisk(0)
		}
	}()
	t.Logf("%s's disk throttled to %d writes a second at %s (%s leads etcd); the writes of the servers that stay go through their etcd and %s's apiserver",
		out, slowDiskIOPS, slowed.Format("15:04:05"), leader, apiVia)

	// Note: 5 minutes is an outer limit: a full window of samples (25
	// at 2 s) with most of them bad takes about a minute.
	f.Wait(5*time.Minute, "the controller judges "+out+" unfit", func() error {
		if unfit, _, _, _ := watch.seen(); unfit.IsZero() {
			return fmt.Errorf("%s: %+v", out, f.Status().Verdicts[out])
		}
		return nil
	})
	// Note: a server whose disk is slow may be restarting (k3s exits as
	// its controller manager loses its lease, and systemd starts it
	// again): its metrics answer again within seconds, counting from its
	// start, and its member fsyncs its WAL once it runs again. A minute is
	// the outer limit for ten fsyncs counted; a leader's k3s restarted
	// more than once in it, and its fsyncs are then not counted.
	var after *dto.Histogram
	var fsyncs uint64
	counted := time.Now().Add(time.Minute)
	for time.Now().Before(counted) && fsyncs < 10 {
		if after, err = h.etcdHistogram(walFsync); err == nil {
			_, fsyncs = quantileBetween(0.5, before, after)
		}
		time.Sleep(time.Second)
	}
	unfit, _, _, verdict := watch.seen()
	t.Logf("%s judged unfit %s after its disk turned slow: %s (agent's fsync p99 %.1f ms)", out, unfit.Sub(slowed).Round(time.Second), verdict.Reason, verdict.FsyncP99Ms)
	if fsyncs >= 10 {
		walP99, _ := quantileBetween(0.99, before, after)
		walP50, _ := quantileBetween(0.5, before, after)
		t.Logf("etcd's own WAL fsyncs since the slowdown (or %s's k3s's last start): %d, p50 %s, p99 %s", out, fsyncs, walP50.Round(time.Millisecond), walP99.Round(time.Millisecond))
		assert.Greater(t, walP99, 10*time.Millisecond, "etcd's own WAL fsync p99 is over etcd's 10 ms guidance once the disk is slow")
	} else {
		t.Logf("etcd's own WAL fsyncs not counted: %d counted in a minute (%s's k3s restarting: %v)", fsyncs, out, err)
	}

	if dryRun {
		// Note: 3 minutes is an outer limit: the decision is reported
		// in the pass after the verdict (seen the same second).
		f.Wait(3*time.Minute, "the dry run reports the decision to swap "+out+" for "+in, func() error {
			st := f.Status()
			if st.Decision == nil || st.Decision.Out != out || !strings.HasPrefix(st.Reason, "dry run: would swap "+out+" for "+in) {
				return fmt.Errorf("decision %+v; reason %q", st.Decision, st.Reason)
			}
			return nil
		})
		t.Logf("reported: %s", f.Status().Reason)
		f.noSwapStarts(t)
		f.dryRunTurnedOff(t)
	}

	// The writes up to the step-down, then across the rest. Note: 20
	// minutes is an outer limit, as for the swaps by hand.
	f.Wait(20*time.Minute, "the swap of "+out+" reaches its step-down", func() error {
		st := f.Status()
		if st.Swap != nil && st.Swap.Out == out && slices.Contains(afterStepDown, st.Step) || st.Last != nil && (prev == nil || st.Last.ID != prev.ID) {
			return nil
		}
		return fmt.Errorf("step %q: %s", st.Step, st.Reason)
	})
	stepDown := time.Now()
	first, apiFirst := writes.Count(), apiWrites.Count()
	writes, apiWrites = f.startEtcdWrites(c, c), f.startAPIWrites(apiVia)
	res := f.waitEnd(t, prev, 20*time.Minute)
	ended := time.Now()
	watch.stop()
	count, apiCount, ownCount := writes.Count(), apiWrites.Count(), own.Count()
	h.SlowDisk(0)
	lifted = true
	_, decided, started, _ := watch.seen()
	t.Logf("automatic: %s out, %s in: %s: %s; the controller's own timed writes: %s", res.Out, res.In, res.Result, res.Reason, timedWrites(res))
	t.Logf("writes from the slowdown to the step-down (%s): to etcd: %s; to the API: %s", stepDown.Sub(slowed).Round(time.Second), first, apiFirst)
	t.Logf("writes from the step-down to the end (%s): to etcd: %s; to the API: %s", ended.Sub(stepDown).Round(time.Second), count, apiCount)
	t.Logf("writes through %s's own etcd endpoint alone, from the slowdown on: %s", out, ownCount)
	t.Logf("figures: from %s's disk turned slow: unfit %s, decided %s, started %s, step-down %s, ended %s (the swap %s)", out,
		since(slowed, unfit), since(slowed, decided), since(slowed, started), since(slowed, stepDown), since(slowed, ended), res.EndedAt.Sub(res.StartedAt).Round(time.Second))
	t.Logf("figures: the longest gap in the controller's election Lease renewals %s; in each host's reports %s",
		watch.renewals.Longest()["renewals"].Round(time.Millisecond), roundAll(watch.reports.Longest()))
	require.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, api.OriginAutomatic, res.Origin)
	assert.Equal(t, out, res.Out)
	assert.Equal(t, in, res.In)
	require.NoError(t, f.Check(api.ResultCompleted))
	f.threeVotersNoLearner(t)
	if out == leader {
		for _, w := range []WriteCount{first, apiFirst} {
			assert.NoError(t, w.ReadBack, "the writes before the step-down are read back")
			assert.Empty(t, w.Lost, "every write acknowledged before the step-down is read back: %s", w)
		}
	} else {
		writesAcross(t, f, first, 0)
		writesAcross(t, f, apiFirst, 0)
	}
	writesAcross(t, f, count, 1)
	writesAcross(t, f, apiCount, 1)
	assert.NoError(t, ownCount.ReadBack, "the writes through %s's endpoint are read back", out)
	assert.Empty(t, ownCount.Lost, "every write acknowledged through %s's endpoint is read back: %s", out, ownCount)
}

// dryRunTurnedOff runs the playbook with -e dry_run=false, checking that
// it changes the controller's configuration alone and keeps each role as
// the cluster has it, and waits for the rollout that follows: new
// replicas, which are not in the dry run.
func (f *Fleet) dryRunTurnedOff(t *testing.T) {
	t.Helper()
	roles := f.roles()
	first := f.Controller.Replicas()
	gen := f.ControllerDeployment().Generation
	out, _ := f.Playbook("-e", "dry_run=false")
	assert.Equal(t, []string{"localhost: fleet_role_controller : Apply the manifests (a server-side dry run in check mode)"},
		changedTasks(out), "only the controller's configuration changed")
	assert.Equal(t, roles, f.roles(), "the roles as the cluster has them")
	for _, n := range f.Order {
		if group := f.Hosts[n].Role; roles[n] != group {
			assert.Contains(t, out, fmt.Sprintf("%s's role on the cluster is %s, its inventory group's %s: the cluster's is kept", n, roles[n], group))
		}
	}
	// Note: an outer limit: the rollout's replicas were ready within a
	// minute on real k3s.
	second := f.WaitRolledOut(3 * time.Minute)
	assert.Greater(t, f.ControllerDeployment().Generation, gen, "the pod template changed")
	for _, r := range second {
		assert.NotContains(t, pods(first), r.Pod, "the replicas were replaced")
	}
	assert.Subset(t, pods(f.Controller.Stopped()), pods(first), "the first replicas stopped")
}

// since is how long after from at was, or "never" when at is zero.
func since(from, at time.Time) string {
	if at.IsZero() {
		return "never"
	}
	return at.Sub(from).Round(time.Second).String()
}

func roundAll(m map[string]time.Duration) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %s", k, m[k].Round(time.Millisecond)))
	}
	return strings.Join(parts, ", ")
}

// waitForTheSuitesBeside waits until the file FLEET_ROLE_E2E_ALONE_AFTER
// names exists, which make test writes once the suites it runs beside the
// real-k3s tier have finished; at once where it is not set. A slowed
// disk's scenario measures the stalls one slow host causes its peers,
// whose disks here are one disk with those suites' (their image builds,
// their fleets): in a clean-clone .ci/run their load stalled both fast
// voters' fdatasync over a second at the same moments, and one write
// 5.96 s, where hosts of their own disks would not be. Half an hour is an
// outer limit (those suites take about 20 minutes in all).
func waitForTheSuitesBeside(t *testing.T) {
	t.Helper()
	file := os.Getenv("FLEET_ROLE_E2E_ALONE_AFTER")
	if file == "" {
		return
	}
	start := time.Now()
	for {
		if _, err := os.Stat(file); err == nil {
			t.Logf("the suites beside this tier have finished: waited %s for them", time.Since(start).Round(time.Second))
			return
		}
		if time.Since(start) > 45*time.Minute {
			t.Fatalf("the suites beside this tier did not finish within 45 minutes (%s not written)", file)
		}
		time.Sleep(5 * time.Second)
	}
}
