package swapplan_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
	"github.com/fleet-role/fleet-role/tests/fleetmodel"
)

// world is a simulated cluster: the Nodes, the Lease and the status as the
// controller sees them, and the fleet behind them (tests/fleetmodel: the
// truth, and the agents, k3s and the kubelets that answer). apply carries
// out a plan as the controller's executor does; what is the tests' own is
// here: the random failures of actions, regrade, the faults and hooks of a
// tick, the planner's loop and the checks on every plan.
type world struct {
	*fleetmodel.Fleet
	t       testing.TB
	rng     *rand.Rand
	now     time.Time
	tick    time.Duration
	cfg     swapplan.Config
	nodes   []swapplan.Node
	lease   swapplan.Lease
	status  api.Status
	request *api.ManualRequest
	pause   *api.Pause
	holds   []string
	cancel  *api.Cancel
	// failRate is the chance an action fails (and is not carried out).
	failRate float64
	// history of plans, one a pass.
	plans []swapplan.Plan
	// checks run on every plan before it is applied.
	checks []func(w *world, p swapplan.Plan)
	// regradeUntil: regrade holds the Lease until then.
	regradeUntil time.Time
	// faults run first in a tick, so the samples of the tick show them;
	// hooks run after the world reacted, before the planner plans.
	faults []func(w *world)
	hooks  []func(w *world)
	// observe: the snapshot carries when each probe and report was seen
	// to change, as the controller's cache stamps them on its clock.
	observe bool
	seen    map[string]seenAt
}

// seenAt is what the controller's cache last saw of a Node, and when.
type seenAt struct {
	probe                 *api.Probe
	rep                   *api.Report
	probeSeen, reportSeen time.Time
	beat, beatSeen        time.Time
}

var epoch = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

func testConfig() swapplan.Config {
	return swapplan.Config{
		DryRun:      false,
		Cooldown:    time.Hour,
		ProbePeriod: 10 * time.Second,
		// The dead voters' swaps are tested with the switch on; the
		// tests of the switch turn it off. Past the runners bound the
		// swap drains, as the tests of that bound's "drain" expect.
		ReplaceDead: true,
		RunnersWait: false,
		Bounds: swapplan.Bounds{
			Snapshot:     5 * time.Minute,
			Runners:      10 * time.Minute,
			Drain:        5 * time.Minute,
			Promote:      5 * time.Minute,
			Join:         5 * time.Minute,
			Gates:        10 * time.Minute,
			StepDown:     3 * time.Minute,
			RemoveMember: 5 * time.Minute,
			MemberGone:   5 * time.Minute,
			Uncordon:     5 * time.Minute,
			Rollback:     3 * time.Minute,
			// k3s is given 2m to remove a rolled-back candidate's member,
			// a voter's agent 3m more.
			RemoveFallback: 2 * time.Minute,
			RemoveByVoter:  3 * time.Minute,
		},
	}
}

// newWorld builds a healthy cluster of voters v1..vN, standbys s1..sS and
// agents a1..aA, each with a few pods, every probe fresh. A probe is due
// every tick, a heartbeat at every tick, and a learner votes 20 s after
// its server started.
func newWorld(t testing.TB, voters, standbys, agents int) *world {
	cfg := testConfig()
	w := &world{t: t, rng: rand.New(rand.NewPCG(1, 2)), now: epoch, tick: 10 * time.Second, cfg: cfg,
		Fleet: fleetmodel.New(fleetmodel.Timing{ProbePeriod: cfg.ProbePeriod, CatchUp: 20 * time.Second, NodeGrace: 50 * time.Second})}
	since := epoch.Add(-24 * time.Hour)
	add := func(prefix, role string, count int) {
		for i := 1; i <= count; i++ {
			n := w.Add(fmt.Sprintf("%s%d", prefix, i), role, since)
			if role == api.RoleVoter {
				n.Level = "full"
			}
			w.nodes = append(w.nodes, n)
		}
	}
	add("v", api.RoleVoter, voters)
	add("s", api.RoleStandby, standbys)
	add("a", api.RoleAgent, agents)
	slices.SortFunc(w.nodes, func(a, b swapplan.Node) int { return strings.Compare(a.Name, b.Name) })
	for i := range w.nodes {
		n := &w.nodes[i]
		n.Pods = []swapplan.Pod{
			{Namespace: "kube-system", Name: "svclb-" + n.Name, DaemonSet: true},
			{Namespace: "apps", Name: "web-" + n.Name},
		}
		n.Verdict = api.Verdict{State: api.VerdictFit, Score: 1}
	}
	w.react()
	return w
}

func (w *world) node(name string) *swapplan.Node {
	for i := range w.nodes {
		if w.nodes[i].Name == name {
			return &w.nodes[i]
		}
	}
	w.t.Fatalf("no node %s", name)
	return nil
}

