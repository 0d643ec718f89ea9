package swapplan

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleet-role/fleet-role/api"
)

// idle: no swap under way. The clear of a demotion finished after its
// swap ended first (not a swap: neither a pause nor a hold keeps it),
// then a manual request, else the automatic decision; while paused or
// held, neither starts but a request with the override of each.
func (p *planner) idle() Plan {
	if plan, ok := p.clearFinished(); ok {
		return plan
	}
	if q := p.s.Request; q != nil && !p.consumed(q) {
		return p.manual(q)
	}
	return p.automatic()
}

// requestObstacles says what keeps the manual request from starting a
// swap now, each as "waits: ..." or "is refused: ...", in the order the
// planner weighs them: the pause and the holds (each passed by its
// override), OUT and IN (no override: with either wrong, nothing after is
// weighed), the failure domains (passed by OverrideDomains), the start
// gates (no override). Empty: it starts. Every manual request honours the
// gates but the cooldown and the verdicts.
func (p *planner) requestObstacles(q *api.ManualRequest) []string {
	var why []string
	if pa := p.s.Pause; pa != nil && !q.Overridden(api.OverridePause) {
		why = append(why, fmt.Sprintf("waits: %s; fleet-role resume, or swap --override %s", paused(pa), api.OverridePause))
	}
	if h := p.holds(q.Out); len(h) > 0 && !q.Overridden(api.OverrideHolds) {
		why = append(why, fmt.Sprintf("waits: %s; or swap --override %s", held(h), api.OverrideHolds))
	}
	out, in := p.node(q.Out), p.node(q.In)
	if r := p.refusal(q.Out, q.In, out, in, false); r != "" {
		return append(why, "is refused: "+r)
	}
	if r := p.domainRefusal(out, in); r != "" && !q.Overridden(api.OverrideDomains) {
		why = append(why, fmt.Sprintf("is refused: %s; or swap --override %s", r, api.OverrideDomains))
	}
	if r := p.startGates(out); r != "" {
		why = append(why, "waits: "+r)
	}
	return why
}

// paused says who paused the controller, when and why.
func paused(pa *api.Pause) string {
	by := pa.By
	if by == "" {
		by = "someone"
	}
	return fmt.Sprintf("paused by %s at %s: %s", by, stamp(pa.At), pa.Reason)
}

// wouldWait says what would keep a dry run's decision from starting were
// the dry run off: a pause, the holds. Empty when nothing would.
func (p *planner) wouldWait(out string) string {
	var why []string
	if pa := p.s.Pause; pa != nil {
		why = append(why, paused(pa))
	}
	if h := p.holds(out); len(h) > 0 {
		why = append(why, held(h))
	}
	if len(why) == 0 {
		return ""
	}
	return "; would wait: " + strings.Join(why, "; ")
}

// holds are the holds in force for a swap of the voter out: the
// Snapshot's, and every other voter under maintenance (Node.Maintenance:
// cordoned not by fleet-role, marked, holding kured's lock), each a
// disruption of its own, as OpenShift's etcd operator counts a cordoned
// control-plane Node: one disruption at a time.
func (p *planner) holds(out string) []string {
	h := slices.Clone(p.s.Holds)
	for _, n := range p.nodes {
		if n.Name != out && n.Role == api.RoleVoter && n.Maintenance != "" {
			h = append(h, fmt.Sprintf("the voter %s is under maintenance (%s)", n.Name, n.Maintenance))
		}
	}
	return h
}

// held says what holds the start of a swap.
func held(holds []string) string {
	return "held: " + strings.Join(holds, "; ")
}

// consumed says the request already started a swap.
func (p *planner) consumed(q *api.ManualRequest) bool {
	last := p.s.Status.Last
	return last != nil && last.RequestAt != nil && last.RequestAt.Equal(q.At)
}

