package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/api/logkey"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/controller/adapt"
	"github.com/fleet-role/fleet-role/swapplan"
)

// Options are the controller's parts; Log, Now and Registry may be nil.
type Options struct {
	Config config.Controller
	Client kubernetes.Interface
	Log    *slog.Logger
	// Identity names this replica in the leader election.
	Identity string
	// Now is the clock; nil is the real one.
	Now func() time.Time
	// Registry takes the metrics; nil makes a new one.
	Registry *prometheus.Registry
}

// Controller reads the cluster, asks the planner, and carries out exactly
// the action returned, one a pass.
type Controller struct {
	cfg config.Controller
	// plan is what the planner needs of cfg, read once (the maintenance
	// window's time zone among it).
	plan     swapplan.Config
	client   kubernetes.Interface
	log      *slog.Logger
	identity string
	now      func() time.Time
	registry *prometheus.Registry
	metrics  *metrics
	cache    *cache
	windows  *windows
	exec     *executor
	// holds are read when a swap would start; nil when none is configured.
	holds *holds
	// marks keep other tools off a swap while it runs.
	marks *marks
	// writes times what a swap costs the cluster's writes.
	writes *writeTimer
	// notifier tells a swap's start and end; nil when no URL is configured.
	notifier *Notifier
	// jobs names the jobs of the runner pods a swap waits on; waitingJobs
	// are those of the pass's plan.
	jobs        *jobs
	waitingJobs map[string]string
	trigger     chan struct{}
	// woken is when the first change not yet looked at arrived (unix ns);
	// acted is when the last action ended.
	woken atomic.Int64
	acted time.Time
	// dryRunSeen is the dry run's decision last reported, "out in".
	dryRunSeen string
	// refusedSeen are the preflight's refusals last recorded, by Node.
	refusedSeen map[string]string
	events      record.EventBroadcaster
	recorder    record.EventRecorder
	leading     atomic.Bool
	passes      atomic.Int64
	// lastPass is what the last pass planned and did, for the tests.
	lastPass atomic.Pointer[PassResult]
}

// PassResult is what one pass planned and what became of its action.
type PassResult struct {
	Plan swapplan.Plan
	Err  error
	At   time.Time
	// Took is the whole pass; Decide the snapshot and the plan alone,
	// without the action's requests.
	Took, Decide time.Duration
}

// New assembles a controller; nothing runs until Run.
func New(o Options) (*Controller, error) {
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	runners, err := labels.Parse(o.Config.RunnerSelector)
	if err != nil {
		return nil, fmt.Errorf("runner_selector: %w", err)
	}
	log := o.Log.With(logkey.Component, "controller")
	c := &Controller{
		cfg: o.Config, plan: PlanConfig(o.Config), client: o.Client, log: log, identity: o.Identity, now: o.Now,
		registry: o.Registry, metrics: newMetrics(o.Registry, o.Config.WriteGapBudget), trigger: make(chan struct{}, 1),
	}
	c.cache = newCache(o.Client, o.Config.Namespace, runners, log, c.poke)
	c.cache.domainLabel = o.Config.FailureDomainLabel
	c.windows = newWindows(o.Config.Verdicts.Window)
	c.cache.sampled, c.cache.gone = c.windows.add, c.windows.forget
	c.cache.now = o.Now
	c.jobs = newJobs(o.Client, c.log)
	c.exec = &executor{client: o.Client, ns: o.Config.Namespace, cache: c.cache,
		leaseDuration: o.Config.LeaseDuration, drainTimeout: o.Config.DrainTimeout, now: o.Now}
	if c.holds, err = newHolds(o.Config.Holds, o.Client, o.Registry); err != nil {
		return nil, err
	}
	c.marks = newMarks(o.Client, c.cache, o.Config.Holds, o.Now)
	c.writes = newWriteTimer(o.Client, o.Config.Namespace, c.metrics.writeFailed)
	c.exec.writeCost = c.writes.result
	if c.notifier, err = NewNotifier(o.Config.Notify, log); err != nil {
		return nil, err
	}
	if c.notifier != nil {
		c.notifier.register(o.Registry)
	}
	c.events = record.NewBroadcaster()
	c.recorder = c.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: api.EventSourceController})
	if c.holds != nil {
		c.marks.kured = c.holds.kuredDS // one search for kured's DaemonSet
		c.holds.warn = holdWarning(c.recorder, o.Config.Namespace)
	}
	return c, nil
}

