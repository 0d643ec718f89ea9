package swapplan_test

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// world is a simulated cluster: the Nodes, the Lease and the status as the
// controller sees them, plus the truth behind them (etcd's members, each
// host's units) and the parts that play the agents, k3s and the kubelets.
// apply carries out a plan as the controller's executor does.
type world struct {
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
	members []member
	hosts   map[string]*host
	// failRate is the chance an action fails (and is not carried out).
	failRate float64
	// history of plans, one a pass.
	plans []swapplan.Plan
	// checks run on every plan before it is applied.
	checks []func(w *world, p swapplan.Plan)
	// regradeUntil: regrade holds the Lease until then.
	regradeUntil time.Time
	// k3sPaused: k3s removes no member while set.
	k3sPaused bool
	// faults run first in a tick, so the samples of the tick show them;
	// hooks run after the world reacted, before the planner plans.
	faults []func(w *world)
	hooks  []func(w *world)
}

type member struct {
	name, node string
	learner    bool
}

type host struct {
	staged        bool
	server, agent bool
	roleFile      string
	member        string
	incarnation   int
	serverStart   time.Time
	agentStart    time.Time
	learnerSince  time.Time
	handled       time.Time // At of the last request handled
	swap          string    // the swap of the last step-down handled
	// faults
	paused           bool
	silentUntil      time.Time
	unhealthyUntil   time.Time
	refusePromote    bool
	ignorePromote    bool
	ignoreStepDown   bool
	heartbeatStuck   bool // Ready, but the kubelet's Lease is not renewed
	kubeletDead      bool // never Ready again
	neverJoin        bool
	snapshotNotReady bool
	// neverReady: the server runs but its apiserver never comes up, so
	// k3s writes none of its Node's etcd labels and annotations.
	neverReady bool
	// removeFails: the agent reports a remove-member request failed;
	// removeIgnored: it never answers one.
	removeFails   bool
	removeIgnored bool
	// noFinish: the agent never reports a finish (it misses member-gone).
	noFinish bool
}

var epoch = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

func testConfig() swapplan.Config {
	return swapplan.Config{
		DryRun:      false,
		Cooldown:    time.Hour,
		ProbePeriod: 10 * time.Second,
		Bounds: swapplan.Bounds{
			Snapshot:   5 * time.Minute,
			Runners:    10 * time.Minute,
			Drain:      5 * time.Minute,
			Promote:    5 * time.Minute,
			Join:       5 * time.Minute,
			Gates:      10 * time.Minute,
			StepDown:   3 * time.Minute,
			MemberGone: 5 * time.Minute,
			Uncordon:   5 * time.Minute,
			Rollback:   3 * time.Minute,
			// k3s is given 2m to remove a rolled-back candidate's member,
			// a voter's agent 3m more.
			RemoveFallback: 2 * time.Minute,
			RemoveByVoter:  3 * time.Minute,
		},
	}
}

// newWorld builds a healthy cluster of voters v1..vN, standbys s1..sS and
// agents a1..aA, each with a few pods, every probe fresh.
func newWorld(t testing.TB, voters, standbys, agents int) *world {
	w := &world{t: t, rng: rand.New(rand.NewPCG(1, 2)), now: epoch, tick: 10 * time.Second, cfg: testConfig(), hosts: map[string]*host{}}
	for i := 1; i <= voters; i++ {
		name := fmt.Sprintf("v%d", i)
		h := &host{server: true, roleFile: "server", serverStart: epoch.Add(-24 * time.Hour)}
		h.member = memberName(name, 0)
		w.hosts[name] = h
		w.members = append(w.members, member{name: h.member, node: name})
		w.nodes = append(w.nodes, swapplan.Node{
			Name: name, Role: api.RoleVoter, Level: "full",
			ServerLabels: slices.Clone(api.ServerLabels),
			MemberName:   h.member,
			EtcdIsVoter:  swapplan.Condition{Status: "True", Reason: api.ReasonMemberNotLearner},
		})
	}
	for i := 1; i <= standbys; i++ {
		name := fmt.Sprintf("s%d", i)
		w.hosts[name] = &host{staged: true, agent: true, roleFile: "agent", agentStart: epoch.Add(-24 * time.Hour)}
		w.nodes = append(w.nodes, swapplan.Node{Name: name, Role: api.RoleStandby})
	}
	for i := 1; i <= agents; i++ {
		name := fmt.Sprintf("a%d", i)
		w.hosts[name] = &host{agent: true, roleFile: "agent", agentStart: epoch.Add(-24 * time.Hour)}
		w.nodes = append(w.nodes, swapplan.Node{Name: name, Role: api.RoleAgent})
	}
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

func memberName(node string, incarnation int) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", node, incarnation)
	return fmt.Sprintf("%s-%08x", node, h.Sum32())
}