// manual carries the request out once nothing keeps it
// (requestObstacles); else it waits, saying the first thing that does.
func (p *planner) manual(q *api.ManualRequest) Plan {
	if why := p.requestObstacles(q); len(why) > 0 {
		if r, _ := p.preflight(p.node(q.Out), p.node(q.In)); r != "" && why[0] == "is refused: "+r {
			p.refused = append(p.refused, PreflightRefusal{Node: q.In, Reason: r})
		}
		return p.wait("", "the manual request to swap %s for %s %s", q.Out, q.In, why[0])
	}
	at := q.At
	why := fmt.Sprintf("carrying out the manual request of %s to swap %s for %s", q.By, q.Out, q.In)
	if len(q.Overrides) > 0 {
		why += ", past: " + strings.Join(q.Overrides, ", ")
	}
	plan := p.start(p.node(q.Out), p.node(q.In), api.OriginManual, &at, why)
	plan.Swap.Overrides = slices.Clone(q.Overrides)
	return plan
}

// refusal says why OUT cannot be swapped for IN; empty when it can.
func (p *planner) refusal(outName, inName string, out, in *Node, needFit bool) string {
	switch {
	case out == nil:
		return fmt.Sprintf("there is no Node %s", outName)
	case !out.Voter():
		return fmt.Sprintf("%s is not a voter", out.Name)
	case in == nil:
		return fmt.Sprintf("there is no Node %s", inName)
	case in.Voter():
		return fmt.Sprintf("%s is a voter already", in.Name)
	}
	if why := p.ineligible(in, needFit); why != "" {
		return why
	}
	refused, _ := p.preflight(out, in)
	return refused
}

// ineligible says why the Node is not an eligible standby: no demotion
// left unfinished, staged, Ready, schedulable, not under maintenance and
// (when needFit) fit.
// Empty when it is.
func (p *planner) ineligible(n *Node, needFit bool) string {
	unfinished := p.unfinishedDemotion(n)
	switch {
	case n.Role != api.RoleStandby:
		return fmt.Sprintf("%s's role is %q, not %q", n.Name, n.Role, api.RoleStandby)
	case unfinished != "":
		return unfinished
	case n.Probe == nil || !p.fresh(n):
		return fmt.Sprintf("%s has no fresh probe sample", n.Name)
	case !n.Probe.Staged:
		return fmt.Sprintf("%s is not staged to become a server", n.Name)
	case !n.Ready:
		return fmt.Sprintf("%s is not Ready", n.Name)
	case n.Unschedulable:
		return fmt.Sprintf("%s is cordoned", n.Name)
	case n.Maintenance != "":
		return fmt.Sprintf("%s is under maintenance (%s)", n.Name, n.Maintenance)
	case needFit && n.Verdict.State != api.VerdictFit:
		return fmt.Sprintf("%s's verdict is %q, not %q", n.Name, n.Verdict.State, api.VerdictFit)
	}
	return ""
}

// startGates: before a swap starts, no voter's probe is silent and every
// voter but OUT is healthy and lists exactly the voters, none a learner.
func (p *planner) startGates(out *Node) string {
	if why := p.silentVoter(out.Name); why != "" {
		return why
	}
	expected := p.voterSet(nil, "")
	for _, v := range p.voters {
		if v.Name == out.Name {
			continue
		}
		if why := p.unhealthy(v); why != "" {
			return why
		}
		if why := p.membershipProblem(v, expected); why != "" {
			return why
		}
	}
	return ""
}