// find returns the Node, nil when it is gone.
func (w *world) find(name string) *swapplan.Node {
	for i := range w.nodes {
		if w.nodes[i].Name == name {
			return &w.nodes[i]
		}
	}
	return nil
}

func (w *world) snapshot() swapplan.Snapshot {
	nodes := make([]swapplan.Node, len(w.nodes))
	for i, n := range w.nodes {
		nodes[i] = n
		nodes[i].ServerLabels = slices.Clone(n.ServerLabels)
		nodes[i].Pods = slices.Clone(n.Pods)
	}
	if w.observe {
		w.stampSeen(nodes)
	}
	var req *api.ManualRequest
	if w.request != nil {
		r := *w.request
		req = &r
	}
	lease := w.lease
	if lease.Swap != nil {
		rec := *lease.Swap
		lease.Swap = &rec
	}
	return swapplan.Snapshot{Now: w.now, Config: w.cfg, Nodes: nodes, Lease: lease, Status: w.status, Request: req, Pause: w.pause, Cancel: w.cancel, Holds: w.holds}
}

// stampSeen sets when each Node's probe and report were seen to change,
// as the controller's cache does: unknown for what a Node held when first
// seen.
func (w *world) stampSeen(nodes []swapplan.Node) {
	if w.seen == nil {
		w.seen = map[string]seenAt{}
	}
	for i := range nodes {
		n := &nodes[i]
		was, ok := w.seen[n.Name]
		is := seenAt{probe: n.Probe, rep: n.Report, probeSeen: was.probeSeen, reportSeen: was.reportSeen, beat: n.Heartbeat, beatSeen: was.beatSeen}
		if ok && !n.Heartbeat.Equal(was.beat) {
			is.beatSeen = w.now
		}
		if ok && n.Probe != nil && (was.probe == nil || !reflect.DeepEqual(*was.probe, *n.Probe)) {
			is.probeSeen = w.now
		}
		if ok && n.Report != nil && (was.rep == nil || !reflect.DeepEqual(*was.rep, *n.Report)) {
			is.reportSeen = w.now
		}
		w.seen[n.Name] = is
		n.ProbeSeen, n.ReportSeen, n.HeartbeatSeen = is.probeSeen, is.reportSeen, is.beatSeen
	}
}

// react runs the faults, lets regrade go when its time is up, has the
// fleet answer for one tick, and runs the hooks.
func (w *world) react() {
	for _, f := range w.faults {
		f(w)
	}
	if !w.regradeUntil.IsZero() && !w.now.Before(w.regradeUntil) {
		w.lease = swapplan.Lease{} // regrade releases, clearing the annotations
		w.regradeUntil = time.Time{}
	}
	w.React(w.now, w.nodes)
	for _, h := range w.hooks {
		h(w)
	}
}

// pass runs one controller pass: the world moves on a tick, the planner
// plans, the checks run, and the plan is carried out.
func (w *world) pass() swapplan.Plan {
	w.now = w.now.Add(w.tick)
	w.react()
	plan := swapplan.Next(w.snapshot())
	for _, c := range w.checks {
		c(w, plan)
	}
	w.plans = append(w.plans, plan)
	w.apply(plan)
	return plan
}

