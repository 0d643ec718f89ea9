package swapplan

import (
	"cmp"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/fleet-role/fleet-role/api"
)

// Action is the one thing the controller does this pass.
type Action struct {
	// Type is one of api's Action* types, which names the step it
	// carries out.
	Type string `json:"type"`
	Node string `json:"node,omitempty"`
	// Request to write on Node (snapshot, promote, step-down, remove-member).
	Request *api.Request `json:"request,omitempty"`
	// Role to label Node with (clean-up).
	Role string `json:"role,omitempty"`
	// End: the result, the Nodes whose swap annotations to clear, the
	// hosts the swap ends without (api.SwapRecord.Pending) and the
	// cooldown to record. Clear leaves out a host that has not reported
	// the finish of its demotion: its Node keeps the swap's step-down and
	// member-gone for its agent.
	Result        string     `json:"result,omitempty"`
	Clear         []string   `json:"clear,omitempty"`
	Pending       []string   `json:"pending,omitempty"`
	CooldownUntil *time.Time `json:"cooldownUntil,omitempty"`
	// Remediations are the remediation limits' record after the end
	// (api.Status.Remediations), set when the end changes it.
	Remediations []api.Remediation `json:"remediations,omitempty"`
	// Swap is the swap that ended whose annotations a clear-finished
	// clears from Node (Plan.Swap is nil: none is under way); Uncordon
	// says it lifts the cordon that swap left on Node first.
	Swap     string `json:"swap,omitempty"`
	Uncordon bool   `json:"uncordon,omitempty"`
}

// Plan is the planner's answer: the next action and why, where the swap
// stands, and what to keep of this pass.
type Plan struct {
	Action Action `json:"action"`
	Reason string `json:"reason"`
	// Step the swap is at, empty when none is under way. Since is when the
	// step began (read back from api.Status), Bound its own bound.
	Step  string       `json:"step"`
	Since *time.Time   `json:"since,omitempty"`
	Bound api.Duration `json:"bound,omitempty"`
	// WaitingOn are the runner pods the swap waits for to finish (at
	// runners-in and runners-out), namespace/name.
	WaitingOn []string `json:"waitingOn,omitempty"`
	// Swap is the swap under way (or started by this action), as the Lease
	// should hold it after this pass.
	Swap *api.SwapRecord `json:"swap"`
	// RenewLease: renew the Lease, with Swap as its record, before acting.
	RenewLease bool `json:"renewLease"`
	// Decision is the automatic decision, also when only reported.
	Decision *api.Decision `json:"decision,omitempty"`
	// Domains is how the voters lie across failure domains now.
	Domains *api.Domains `json:"domains,omitempty"`
	// Dead are the voters dead by every sign now.
	Dead []api.DeadVoter `json:"dead,omitempty"`
	// RetriesSpent: the decision is a retry past the remediation's
	// max_retries, and automatic swaps do not start.
	RetriesSpent bool `json:"retriesSpent,omitempty"`
	// Voters are the Nodes whose members vote, by name.
	Voters []string `json:"voters"`
	// Tolerates is how many more member failures etcd survives now
	// (Tolerates): below 0, it has no quorum.
	Tolerates int `json:"tolerates"`
	// Pending are the hosts whose demotion a swap that ended (or ends
	// with this plan) left unfinished, by name: those whose Node keeps the
	// swap's instruction until their agent reports the finish, and those
	// the last end named whose Node is gone.
	Pending []api.UnfinishedDemotion `json:"pending,omitempty"`
	// Refused are the preflight's refusals this pass: of the manual
	// request's IN, or of each standby the automatic decision passed
	// over, with why (Planner.preflight).
	Refused []PreflightRefusal `json:"refused,omitempty"`
}

// PreflightRefusal is the preflight's refusal to swap a standby in: each
// setting of its staged k3s server config that differs from the voters'.
type PreflightRefusal struct {
	Node   string `json:"node"`
	Reason string `json:"reason"`
}