// automatic honours the cooldown and the verdicts, and in a dry run only
// reports its decision.
func (p *planner) automatic() Plan {
	out, in, why := p.decide()
	if out == nil {
		return p.wait("", "%s", why)
	}
	d := &api.Decision{Out: out.Name, In: in.Name, Reason: why}
	plan := func(format string, args ...any) Plan {
		pl := p.wait("", format, args...)
		pl.Decision = d
		return pl
	}
	// Note: a dead voter does not wait for the cooldown, which spaces the
	// swaps of unfit voters; etcd tolerates one failure less meanwhile.
	if _, dead := p.dead(out); !dead && p.s.Status.CooldownUntil != nil && p.s.Now.Before(*p.s.Status.CooldownUntil) {
		c := p.s.Status.CooldownUntil
		return plan("the automatic decision to swap %s for %s waits for the cooldown until %s (%s)", out.Name, in.Name, stamp(*c), why)
	}
	if why, spent := p.retryLimit(out); why != "" {
		pl := plan("the automatic decision to swap %s for %s %s (%s)", out.Name, in.Name, why, d.Reason)
		pl.RetriesSpent = spent
		return pl
	}
	if w := p.s.Config.Window; !w.Open(p.s.Now) {
		return plan("the automatic decision to swap %s for %s waits for the maintenance window (%s): %s", out.Name, in.Name, w, why)
	}
	if p.s.Config.DryRun {
		return plan("dry run: would swap %s for %s (%s)%s", out.Name, in.Name, why, p.wouldWait(out.Name))
	}
	if pa := p.s.Pause; pa != nil {
		return plan("the automatic decision to swap %s for %s waits: %s", out.Name, in.Name, paused(pa))
	}
	if h := p.holds(out.Name); len(h) > 0 {
		return plan("the automatic decision to swap %s for %s waits: %s", out.Name, in.Name, held(h))
	}
	if gate := p.startGates(out); gate != "" {
		return plan("the automatic decision to swap %s for %s waits: %s", out.Name, in.Name, gate)
	}
	pl := p.start(out, in, api.OriginAutomatic, nil, fmt.Sprintf("swapping %s for %s: %s", out.Name, in.Name, why))
	pl.Decision = d
	return pl
}

// retryLimit says why an automatic swap of out, a retry of the
// remediation that put it in, may not start now: past max_retries (spent:
// until the minimum healthy period runs out), or within the retry period.
// Empty when it is no retry, or one that may start. Cluster API's
// KubeadmControlPlane (checkRetryLimits) is the model: a retry is a
// remediation of the replacement before its minimum healthy period runs
// out, counted from the previous remediation's time.
func (p *planner) retryLimit(out *Node) (why string, spent bool) {
	c := p.s.Config.Remediation
	r := p.remediationOf(out.Name, p.s.Now)
	if r == nil {
		return "", false
	}
	if c.MaxRetries >= 0 && r.Retry >= c.MaxRetries {
		return fmt.Sprintf("does not start: %s was put in by the automatic swap %s at %s and turned unfit within min_healthy_period (%s), "+
			"and that remediation has spent its max_retries (%d); automatic swaps start again at %s, a manual swap at any time",
			out.Name, r.Swap, stamp(r.At), c.MinHealthyPeriod, c.MaxRetries, stamp(r.At.Add(c.MinHealthyPeriod))), true
	}
	if until := r.At.Add(c.RetryPeriod); p.s.Now.Before(until) {
		return fmt.Sprintf("waits for retry_period until %s: it would retry the remediation of swap %s, which put %s in at %s",
			stamp(until), r.Swap, out.Name, stamp(r.At)), false
	}
	return "", false
}

// remediationOf is the remediation that put the voter in, if its minimum
// healthy period runs at the time given: nil when none did.
func (p *planner) remediationOf(voter string, at time.Time) *api.Remediation {
	for i := range p.s.Status.Remediations {
		r := &p.s.Status.Remediations[i]
		if r.In == voter && at.Before(r.At.Add(p.s.Config.Remediation.MinHealthyPeriod)) {
			return r
		}
	}
	return nil
}

// remediations is the record after the swap rec ends: the automatic
// swaps that completed whose minimum healthy period still runs, one for
// each voter they put in; rec among them when it is one, a retry of the
// remediation that put its outgoing voter in at the swap's start when
// there is one. Nil when nothing changes: rec is no remediation, or an end
// repeated finds it recorded already.
func (p *planner) remediations(rec *api.SwapRecord) []api.Remediation {
	if rec.Origin != api.OriginAutomatic || rec.Result != api.ResultCompleted {
		return nil
	}
	for _, r := range p.s.Status.Remediations {
		if r.Swap == rec.ID {
			return nil
		}
	}
	next := api.Remediation{Swap: rec.ID, Out: rec.Out, In: rec.In, At: rec.StartedAt}
	if prev := p.remediationOf(rec.Out, rec.StartedAt); prev != nil {
		next.Retry = prev.Retry + 1
	}
	var kept []api.Remediation
	for _, r := range p.s.Status.Remediations {
		if r.In != rec.Out && r.In != rec.In && p.s.Now.Before(r.At.Add(p.s.Config.Remediation.MinHealthyPeriod)) {
			kept = append(kept, r)
		}
	}
	return append(kept, next)
}