// memberID is a member's ID in hex, as etcdctl prints it.
func memberID(name string) string {
	h := fnv.New64a()
	fmt.Fprint(h, name)
	return fmt.Sprintf("%x", h.Sum64())
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

func (w *world) snapshot() swapplan.Snapshot {
	nodes := make([]swapplan.Node, len(w.nodes))
	for i, n := range w.nodes {
		nodes[i] = n
		nodes[i].ServerLabels = slices.Clone(n.ServerLabels)
		nodes[i].Pods = slices.Clone(n.Pods)
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
	return swapplan.Snapshot{Now: w.now, Config: w.cfg, Nodes: nodes, Lease: lease, Status: w.status, Request: req, Pause: w.pause}
}

// react plays the agents, k3s and the kubelets for one tick.
func (w *world) react() {
	for _, f := range w.faults {
		f(w)
	}
	if !w.regradeUntil.IsZero() && !w.now.Before(w.regradeUntil) {
		w.lease = swapplan.Lease{} // regrade releases, clearing the annotations
		w.regradeUntil = time.Time{}
	}
	for i := range w.nodes {
		w.agent(&w.nodes[i])
	}
	w.k3s()
	for i := range w.nodes {
		w.kubelet(&w.nodes[i])
	}
	for _, h := range w.hooks {
		h(w)
	}
}

func (w *world) report(n *swapplan.Node, r api.Report) {
	r.At = w.now
	n.Report = &r
}

func (w *world) agent(n *swapplan.Node) {
	h := w.hosts[n.Name]
	if h.paused {
		return
	}
	if q := n.Request; q != nil && !q.At.Equal(h.handled) {
		h.handled = q.At
		at := q.At
		switch q.Action {
		case api.RequestPromote:
			switch {
			case h.ignorePromote:
			case !h.staged || h.refusePromote:
				w.report(n, api.Report{Swap: q.Swap, Action: q.Action, State: api.StateRefused, RequestAt: &at, Message: "not staged"})
			default:
				if !h.server {
					h.agent, h.server, h.serverStart = false, true, w.now
					h.incarnation++
					h.member = memberName(n.Name, h.incarnation)
					h.learnerSince = w.now
					w.members = append(w.members, member{name: h.member, node: n.Name, learner: true})
				}
				h.roleFile = "server"
				start := h.serverStart
				w.report(n, api.Report{Swap: q.Swap, Action: q.Action, State: api.StateDone, StartedAt: &start, RequestAt: &at})
			}
		case api.RequestStepDown:
			if h.ignoreStepDown {
				break
			}
			h.roleFile, h.server, h.swap = "agent", false, q.Swap
			w.report(n, api.Report{Swap: q.Swap, Action: q.Action, State: api.StateDone, RequestAt: &at})
		case api.RequestSnapshot:
			r := api.Report{Swap: q.Swap, Action: q.Action, State: api.StateDone, RequestAt: &at}
			if !h.snapshotNotReady {
				r.Snapshot = &api.SnapshotFile{Path: "/var/lib/rancher/k3s/server/db/snapshots/s.db", Size: 4096,
					SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
			}
			w.report(n, r)
		case api.RequestRemoveMember:
			switch {
			case h.removeIgnored:
			case h.removeFails || !h.server:
				w.report(n, api.Report{Swap: q.Swap, Action: q.Action, State: api.StateFailed, RequestAt: &at, Message: "etcd member remove: injected failure"})
			default:
				w.report(n, w.removeByVoter(h, q))
			}
		}
	}
	if h.noFinish {
		return
	}
	// finish: the role file says agent, and the member is gone.
	if h.roleFile == "agent" && !h.agent && !h.server && h.member != "" {
		gone := !w.isMember(h.member) || (n.MemberGone != "" && n.MemberGone == h.swap)
		if gone {
			h.agent, h.agentStart, h.member = true, w.now, ""
			start := h.agentStart
			w.report(n, api.Report{Swap: h.swap, Action: api.ReportFinish, State: api.StateDone, StartedAt: &start})
		}
	}
	// A step-down of a host that never started its server (a rollback of a
	// candidate that ignored its promotion) finishes at once.
	if h.roleFile == "agent" && !h.agent && !h.server && h.member == "" && n.MemberGone != "" {
		h.agent, h.agentStart = true, w.now
		start := h.agentStart
		w.report(n, api.Report{Swap: n.MemberGone, Action: api.ReportFinish, State: api.StateDone, StartedAt: &start})
	}
}

// removeByVoter removes the member a remove-member request names, as the
// agent does with its etcd client: never its own, never when the voters
// left that run would not be a quorum; one already gone is done.
func (w *world) removeByVoter(h *host, q *api.Request) api.Report {
	at := q.At
	r := api.Report{Swap: q.Swap, Action: q.Action, State: api.StateDone, RequestAt: &at}
	i := slices.IndexFunc(w.members, func(m member) bool { return m.name == q.Member && memberID(m.name) == q.MemberID })
	if i < 0 {
		return r
	}
	if w.members[i].name == h.member {
		r.State, r.Message = api.StateFailed, "the member is this host's own"
		return r
	}
	var voters, up int
	for j, m := range w.members {
		if j == i || m.learner {
			continue
		}
		voters++
		if o := w.hosts[m.node]; o.server && !o.paused {
			up++
		}
	}
	if !w.members[i].learner && up < swapplan.Quorum(voters) {
		r.State, r.Message = api.StateFailed, "the voters left would not be a quorum"
		return r
	}
	w.members = slices.Delete(w.members, i, i+1)
	return r
}

func (w *world) isMember(name string) bool {
	return slices.ContainsFunc(w.members, func(m member) bool { return m.name == name })
}

// k3s: the leader promotes caught-up learners and removes members on request;
// a running server keeps its labels and annotations.
func (w *world) k3s() {
	for i := range w.members {
		m := &w.members[i]
		if h := w.hosts[m.node]; m.learner && h != nil && h.server && !h.neverJoin && w.now.Sub(h.learnerSince) >= 20*time.Second {
			m.learner = false
		}
	}
	for i := range w.nodes {
		n := &w.nodes[i]
		h := w.hosts[n.Name]
		if !w.k3sPaused && n.RemoveRequested && n.MemberName != "" && w.isMember(n.MemberName) {
			w.members = slices.DeleteFunc(w.members, func(m member) bool { return m.name == n.MemberName })
			n.RemovedMember = n.MemberName
		}
		// Note: k3s writes a server's labels and annotations once its
		// apiserver and controllers run, which needs its member to vote.
		if w.serving(h) && !h.paused {
			for _, l := range api.ServerLabels {
				if !slices.Contains(n.ServerLabels, l) {
					n.ServerLabels = append(n.ServerLabels, l)
				}
			}
			n.MemberName = h.member
		}
		switch idx := slices.IndexFunc(w.members, func(m member) bool { return m.node == n.Name }); {
		case h.neverReady && len(n.ServerLabels) == 0:
			// k3s's leader writes the condition on etcd Nodes only.
		case idx < 0 && len(n.ServerLabels) > 0:
			n.EtcdIsVoter = swapplan.Condition{Status: "False", Reason: api.ReasonNotAMember}
		case idx < 0:
		case w.members[idx].learner:
			n.EtcdIsVoter = swapplan.Condition{Status: "False", Reason: api.ReasonMemberIsLearner}
		case !h.server || h.paused:
			n.EtcdIsVoter = swapplan.Condition{Status: "False", Reason: api.ReasonUnhealthy}
		default:
			n.EtcdIsVoter = swapplan.Condition{Status: "True", Reason: api.ReasonMemberNotLearner}
		}
	}
}

// serving: the host's server runs its apiserver, which k3s starts once
// its member votes (never, for a neverReady host).
func (w *world) serving(h *host) bool {
	return h.server && !h.neverReady && slices.ContainsFunc(w.members, func(m member) bool { return m.name == h.member && !m.learner })
}

func (w *world) kubelet(n *swapplan.Node) {
	h := w.hosts[n.Name]
	// Note: a k3s server runs its kubelet once its apiserver serves, which
	// needs its member to vote: a joining server's Node is not Ready
	// (k3s-io/k3s pkg/cli/server, run; the k3s double does the same).
	n.Ready = (h.agent || w.serving(h)) && !h.paused && !h.kubeletDead
	if n.Ready && !h.heartbeatStuck {
		n.Heartbeat = w.now
	}
	if !h.paused && !w.now.Before(h.silentUntil) {
		p := &api.Probe{At: w.now, Period: api.Duration(w.cfg.ProbePeriod), Healthy: !w.now.Before(h.unhealthyUntil),
			Staged: h.staged && !h.server, FsyncP99Ms: 2}
		if h.server {
			p.Member = h.member
			for _, m := range w.members {
				p.Members = append(p.Members, api.Member{Name: m.name, Learner: m.learner, ID: memberID(m.name)})
			}
		}
		n.Probe = p
	}
	pods := n.Pods[:0]
	for _, p := range n.Pods {
		if !p.Terminating {
			pods = append(pods, p)
		}
	}
	n.Pods = pods
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
	if a.Node != "" {
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
	case api.ActionEnd:
		for _, name := range a.Clear {
			c := w.node(name)
			c.Request, c.MemberGone, c.CordonedBy = nil, "", ""
		}
		rec := plan.Swap
		w.status.Last = &api.SwapResult{ID: rec.ID, Out: rec.Out, In: rec.In, Origin: rec.Origin, Result: rec.Result,
			Reason: rec.Reason, StartedAt: rec.StartedAt, EndedAt: *rec.EndedAt, RequestAt: rec.RequestAt, Pending: rec.Pending}
		w.status.CooldownUntil = a.CooldownUntil
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