// apply carries the plan out as the controller's executor does.
func (w *world) apply(plan swapplan.Plan) {
	now := w.now
	if plan.RenewLease {
		rec := *plan.Swap
		w.lease.RenewTime, w.lease.Swap = now, &rec
	}
	a := plan.Action
	failed := a.Type != api.ActionNone && w.rng.Float64() < w.failRate
	w.status.Step, w.status.Reason, w.status.Bound, w.status.Decision = plan.Step, plan.Reason, plan.Bound, plan.Decision
	if plan.Since != nil {
		since := *plan.Since
		w.status.Since = &since
	} else {
		w.status.Since = nil
	}
	if plan.Swap != nil && plan.Swap.Phase != api.PhaseEnd || plan.Action.Type == api.ActionEnd {
		rec := *plan.Swap
		w.status.Swap = &rec
	}
	if a.Type != api.ActionNone {
		la := &api.LastAction{Type: a.Type, Node: a.Node, At: now}
		if failed {
			la.Error = "injected failure"
		}
		w.status.LastAction = la
	}
	if failed {
		return
	}
	var n *swapplan.Node
	// Note: stuck names the candidate for its Event alone, whose Node may
	// be gone; every other action named changes its Node.
	if a.Node != "" && a.Type != api.ActionStuck {
		n = w.node(a.Node)
	}
	switch a.Type {
	case api.ActionStart:
		rec := *plan.Swap
		w.lease = swapplan.Lease{Holder: api.ControllerHolder, RenewTime: now, Duration: time.Minute, Swap: &rec}
		w.status.Swap = &rec
	case api.ActionSnapshot, api.ActionPromote, api.ActionStepDown, api.ActionRemoveByVoter:
		q := *a.Request
		n.Request = &q
	case api.ActionCordonIn, api.ActionCordonOut:
		n.Unschedulable, n.CordonedBy = true, plan.Swap.ID
	case api.ActionDrainIn, api.ActionDrainOut:
		for i := range n.Pods {
			if p := &n.Pods[i]; !p.DaemonSet && !p.Mirror {
				p.Terminating = true
			}
		}
	case api.ActionRemoveMember:
		n.RemoveRequested = true
	case api.ActionMemberGone:
		n.MemberGone = plan.Swap.ID
	case api.ActionCleanUp:
		n.Role = a.Role
		if a.Role == api.RoleStandby {
			n.ServerLabels, n.MemberName, n.RemovedMember, n.RemoveRequested, n.Level, n.EtcdTaint = nil, "", "", false, "", false
		}
	case api.ActionUncordon:
		n.Unschedulable, n.CordonedBy = false, ""
	case api.ActionClearFinished:
		// As the executor's uncordon, the cordon is lifted only while
		// cordoned-by names the swap.
		if a.Uncordon && n.CordonedBy == a.Swap {
			n.Unschedulable = false
		}
		n.Request, n.MemberGone, n.CordonedBy = nil, "", ""
	case api.ActionEnd:
		for _, name := range a.Clear {
			c := w.node(name)
			c.Request, c.MemberGone, c.CordonedBy = nil, "", ""
		}
		rec := plan.Swap
		w.status.Last = &api.SwapResult{ID: rec.ID, Out: rec.Out, In: rec.In, Origin: rec.Origin, Result: rec.Result,
			Reason: rec.Reason, StartedAt: rec.StartedAt, EndedAt: *rec.EndedAt, RequestAt: rec.RequestAt, Pending: rec.Pending, Dead: rec.Dead, Overrides: rec.Overrides}
		w.status.CooldownUntil = a.CooldownUntil
		if a.Remediations != nil {
			w.status.Remediations = a.Remediations
		}
		w.status.Swap = nil
		w.lease = swapplan.Lease{}
	}
}

// run passes until the swap under way has ended or max passes went by,
// and returns the result.
func (w *world) run(max int) *api.SwapResult {
	w.t.Helper()
	started := false
	for range max {
		plan := w.pass()
		if plan.Swap != nil {
			started = true
		}
		if started && w.status.Swap == nil && w.status.Last != nil && w.lease.Holder == "" {
			return w.status.Last
		}
	}
	w.t.Fatalf("no end after %d passes; last plan: %+v", max, w.plans[len(w.plans)-1])
	return nil
}

// runUntil passes until the plan satisfies cond, and returns it.
func (w *world) runUntil(max int, cond func(swapplan.Plan) bool) swapplan.Plan {
	w.t.Helper()
	for range max {
		if plan := w.pass(); cond(plan) {
			return plan
		}
	}
	w.t.Fatalf("condition not met after %d passes; last plan: %+v", max, w.plans[len(w.plans)-1])
	return swapplan.Plan{}
}

func atStep(step string) func(swapplan.Plan) bool {
	return func(p swapplan.Plan) bool { return p.Step == step }
}

func acting(typ, node string) func(swapplan.Plan) bool {
	return func(p swapplan.Plan) bool { return p.Action.Type == typ && p.Action.Node == node }
}

// swapCompletes asks for a swap of out for in, runs it to its end and
// checks that it completed.
func (w *world) swapCompletes(out, in string) {
	w.t.Helper()
	w.requestSwap(out, in)
	res := w.run(100)
	require.NotNil(w.t, res)
	assert.Equal(w.t, api.ResultCompleted, res.Result, res.Reason)
}

// requestSwap writes a manual request as `fleet-role swap OUT IN` does.
func (w *world) requestSwap(out, in string) {
	w.request = &api.ManualRequest{Out: out, In: in, At: w.now, By: "test"}
}

// actions lists the actions of the plans so far, as "type node".
func (w *world) actions() []string {
	var out []string
	for _, p := range w.plans {
		if p.Action.Type != api.ActionNone {
			out = append(out, p.Action.Type+" "+p.Action.Node)
		}
	}
	return out
}

// unanswering makes the host's samples say its etcd does not answer its
// agent, from the next pass until answers is called.
func (w *world) unanswering(name string) (answers func()) {
	down := true
	w.hooks = append(w.hooks, func(w *world) {
		if p := w.node(name).Probe; down && p != nil && p.Error == "" {
			q := *p
			q.Healthy, q.Error = false, "etcd did not answer within 2s"
			w.node(name).Probe = &q
		}
	})
	return func() { down = false }
}