// decide takes the worst unfit voter and the best eligible standby: the
// one that keeps the voters spread across failure domains best, then the
// fittest; ties break on the name.
func (p *planner) decide() (out, in *Node, why string) {
	var fault string
	dead := p.deadVoters()
	switch {
	case len(dead) > 0 && !p.s.Config.ReplaceDead:
		// Note: no other voter is swapped meanwhile either: the gates
		// hold every swap while a voter is silent.
		return nil, nil, fmt.Sprintf("no swap: the voter %s is dead: %s; replace_dead_voters is off, so no swap starts for it: "+
			"fleet-role swap %s STANDBY replaces it by hand", dead[0].Node, dead[0].Reason, dead[0].Node)
	case len(dead) > 0:
		// A dead voter first: etcd tolerates one failure less already.
		out, fault = p.node(dead[0].Node), "dead: "+dead[0].Reason
	default:
		for _, v := range p.voters {
			if v.Verdict.State == api.VerdictUnfit && (out == nil || v.Verdict.Score > out.Verdict.Score) {
				out = v
			}
		}
		if out == nil {
			why := "no swap: no voter is unfit"
			if m := p.maintainedSilent(); len(m) > 0 {
				why += "; " + strings.Join(m, "; ")
			}
			return nil, nil, why
		}
		fault = "unfit (" + out.Verdict.Reason + ")"
	}
	var mismatched []string
	for i := range p.nodes {
		n := &p.nodes[i]
		if n.Role != api.RoleStandby || n.Voter() || p.ineligible(n, true) != "" {
			continue
		}
		if refused, _ := p.preflight(out, n); refused != "" {
			mismatched = append(mismatched, refused)
			p.refused = append(p.refused, PreflightRefusal{Node: n.Name, Reason: refused})
			continue
		}
		if in == nil {
			in = n
			continue
		}
		if c := slices.Compare(p.spreadKey(out, n), p.spreadKey(out, in)); c < 0 || c == 0 && n.Verdict.Score < in.Verdict.Score {
			in = n
		}
	}
	if in == nil && len(mismatched) > 0 {
		return nil, nil, fmt.Sprintf("no swap: the voter %s is %s but no standby is eligible: %s", out.Name, fault, strings.Join(mismatched, "; "))
	}
	if in == nil {
		return nil, nil, fmt.Sprintf("no swap: the voter %s is %s but no standby is eligible", out.Name, fault)
	}
	why = fmt.Sprintf("%s is %s; %s is the fittest eligible standby", out.Name, fault, in.Name)
	if _, _, ok := p.domainCounts(out, in); ok {
		why += " that keeps the voters spread across " + p.s.Config.DomainLabel
		if crowd := p.domainRefusal(out, in); crowd != "" {
			why += " as best it can (" + crowd + ", as with every eligible standby)"
		}
	}
	return out, in, why
}

func (p *planner) start(out, in *Node, origin string, requestAt *time.Time, why string) Plan {
	if _, unknown := p.preflight(out, in); unknown != "" {
		why += "; preflight: " + unknown
	}
	now := p.s.Now
	_, dead := p.dead(out)
	rec := &api.SwapRecord{
		ID:        SwapID(now, out.Name),
		Out:       out.Name,
		In:        in.Name,
		Origin:    origin,
		StartedAt: now,
		RequestAt: requestAt,
		Dead:      dead,
	}
	return Plan{Action: Action{Type: api.ActionStart}, Step: api.StepStart, Swap: rec, Reason: why}
}