// poke asks for a pass, keeping the time of the first change not yet
// looked at.
func (c *Controller) poke() {
	c.woken.CompareAndSwap(0, time.Now().UnixNano())
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// Handler serves /metrics, /healthz and /readyz.
func (c *Controller) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(c.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !c.cache.hasSynced() {
			http.Error(w, "caches not synced", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Last is the last pass's result, nil before the first.
func (c *Controller) Last() *PassResult { return c.lastPass.Load() }

// Passes counts the passes made.
func (c *Controller) Passes() int64 { return c.passes.Load() }

// Run serves the metrics, keeps the caches, and, while this replica leads,
// makes passes. An ended ctx is a clean exit; leadership lost is an error,
// so the replica restarts and stands for election again.
func (c *Controller) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	c.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.client.CoreV1().Events("")})
	defer c.events.Shutdown()
	if c.cfg.ListenAddress != "" {
		l, err := net.Listen("tcp", c.cfg.ListenAddress)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", c.cfg.ListenAddress, err)
		}
		srv := &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		defer srv.Close()
	}
	c.cache.start(ctx)
	le := c.cfg.LeaderElection
	elector, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metaName(c.cfg.Namespace, le.Lease),
			Client:     c.client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: c.identity},
		},
		LeaseDuration:   le.LeaseDuration,
		RenewDeadline:   le.RenewDeadline,
		RetryPeriod:     le.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            "fleet-role-controller",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				c.leading.Store(true)
				c.metrics.leader.Set(1)
				c.log.Info("leading", logkey.Identity, c.identity)
				c.loop(ctx)
			},
			OnStoppedLeading: func() {
				c.leading.Store(false)
				c.metrics.leader.Set(0)
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	elector.Run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("leadership lost")
}

// PassBurst is how many passes may follow one another at once before
// min_pass_interval spaces them: a swap's next action, once the change it
// waits for is seen, is not held back, while a storm of changes is.
const PassBurst = 5

// loop makes a pass on each relevant change, on average at most one every
// min_pass_interval (a token bucket, PassBurst deep), and at least every
// period.
func (c *Controller) loop(ctx context.Context) {
	if !c.cache.waitForSync(ctx) {
		return
	}
	if c.notifier != nil {
		c.notifier.restore(savedNotifyQueue(c.cache.statusObject(), c.log))
		go c.notifier.run(ctx, c.exec)
	}
	tick := time.NewTicker(c.cfg.Period)
	defer tick.Stop()
	limit := rate.NewLimiter(rate.Every(c.cfg.MinPassInterval), PassBurst)
	for {
		if err := limit.Wait(ctx); err != nil {
			return
		}
		c.pass(ctx)
		select {
		case <-ctx.Done():
			return
		case <-c.trigger:
		case <-tick.C:
		}
	}
}