// Next returns the one next action of a voter swap for the snapshot. It is
// pure and deterministic: the same snapshot gives the same plan.
func Next(s Snapshot) Plan {
	p := newPlanner(s)
	plan := p.next()
	plan.Voters = p.voterNames()
	plan.Tolerates = p.tolerates()
	plan.Domains = p.domains()
	plan.Dead = p.deadVoters()
	plan.Pending = p.unfinished(plan.Swap)
	if plan.Action.Type == "" {
		plan.Action.Type = api.ActionNone
	}
	if plan.Step != "" {
		st := s.Status
		if st.Swap != nil && plan.Swap != nil && st.Swap.ID == plan.Swap.ID && st.Step == plan.Step && st.Since != nil {
			since := *st.Since
			plan.Since = &since
		} else {
			now := s.Now
			plan.Since = &now
		}
		plan.Bound = api.Duration(p.bound(plan.Step))
	}
	plan.WaitingOn = p.waitingOn(plan)
	plan.Refused = p.refused
	return plan
}

// waitingOn are the runner pods the plan waits for, at runners-in (the
// candidate's) or runners-out (the outgoing voter's); nil at another step.
func (p *planner) waitingOn(plan Plan) []string {
	var name string
	switch {
	case plan.Swap == nil:
		return nil
	case plan.Step == api.StepRunnersIn:
		name = plan.Swap.In
	case plan.Step == api.StepRunnersOut:
		name = plan.Swap.Out
	default:
		return nil
	}
	if n := p.node(name); n != nil {
		return unfinishedRunners(n)
	}
	return nil
}

type planner struct {
	s      Snapshot
	nodes  []Node
	index  map[string]int
	voters []*Node
	// owner maps an etcd member name to its Node, byAddress a Node's
	// address to it.
	owner     map[string]string
	byAddress map[string]string
	// rec is the swap under way, nil when idle.
	rec *api.SwapRecord
	// refused are the preflight's refusals of this pass (Plan.Refused).
	refused []PreflightRefusal
}

func newPlanner(s Snapshot) *planner {
	nodes := s.Nodes
	byName := func(a, b Node) int { return cmp.Compare(a.Name, b.Name) }
	if !slices.IsSortedFunc(nodes, byName) {
		nodes = slices.Clone(nodes)
		slices.SortStableFunc(nodes, byName)
	}
	p := &planner{s: s, nodes: nodes, index: make(map[string]int, len(nodes)), owner: map[string]string{}, byAddress: map[string]string{}}
	for i := range nodes {
		n := &nodes[i]
		p.index[n.Name] = i
		if n.Voter() {
			p.voters = append(p.voters, n)
		}
		if n.MemberName != "" {
			p.owner[n.MemberName] = n.Name
		}
		if n.Probe != nil && n.Probe.Member != "" {
			p.owner[n.Probe.Member] = n.Name
		}
		for _, a := range n.Addresses {
			p.byAddress[a] = n.Name
		}
	}
	return p
}

func (p *planner) node(name string) *Node {
	if i, ok := p.index[name]; ok {
		return &p.nodes[i]
	}
	return nil
}

func (p *planner) voterNames() []string {
	names := make([]string, len(p.voters))
	for i, v := range p.voters {
		names[i] = v.Name
	}
	return names
}

func (p *planner) next() Plan {
	l := p.s.Lease
	if p.leaseHeldByOther() {
		plan := Plan{Reason: fmt.Sprintf("the Lease %s/%s is held by %q (renewed %s): nothing is done under it, and it is not renewed",
			api.Namespace, api.LeaseName, l.Holder, stamp(l.RenewTime))}
		if rec := p.s.Status.Swap; rec != nil {
			r := *rec
			plan.Swap, plan.Step = &r, p.s.Status.Step
		}
		return plan
	}
	if l.Holder == api.ControllerHolder && l.Swap != nil {
		rec := *l.Swap
		p.rec = &rec
		plan := p.holdWhileSilent(p.swap())
		if plan.Swap == nil {
			plan.Swap = p.rec
		}
		plan.RenewLease = true
		return plan
	}
	if rec := p.s.Status.Swap; rec != nil && (p.s.Status.Last == nil || p.s.Status.Last.ID != rec.ID) {
		r := *rec
		p.rec = &r
		return p.holdWhileSilent(Plan{
			Action: Action{Type: api.ActionStart},
			Step:   api.StepStart,
			Swap:   p.rec,
			Reason: fmt.Sprintf("resuming swap %s (%s out, %s in): its Lease was released or expired before it ended", r.ID, r.Out, r.In),
		})
	}
	return p.idle()
}