// SwapID names a swap by its start and its outgoing voter.
func SwapID(start time.Time, out string) string {
	return start.UTC().Format("20060102-150405") + "-" + out
}

// CheckRequest says why a manual request to swap out for in with the
// overrides would be refused now: OUT not a voter, IN not an eligible
// standby, a majority of the voters put in one failure domain (unless
// OverrideDomains), a swap (or a regrade) under way, or another request
// that waits. It is what `fleet-role swap` checks before it writes the
// request; the planner checks the same again, and the gates.
func CheckRequest(s Snapshot, out, in string, overrides []string) error {
	p := newPlanner(s)
	if out == in {
		return fmt.Errorf("OUT and IN are the same node %q", out)
	}
	if why := p.underWay(); why != "" {
		return errors.New(why)
	}
	if why := p.refusal(out, in, p.node(out), p.node(in), false); why != "" {
		return errors.New(why)
	}
	if why := p.domainRefusal(p.node(out), p.node(in)); why != "" && !slices.Contains(overrides, api.OverrideDomains) {
		return fmt.Errorf("%s; swap --override %s to do it anyway", why, api.OverrideDomains)
	}
	if why := p.otherRequest(out, in); why != "" {
		return errors.New(why)
	}
	return nil
}

// underWay says which swap (or regrade) is under way; empty when none is.
func (p *planner) underWay() string {
	s := p.s
	if p.leaseHeldByOther() {
		return fmt.Sprintf("the Lease %s/%s is held by %q: a regrade is under way", api.Namespace, api.LeaseName, s.Lease.Holder)
	}
	if l := s.Lease; l.Holder == api.ControllerHolder && l.Swap != nil {
		return fmt.Sprintf("swap %s (%s out, %s in) is under way", l.Swap.ID, l.Swap.Out, l.Swap.In)
	}
	if rec := s.Status.Swap; rec != nil && (s.Status.Last == nil || s.Status.Last.ID != rec.ID) {
		return fmt.Sprintf("swap %s (%s out, %s in) is under way", rec.ID, rec.Out, rec.In)
	}
	return ""
}

// otherRequest says which other request waits to be carried out; empty
// when none does. Of two people asking at once, the first wins: a
// request that waits is not replaced. One the planner refuses may be.
func (p *planner) otherRequest(out, in string) string {
	if q := PendingRequest(p.s); q != nil && (q.Out != out || q.In != in) && p.refusal(q.Out, q.In, p.node(q.Out), p.node(q.In), false) == "" {
		return fmt.Sprintf("%s's request to swap %s for %s (at %s) waits to be carried out: fleet-role swap --cancel withdraws it",
			q.By, q.Out, q.In, stamp(q.At))
	}
	return ""
}

// Obstacles says everything that keeps the manual request q from starting
// a swap now, each reason on its own, for `fleet-role swap --dry-run`:
// what `fleet-role swap` would refuse to write it for (a swap or a
// regrade under way, another request that waits), then what the planner
// would wait for or refuse it for, in the order it weighs them
// (requestObstacles). The snapshot is read as it stands, without q in
// it. Empty: written now, the request would start its swap at the
// controller's next pass (but for the clear of a finished demotion,
// which goes first).
func Obstacles(s Snapshot, q api.ManualRequest) []string {
	p := newPlanner(s)
	if q.Out == q.In {
		return []string{fmt.Sprintf("is refused: OUT and IN are the same node %q", q.Out)}
	}
	var why []string
	if w := p.underWay(); w != "" {
		why = append(why, "is refused: "+w)
	}
	if w := p.otherRequest(q.Out, q.In); w != "" {
		why = append(why, "is refused: "+w)
	}
	return append(why, p.requestObstacles(&q)...)
}

// PendingRequest is the manual request that has not started a swap, if
// any.
func PendingRequest(s Snapshot) *api.ManualRequest {
	if q := s.Request; q != nil && !newPlanner(s).consumed(q) {
		return q
	}
	return nil
}