// pass is one pass: snapshot, plan, act, publish.
func (c *Controller) pass(ctx context.Context) {
	start := time.Now()
	// from is when the change that woke this pass arrived, or the pass's
	// start when the period woke it.
	from := start
	woke := c.woken.Swap(0)
	if woke != 0 && woke < start.UnixNano() {
		from = time.Unix(0, woke)
	}
	if from.Before(c.acted) {
		from = c.acted // a change that came while the last action ran
	}
	if !c.cache.settle(ctx) {
		if woke != 0 {
			c.woken.CompareAndSwap(0, woke) // the change is still to be acted on
		}
		return
	}
	now := c.now()
	cfg := c.plan
	verdicts := c.windows.verdicts(now, VerdictConfig(c.cfg))
	snap, problems := c.cache.snapshot(cfg, verdicts, now)
	in, out := swapNodes(snap)
	synced, changed := c.cache.watch(ctx, in, out)
	if !synced {
		c.log.Debug("waiting for the pods of the swap's nodes", logkey.In, in, logkey.Out, out)
		if woke != 0 {
			c.woken.CompareAndSwap(0, woke) // the change is still to be acted on
		}
		return
	}
	if changed {
		snap, problems = c.cache.snapshot(cfg, verdicts, now)
	}
	plan := swapplan.Next(snap)
	if c.holds != nil {
		// Read on every pass, so that a dry run and status say what would
		// hold a swap, and a disruption that begins mid-swap holds its
		// outgoing voter's stop; fresh when a swap would start or stop its
		// outgoing voter, and kured's lock taken before a swap starts, so
		// that no reboot begins between the read and the start.
		starting := plan.Action.Type == api.ActionStart
		snap.Holds = c.holds.read(ctx, snap, outgoing(snap, plan), starting || stopsOutgoing(plan))
		// kured's lock holder is under maintenance: never dead. It
		// holds, so the plan is made again below.
		adapt.MarkKuredHolders(&snap, c.holds.kuredHolders)
		if starting && len(snap.Holds) == 0 {
			if why := c.marks.claim(ctx); why != "" {
				snap.Holds = []string{why}
			}
		}
		if len(snap.Holds) > 0 {
			plan = swapplan.Next(snap)
		}
	}
	c.writes.follow(ctx, plan)
	c.waitingJobs = c.jobs.of(ctx, c.cache.podsNamed(plan.WaitingOn), now)
	decide := time.Since(start)
	acting := time.Now()
	var err error
	if plan.Action.Type != api.ActionNone || plan.RenewLease {
		err = c.exec.do(ctx, plan, c.statusChange(snap, plan, problems))
	}
	if plan.Action.Type != api.ActionNone {
		c.acted = time.Now()
	}
	running := plan.Swap
	if (plan.Action.Type == api.ActionStart && err != nil) || (plan.Action.Type == api.ActionEnd && err == nil) {
		running = nil
	}
	if r := c.exec.ended; plan.Action.Type == api.ActionEnd && err == nil && plan.Swap != nil && r != nil && r.ID == plan.Swap.ID {
		// The steps and the write cost of the swap that ended, as the
		// end just wrote them (the cache may not hold that write yet),
		// before the marks are made to agree (their writes take a while).
		c.metrics.ended(*r)
	}
	if merr := c.marks.keep(ctx, running, plan.Voters); merr != nil {
		c.metrics.failures.WithLabelValues(actionMark, failureKind(merr)).Inc()
		c.log.Warn("the swap's marks for other tools are repeated next pass", logkey.Err, merr)
	}
	a := plan.Action
	log := c.log.With(logkey.Step, plan.Step, logkey.Action, a.Type, logkey.Node, a.Node)
	switch {
	case plan.Swap != nil:
		log = log.With(logkey.Swap, plan.Swap.ID)
	case a.Swap != "":
		log = log.With(logkey.Swap, a.Swap) // a clear-finished: the swap that ended
	}
	switch {
	case err != nil:
		kind := failureKind(err)
		c.metrics.failures.WithLabelValues(a.Type, kind).Inc()
		log.Error("action failed; it is repeated next pass", logkey.Err, err, logkey.Kind, kind, logkey.Reason, plan.Reason)
		if ref := eventObject(plan); ref != nil && a.Type != api.ActionNone {
			c.recorder.Eventf(ref, corev1.EventTypeWarning, api.EventSwapActionFailed, "%s: %v", a.Type, err)
		}
	case a.Type != api.ActionNone:
		c.metrics.actions.WithLabelValues(a.Type).Inc()
		c.metrics.reaction.Observe(acting.Sub(from).Seconds())
		log.Info("action taken", logkey.Reason, plan.Reason, logkey.Took, time.Since(start).Round(time.Microsecond),
			logkey.Reaction, acting.Sub(from).Round(time.Microsecond))
		c.notifier.told(plan)
		if ref := eventObject(plan); ref != nil {
			kind := corev1.EventTypeNormal
			if a.Type == api.ActionStuck {
				kind = corev1.EventTypeWarning // an operator must act
			}
			c.recorder.Eventf(ref, kind, api.EventSwapReason(a.Type), "%s", plan.Reason)
		}
		if a.Type == api.ActionEnd {
			c.warnUnfinished(plan)
		}
	default:
		log.Debug("no action taken", logkey.Reason, plan.Reason)
	}
	c.reportDryRun(plan)
	c.reportRefused(plan)
	c.notifier.dryRun(c.cfg.DryRun, plan, verdicts)
	c.notifier.paused(snap)
	if a.Type != api.ActionEnd || err != nil {
		if serr := c.publish(ctx, snap, plan, problems, err); serr != nil {
			log.Warn("status not written", logkey.Err, serr)
		}
	}
	stepSeconds := 0.0
	if plan.Since != nil {
		stepSeconds = now.Sub(*plan.Since).Seconds()
	}
	c.metrics.observe(plan, stepSeconds, verdicts)
	c.metrics.paused(snap.Pause)
	took := time.Since(start)
	c.metrics.passes.Observe(took.Seconds())
	c.passes.Add(1)
	c.lastPass.Store(&PassResult{Plan: plan, Err: err, At: now, Took: took, Decide: decide})
}