// leaseHeldByOther: held by someone else and not expired. A Lease that says
// no duration is taken as held.
func (p *planner) leaseHeldByOther() bool {
	l := p.s.Lease
	if l.Holder == "" || l.Holder == api.ControllerHolder {
		return false
	}
	return l.Duration <= 0 || l.RenewTime.Add(l.Duration).After(p.s.Now)
}

// holdWhileSilent holds any action while a voter's probe (other than the
// outgoing voter's) has been silent for 3 periods.
func (p *planner) holdWhileSilent(plan Plan) Plan {
	if plan.Action.Type == api.ActionNone || plan.Action.Type == "" {
		return plan
	}
	if why := p.silentVoter(p.rec.Out); why != "" {
		plan.Reason = fmt.Sprintf("every step holds: %s (next: %s %s)", why, plan.Action.Type, plan.Action.Node)
		plan.Action = Action{Type: api.ActionNone}
		plan.Swap = p.rec
	}
	return plan
}

func (p *planner) silentVoter(except string) string {
	for _, v := range p.voters {
		if v.Name != except && p.silent(v) {
			if v.Probe == nil {
				return fmt.Sprintf("voter %s has no probe sample", v.Name)
			}
			why := fmt.Sprintf("voter %s's probe has been silent since %s (3 periods of %s)", v.Name, stamp(v.Probe.At), p.period(v))
			if v.Maintenance != "" {
				why += "; it is under maintenance (" + v.Maintenance + "), not dead"
			}
			return why
		}
	}
	return ""
}

func (p *planner) bound(step string) time.Duration {
	b := p.s.Config.Bounds
	switch step {
	case api.StepSnapshot:
		return b.Snapshot
	case api.StepRunnersIn, api.StepRunnersOut:
		return b.Runners
	case api.StepDrainIn, api.StepDrainOut:
		return b.Drain
	case api.StepPromote:
		return b.Promote
	case api.StepJoin:
		return b.Join
	case api.StepGates:
		return b.Gates
	case api.StepStepDown:
		return b.StepDown
	case api.StepRemoveMember:
		return b.RemoveMember
	case api.StepMemberGone:
		return b.MemberGone
	case api.StepUncordon:
		return b.Uncordon
	case api.StepRollback:
		return b.Rollback
	case api.StepRemoveCandidate:
		return b.RemoveFallback
	case api.StepRemoveByVoter:
		return b.RemoveByVoter
	}
	return 0
}

// elapsed is how long the swap has been at the step, read back from the
// status this controller published; 0 when it just got there.
func (p *planner) elapsed(step string) time.Duration {
	st := p.s.Status
	if p.rec == nil || st.Swap == nil || st.Swap.ID != p.rec.ID || st.Since == nil || st.Step != step {
		return 0
	}
	return p.s.Now.Sub(*st.Since)
}

// pastBound says the swap has waited at the step longer than its bound.
func (p *planner) pastBound(step string) bool {
	return p.elapsed(step) > p.bound(step)
}

// passed says a step past which the swap goes on (not abandoning or rolling
// back) was already gone past: over its bound, or the status shows the swap
// at a later forward step. Note: without the latter the swap would return to
// a wait it had already given up, and the step's clock would start again.
func (p *planner) passed(step string) bool {
	return p.pastBound(step) || p.wentPast(step)
}

// wentPast says the status shows the swap at a forward step later than
// the one given.
func (p *planner) wentPast(step string) bool {
	st := p.s.Status
	if p.rec == nil || st.Swap == nil || st.Swap.ID != p.rec.ID {
		return false
	}
	at, here := slices.Index(api.Steps, st.Step), slices.Index(api.Steps, step)
	return at > here && at <= slices.Index(api.Steps, api.StepEnd)
}

func (p *planner) period(n *Node) time.Duration {
	if n.Probe != nil && n.Probe.Period > 0 {
		return time.Duration(n.Probe.Period)
	}
	return p.s.Config.ProbePeriod
}