// reportDryRun makes a dry run's automatic decision seen: an Event on the
// voter it would swap out and a count, once a decision, and a gauge while
// it stands.
func (c *Controller) reportDryRun(plan swapplan.Plan) {
	d := plan.Decision
	if !c.cfg.DryRun || d == nil || plan.Swap != nil {
		c.metrics.wouldSwap.Set(0)
		c.dryRunSeen = ""
		return
	}
	c.metrics.wouldSwap.Set(1)
	if key := d.Out + " " + d.In; key != c.dryRunSeen {
		c.dryRunSeen = key
		c.metrics.dryRun.WithLabelValues(d.Out, d.In).Inc()
		c.log.Info("dry run would swap", logkey.Out, d.Out, logkey.In, d.In, logkey.Reason, d.Reason)
		ref := &corev1.ObjectReference{Kind: "Node", Name: d.Out, UID: types.UID(d.Out)} // as eventObject refers to a Node
		c.recorder.Eventf(ref, corev1.EventTypeNormal, api.EventDryRunWouldSwap, "%s", plan.Reason)
	}
}

// reportRefused records, on the Node of each standby the preflight
// refuses to swap in, a warning that names each setting of its staged k3s
// server config that differs from the voters': once for as long as the
// same refusal stands, again once it changes or comes back.
func (c *Controller) reportRefused(plan swapplan.Plan) {
	seen := make(map[string]string, len(plan.Refused))
	for _, r := range plan.Refused {
		seen[r.Node] = r.Reason
		if c.refusedSeen[r.Node] == r.Reason {
			continue
		}
		c.log.Warn("the preflight refuses a standby", logkey.Node, r.Node, logkey.Reason, r.Reason)
		ref := &corev1.ObjectReference{Kind: "Node", Name: r.Node, UID: types.UID(r.Node)} // as eventObject refers to a Node
		c.recorder.Eventf(ref, corev1.EventTypeWarning, api.EventPreflightRefused, "%s", r.Reason)
	}
	c.refusedSeen = seen
}

// warnUnfinished records, on the Node of each host the swap's end left
// with its demotion unfinished, a warning that says what stays on it and
// what an operator does.
func (c *Controller) warnUnfinished(plan swapplan.Plan) {
	for _, u := range plan.Pending {
		if u.NodeGone || plan.Swap == nil || u.Swap != plan.Swap.ID {
			continue
		}
		ref := &corev1.ObjectReference{Kind: "Node", Name: u.Node, UID: types.UID(u.Node)} // as eventObject refers to a Node
		c.recorder.Eventf(ref, corev1.EventTypeWarning, api.EventDemotionUnfinished, "%s", UnfinishedMessage(u))
	}
}

// UnfinishedMessage is the DemotionUnfinished Event's message: what stays
// on the Node of a host whose demotion a swap left unfinished, and what an
// operator does.
func UnfinishedMessage(u api.UnfinishedDemotion) string {
	return fmt.Sprintf("swap %s ended before the agent of %s reported the finish of its demotion: its step-down (%s) and %s stay on this Node, "+
		"and its %s where the swap cordoned it, so that its agent finishes the demotion when it runs again; the controller then clears them. "+
		"Bring the host's agent back (systemctl status fleet-role-agent on %s). If the host is gone for good, delete this Node "+
		"(kubectl delete node %s), or remove them by hand: kubectl annotate node %s %s- %s- %s- && kubectl uncordon %s",
		u.Swap, u.Node, api.AnnotationRequest, api.AnnotationMemberGone, api.AnnotationCordonedBy, u.Node,
		u.Node, u.Node, api.AnnotationRequest, api.AnnotationMemberGone, api.AnnotationCordonedBy, u.Node)
}

// swapNodes are the swap's IN and OUT, from the Lease or the status.
func metaName(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name}
}

func swapNodes(s swapplan.Snapshot) (in, out string) {
	rec := s.Status.Swap
	if s.Lease.Holder == api.ControllerHolder && s.Lease.Swap != nil {
		rec = s.Lease.Swap
	}
	if rec == nil {
		return "", ""
	}
	return rec.In, rec.Out
}

// statusChange sets what a pass publishes in status.json.
func (c *Controller) statusChange(snap swapplan.Snapshot, plan swapplan.Plan, problems []string) func(*api.Status, error) {
	verdicts := map[string]api.Verdict{}
	for _, n := range snap.Nodes {
		if n.Verdict.State != "" {
			verdicts[n.Name] = n.Verdict
		}
	}
	return func(st *api.Status, err error) {
		st.Verdicts = verdicts
		prev := st.Swap
		st.Swap = plan.Swap
		if plan.Swap != nil && plan.Swap.Phase == api.PhaseEnd && plan.Action.Type == api.ActionEnd && err == nil {
			st.Swap = nil
		}
		st.Steps = stepLog(st.Steps, prev, st.Swap, plan, snap.Now)
		st.Step, st.Since, st.Bound, st.Reason, st.Decision, st.WaitingOn = plan.Step, plan.Since, plan.Bound, plan.Reason, plan.Decision, plan.WaitingOn
		st.Jobs = nil
		for _, pod := range plan.WaitingOn {
			if j, ok := c.waitingJobs[pod]; ok {
				if st.Jobs == nil {
					st.Jobs = map[string]string{}
				}
				st.Jobs[pod] = j
			}
		}
		st.Voters, st.Domains, st.Dead = plan.Voters, plan.Domains, plan.Dead
		st.Controller = c.state(snap)
		st.Members, st.Etcd = map[string][]api.Member{}, nil
		for _, n := range snap.Nodes {
			if slices.Contains(plan.Voters, n.Name) && n.Probe != nil {
				st.Members[n.Name] = n.Probe.Members
			}
			// What each member says of itself: the voters', and the
			// candidate's while it joins.
			candidate := plan.Swap != nil && plan.Swap.In == n.Name
			if (slices.Contains(plan.Voters, n.Name) || candidate) && n.Probe != nil && n.Probe.Etcd != nil {
				if st.Etcd == nil {
					st.Etcd = map[string]api.EtcdStatus{}
				}
				st.Etcd[n.Name] = *n.Probe.Etcd
			}
		}
		st.Request, st.Pause = snap.Request, snap.Pause
		st.Cancel = nil
		if c := snap.Cancel; c != nil && st.Swap != nil && c.Swap == st.Swap.ID {
			st.Cancel = c // a cancel of a swap that ended is no news
		}
		st.Problems = problems
		st.Pending, st.Unfinished = nil, nil
		for _, u := range plan.Pending {
			st.Pending = append(st.Pending, u.Node)
		}
		if len(plan.Pending) > 0 {
			st.Unfinished = slices.Clone(plan.Pending)
		}
		if plan.Action.Type != api.ActionNone {
			la := &api.LastAction{Type: plan.Action.Type, Node: plan.Action.Node, At: snap.Now.UTC()}
			if err != nil {
				la.Error = err.Error()
			}
			st.LastAction = la
		}
	}
}