// sampledAt is when the Node's sample was taken: the agent's stamp, but
// when the stamp is ahead of the time the controller saw the sample, or a
// period or more behind it, the host's clock is off (it jumped, or is
// wrong) and the controller's own is taken, as the node lifecycle
// controller judges a kubelet's heartbeats by when it saw them on its own
// clock (kubernetes pkg/controller/nodelifecycle/node_lifecycle_controller.go,
// tryUpdateNodeHealth, probeTimestamp). A sample the controller found at
// its start is judged by its stamp.
func (p *planner) sampledAt(n *Node) time.Time {
	at, seen := n.Probe.At, n.ProbeSeen
	if !seen.IsZero() && (at.After(seen) || seen.Sub(at) >= p.period(n)) {
		return seen
	}
	return at
}

// fresh: the sample is at most two periods old (one may be in flight).
func (p *planner) fresh(n *Node) bool {
	return n.Probe != nil && p.s.Now.Sub(p.sampledAt(n)) <= 2*p.period(n)
}

// silent: no sample for three periods.
func (p *planner) silent(n *Node) bool {
	return n.Probe == nil || p.s.Now.Sub(p.sampledAt(n)) > 3*p.period(n)
}

// silence says since when the Node's agent has been silent.
func (p *planner) silence(n *Node) string {
	if n.Probe == nil {
		return "no probe sample"
	}
	return fmt.Sprintf("no probe sample since %s, 3 periods of %s", stamp(n.Probe.At), p.period(n))
}

// unhealthy says why the Node is not a healthy voter: Ready, a fresh
// sample, and healthy by it. Empty when it is.
func (p *planner) unhealthy(n *Node) string {
	switch {
	case !n.Ready:
		return fmt.Sprintf("%s is not Ready", n.Name)
	case n.Probe == nil:
		return fmt.Sprintf("%s has no probe sample", n.Name)
	case !p.fresh(n):
		return fmt.Sprintf("%s's probe sample is stale (%s)", n.Name, stamp(n.Probe.At))
	case !n.Probe.Healthy:
		why := n.Probe.Error
		if why == "" {
			why = fmt.Sprintf("fsync p99 %.1f ms", n.Probe.FsyncP99Ms)
			if n.Probe.RTTMs > 0 {
				why += fmt.Sprintf(", read %.1f ms", n.Probe.RTTMs)
			}
		}
		return fmt.Sprintf("%s's probe says unhealthy: %s", n.Name, why)
	}
	return ""
}

// memberNode maps an etcd member name to its Node: by the names the Nodes
// carry, else k3s's "<node>-<8 hex>" form.
func (p *planner) memberNode(member string) string {
	if member == "" {
		return UnstartedLearner
	}
	if n, ok := p.owner[member]; ok {
		return n
	}
	if i := strings.LastIndexByte(member, '-'); i > 0 && len(member)-i-1 == 8 && isHex(member[i+1:]) {
		return member[:i]
	}
	return member
}