// stepLog keeps the steps of the swap under way: a swap new to the
// status starts a new log, a new step closes the last one at its own
// start. None is kept with no swap under way (recordEnd moves the ended
// swap's into its result).
func stepLog(steps []api.StepSpan, prev, swap *api.SwapRecord, plan swapplan.Plan, now time.Time) []api.StepSpan {
	if swap == nil || plan.Step == "" {
		return nil
	}
	start := now
	if plan.Since != nil {
		start = *plan.Since
	}
	if prev == nil || prev.ID != swap.ID {
		return []api.StepSpan{{Step: plan.Step, Start: start}}
	}
	if n := len(steps); n > 0 && steps[n-1].Step == plan.Step {
		return steps
	}
	steps = slices.Clone(steps)
	if n := len(steps); n > 0 {
		steps[n-1].End = start
	}
	return append(steps, api.StepSpan{Step: plan.Step, Start: start})
}

// state is what governs the controller's decisions at this pass.
func (c *Controller) state(snap swapplan.Snapshot) *api.ControllerState {
	watched, off := holdSources(c.cfg.Holds, c.holds)
	st := &api.ControllerState{Leader: c.identity, DryRun: c.plan.DryRun, Holds: watched, HoldsOff: off, Held: slices.Clone(snap.Holds)}
	if w := c.plan.Window; !w.Always() {
		st.Window = &api.WindowState{Spec: w.String(), Open: w.Open(snap.Now)}
		if next, ok := w.Next(snap.Now); ok {
			next = next.UTC()
			st.Window.Next = &next
		}
	}
	return st
}

// publish writes status.json when what it says changed. Note: the
// verdicts' figures move with every probe sample; alone they are written
// at most every five probe periods, so that an idle pass makes no request.
func (c *Controller) publish(ctx context.Context, snap swapplan.Snapshot, plan swapplan.Plan, problems []string, actErr error) error {
	next := snap.Status
	c.statusChange(snap, plan, problems)(&next, actErr)
	if c.cache.statusObject() != nil {
		if sameStatus(snap.Status, next) {
			return nil
		}
		stale := snap.Now.Sub(snap.Status.UpdatedAt) > 5*c.cfg.ProbePeriod
		if sameStatus(withoutFigures(snap.Status), withoutFigures(next)) && !stale {
			return nil
		}
	}
	return c.exec.updateStatus(ctx, func(st *api.Status, _ map[string]string) {
		c.statusChange(snap, plan, problems)(st, actErr)
	})
}

// withoutFigures keeps of the verdicts their states and bad samples.
func withoutFigures(st api.Status) api.Status {
	v := make(map[string]api.Verdict, len(st.Verdicts))
	for n, x := range st.Verdicts {
		v[n] = api.Verdict{State: x.State, Bad: x.Bad}
	}
	st.Verdicts = v
	// The members' raft index and database size move with every sample.
	e := make(map[string]api.EtcdStatus, len(st.Etcd))
	for n, x := range st.Etcd {
		e[n] = api.EtcdStatus{ID: x.ID, Learner: x.Learner, Leader: x.Leader, Errors: x.Errors}
	}
	st.Etcd = e
	return st
}

// sameStatus compares two statuses but for when they were written.
func sameStatus(a, b api.Status) bool {
	a.UpdatedAt, b.UpdatedAt = time.Time{}, time.Time{}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb) && reflect.DeepEqual(a.Problems, b.Problems)
}