// memberHost maps an etcd member to its Node: by its name (memberNode),
// and a learner with none, whose member never started, by its peer URL's
// host among the Nodes' addresses (UnstartedLearner when none has it).
// k3s gives a member its peer URL at the joining server's node-ip
// (k3s-io/k3s pkg/etcd/etcd.go, (*ETCD).join: peerURL), its Node's
// InternalIP (Node.Addresses).
func (p *planner) memberHost(m api.Member) string {
	if m.Name != "" {
		return p.memberNode(m.Name)
	}
	for _, u := range m.PeerURLs {
		if pu, err := url.Parse(u); err == nil {
			if n, ok := p.byAddress[pu.Hostname()]; ok {
				return n
			}
		}
	}
	return UnstartedLearner
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// UnstartedLearner stands for the Node of a learner etcd lists without a
// name: added, but its member has not started (or cannot reach the
// leader) yet.
const UnstartedLearner = "(a learner not started yet)"

// listed returns the Nodes the Node's etcd lists as members, sorted, and
// those it lists as learners.
func (p *planner) listed(n *Node) (members, learners []string) {
	if n.Probe == nil {
		return nil, nil
	}
	for _, m := range n.Probe.Members {
		name := p.memberHost(m)
		members = append(members, name)
		if m.Learner {
			learners = append(learners, name)
		}
	}
	slices.Sort(members)
	return members, learners
}

// membershipProblem says how the Node's fresh member list differs from the
// expected Nodes (sorted), or that it lists a learner. Empty when it matches.
func (p *planner) membershipProblem(n *Node, expected []string) string {
	if !p.fresh(n) {
		return fmt.Sprintf("%s has no fresh member list", n.Name)
	}
	members, learners := p.listed(n)
	if len(learners) > 0 {
		return fmt.Sprintf("%s lists a learner: %s", n.Name, strings.Join(learners, ", "))
	}
	if !slices.Equal(members, expected) {
		return fmt.Sprintf("%s lists members [%s], expected [%s]", n.Name, strings.Join(members, " "), strings.Join(expected, " "))
	}
	return ""
}

// tolerates is how many more member failures etcd survives now: the
// voting members up (each a Node Ready with a fresh sample, healthy or
// only slow) less a majority of the voting members. The voting members
// are those the voters' fresh lists name (the voter Nodes when none is
// fresh). A member whose Node carries the step-down of the swap under
// way counts down, stopped or stopping, until it is removed: etcd counts
// a stopped member until then. Below 0: no quorum.
func (p *planner) tolerates() int {
	var members []string
	for _, v := range p.voters {
		if !p.fresh(v) {
			continue
		}
		all, learners := p.listed(v)
		for _, m := range all {
			if !slices.Contains(learners, m) && !slices.Contains(members, m) {
				members = append(members, m)
			}
		}
	}
	if len(members) == 0 {
		members = p.voterNames()
	}
	var up []string
	for _, m := range members {
		if n := p.node(m); n != nil && (p.rec == nil || n.requested(p.rec.ID, api.RequestStepDown) == nil) {
			up = append(up, m)
		}
	}
	healthy, _ := p.voterHealth(up, true)
	return healthy - Quorum(len(members))
}

// voterSet returns the voters' names with add added and drop left out, sorted.
func (p *planner) voterSet(add []string, drop string) []string {
	set := make([]string, 0, len(p.voters)+len(add))
	for _, v := range p.voters {
		if v.Name != drop {
			set = append(set, v.Name)
		}
	}
	for _, a := range add {
		if a != drop && !slices.Contains(set, a) {
			set = append(set, a)
		}
	}
	slices.Sort(set)
	return set
}

// lists says whether the Node's etcd lists a member of the named Node.
func (p *planner) lists(n *Node, name string, learnerToo bool) bool {
	if n.Probe == nil {
		return false
	}
	for _, m := range n.Probe.Members {
		if p.memberHost(m) == name && (learnerToo || !m.Learner) {
			return true
		}
	}
	return false
}

func (p *planner) wait(step, format string, args ...any) Plan {
	return Plan{Action: Action{Type: api.ActionNone}, Step: step, Reason: fmt.Sprintf(format, args...)}
}

func (p *planner) act(step string, a Action, format string, args ...any) Plan {
	return Plan{Action: a, Step: step, Reason: fmt.Sprintf(format, args...)}
}

func (p *planner) request(node *Node, step, action string) Action {
	return Action{Type: step, Node: node.Name, Request: &api.Request{Swap: p.rec.ID, Action: action, At: p.s.Now}}
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func unfinishedRunners(n *Node) (names []string) {
	for _, pod := range n.Pods {
		if pod.Runner && !pod.Finished {
			names = append(names, pod.Namespace+"/"+pod.Name)
		}
	}
	return names
}

// evictable returns the pods a drain must remove, and whether any of them
// is not yet terminating (so a drain has work to do).
func evictable(n *Node) (names []string, toEvict bool) {
	for _, pod := range n.Pods {
		if pod.DaemonSet || pod.Mirror || pod.Finished {
			continue
		}
		names = append(names, pod.Namespace+"/"+pod.Name)
		toEvict = toEvict || !pod.Terminating
	}
	return names, toEvict
}

func short(names []string) string {
	if len(names) > 3 {
		return strings.Join(names[:3], ", ") + fmt.Sprintf(" and %d more", len(names)-3)
	}
	return strings.Join(names, ", ")
}
