package swapplan

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleet-role/fleet-role/api"
)

// The swap under way. The step is read from the Nodes, the reports and the
// Lease: the strongest evidence of progress first, so that a step once
// passed is not returned to when an earlier one's evidence fades (a
// cordon lifted at the end, a request overwritten).
func (p *planner) swap() Plan {
	switch p.rec.Phase {
	case api.PhaseEnd:
		return p.end(p.rec.Result, p.rec.Pending, p.rec.Reason)
	case api.PhaseAbandon:
		return p.abandoning()
	case api.PhaseRollback, api.PhaseStuck:
		return p.rollingBack()
	}
	return p.forward()
}

func (p *planner) forward() Plan {
	id := p.rec.ID
	in, out := p.node(p.rec.In), p.node(p.rec.Out)
	if in == nil {
		return p.candidateGone(out)
	}
	if out == nil {
		return p.outgoingGone(in)
	}
	if c := p.s.Cancel; c != nil && c.Swap == id && p.cancelRefused(in, out) == "" {
		by := c.By
		if by == "" {
			by = "someone"
		}
		reason := fmt.Sprintf("cancelled by %s at %s", by, stamp(c.At))
		if in.requested(id, api.RequestPromote) != nil {
			return p.rollback(reason)
		}
		return p.abandon(reason) // nothing changed on a host yet
	}
	if p.rec.Dead {
		return p.forwardDead(in, out)
	}
	switch {
	case in.Role == api.RoleVoter && out.Role == api.RoleStandby:
		return p.tail(in, out)
	case out.Role == api.RoleStandby:
		return p.act(api.StepCleanUp, Action{Type: api.ActionCleanUp, Node: in.Name, Role: api.RoleVoter},
			"the outgoing voter %s is cleaned up: labelling the candidate %s a voter", out.Name, in.Name)
	case out.MemberGone == id:
		return p.memberGoneWait(out)
	case out.RemoveRequested || out.MemberRemoved():
		return p.removeWait(in, out)
	case out.requested(id, api.RequestStepDown) != nil:
		return p.stepDownWait(in, out)
	case out.CordonedBy == id:
		return p.prepareOut(in, out)
	case in.requested(id, api.RequestPromote) != nil:
		return p.promoteWait(in, out)
	}
	return p.prepareIn(in, out)
}

// candidateGone: IN's Node was deleted (k3s removed its member if the
// Node was labelled an etcd Node). Once OUT was asked to step down the
// swap goes on without IN (a stopped server is not started again: see
// cancelRefused); before, it rolls back, or abandons when IN was not
// asked to promote and no voter lists a member of it.
func (p *planner) candidateGone(out *Node) Plan {
	id := p.rec.ID
	if out != nil {
		switch {
		case out.Role == api.RoleStandby:
			return p.tail(nil, out)
		case out.MemberGone == id:
			return p.memberGoneWait(out)
		case out.RemoveRequested || out.MemberRemoved():
			return p.removeWait(nil, out)
		case out.requested(id, api.RequestStepDown) != nil:
			return p.stepDownWait(nil, out)
		}
	}
	why := fmt.Sprintf("the candidate's Node %s was deleted", p.rec.In)
	if _, lister := p.candidateMember(p.rec.In); lister == nil && (out == nil || out.CordonedBy != id) && !p.reached(api.StepPromote) {
		return p.abandon(why + " before it was asked to promote: nothing changed on a host")
	}
	return p.rollback(why + " before the outgoing voter was asked to step down")
}

// reached says the status shows the swap at the step or a later forward one.
func (p *planner) reached(step string) bool {
	st := p.s.Status
	if st.Swap == nil || st.Swap.ID != p.rec.ID {
		return false
	}
	at := slices.Index(api.Steps, st.Step)
	return at >= slices.Index(api.Steps, step) && at <= slices.Index(api.Steps, api.StepEnd)
}

// outgoingGone: OUT's Node was deleted, and k3s removed its member with
// it. Before IN was asked to promote nothing changed on a host: abandon.
// After, the swap goes on to where IN votes and every voter lists the
// expected members, skipping every step that needs OUT's Node, and ends
// completed with OUT pending; past the promotion's and the join's bounds
// it rolls back as it does with OUT there.
func (p *planner) outgoingGone(in *Node) Plan {
	id := p.rec.ID
	if in.Role == api.RoleVoter {
		if in.CordonedBy == id && in.Unschedulable {
			return p.act(api.StepUncordon, Action{Type: api.ActionUncordon, Node: in.Name}, "uncordoning the new voter %s", in.Name)
		}
		return p.end(api.ResultCompleted, []string{p.rec.Out}, fmt.Sprintf("the outgoing voter's Node %s was deleted and k3s removed its member: "+
			"with no Node, its agent can be told nothing, so its host was not demoted: it may still run its server until an operator stops it", p.rec.Out))
	}
	promoted := in.requested(id, api.RequestPromote) != nil
	if c := p.s.Cancel; c != nil && c.Swap == id {
		by := c.By
		if by == "" {
			by = "someone"
		}
		reason := fmt.Sprintf("cancelled by %s at %s", by, stamp(c.At))
		if promoted {
			return p.rollback(reason)
		}
		return p.abandon(reason)
	}
	if !promoted {
		return p.abandon(fmt.Sprintf("the outgoing voter's Node %s was deleted before the candidate was asked to promote: nothing changed on a host", p.rec.Out))
	}
	return p.promoteWait(in, nil)
}

// settleWithoutOutgoing: IN votes and OUT's Node is gone: once every
// voter lists, fresh, the expected members (the voters, IN among them,
// and not OUT), IN is labelled a voter. Held, and said so, past the
// gates' bound: IN votes, and a rollback would leave a voter fewer.
func (p *planner) settleWithoutOutgoing(in *Node) Plan {
	expected := p.voterSet([]string{in.Name}, p.rec.Out)
	for _, name := range expected {
		v := p.node(name)
		why := ""
		if v == nil {
			why = fmt.Sprintf("voter %s has no Node", name)
		} else {
			why = p.membershipProblem(v, expected)
		}
		if why != "" {
			if p.pastBound(api.StepGates) {
				return p.wait(api.StepGates, "the outgoing voter's Node %s was deleted; held past the bound %s until every voter lists the expected members "+
					"(a member of %s still listed is removed by hand: etcdctl member remove): %s", p.rec.Out, p.bound(api.StepGates), p.rec.Out, why)
			}
			return p.wait(api.StepGates, "the outgoing voter's Node %s was deleted; waiting until every voter lists the expected members: %s", p.rec.Out, why)
		}
	}
	return p.act(api.StepCleanUp, Action{Type: api.ActionCleanUp, Node: in.Name, Role: api.RoleVoter},
		"the outgoing voter's Node %s was deleted and every voter lists the expected members: labelling the candidate %s a voter", p.rec.Out, in.Name)
}

// prepareIn: snapshot, cordon-in, runners-in, drain-in, then promote.
func (p *planner) prepareIn(in, out *Node) Plan {
	if plan, done := p.readyIn(in, out); !done {
		return plan
	}
	return p.promote(in, out)
}

// promote asks IN's agent to promote it, naming the voters it may join
// through.
func (p *planner) promote(in, out *Node) Plan {
	a := p.request(in, api.ActionPromote, api.RequestPromote)
	a.Request.Voters = p.joinThrough(in, out)
	return p.act(api.StepPromote, a, "the candidate %s is cordoned and drained: asking its agent to promote it", in.Name)
}

// readyIn: snapshot, cordon-in, runners-in, drain-in; done once IN is
// cordoned and drained, the snapshot ready.
func (p *planner) readyIn(in, out *Node) (Plan, bool) {
	if plan, done := p.snapshotStep(out); !done {
		return plan, false
	}
	if !in.Unschedulable {
		return p.act(api.StepCordonIn, Action{Type: api.ActionCordonIn, Node: in.Name}, "cordoning the candidate %s", in.Name), false
	}
	if runners := unfinishedRunners(in); len(runners) > 0 {
		if p.pastBound(api.StepRunnersIn) {
			return p.abandon(fmt.Sprintf("the runner pods on the candidate %s did not finish within the runner wait %s: %s",
				in.Name, p.bound(api.StepRunnersIn), short(runners))), false
		}
		return p.wait(api.StepRunnersIn, "waiting for %d runner pod(s) on the candidate %s to finish: %s", len(runners), in.Name, short(runners)), false
	}
	if pods, toEvict := evictable(in); len(pods) > 0 {
		if p.pastBound(api.StepDrainIn) {
			return p.abandon(fmt.Sprintf("the candidate %s was not drained within %s: %s", in.Name, p.bound(api.StepDrainIn), short(pods))), false
		}
		if toEvict {
			return p.act(api.StepDrainIn, Action{Type: api.ActionDrainIn, Node: in.Name}, "draining the candidate %s: %d pod(s) to evict", in.Name, len(pods)), false
		}
		return p.wait(api.StepDrainIn, "waiting for %d evicted pod(s) on the candidate %s to go: %s", len(pods), in.Name, short(pods)), false
	}
	return Plan{}, true
}

// joinThrough are the voters a candidate's server may join through: the
// healthy ones other than OUT, or, where none is, every voter but IN.
func (p *planner) joinThrough(in, out *Node) []string {
	var healthy, all []string
	for _, v := range p.voters {
		if v.Name == in.Name {
			continue
		}
		all = append(all, v.Name)
		if v.Name != out.Name && p.unhealthy(v) == "" {
			healthy = append(healthy, v.Name)
		}
	}
	if len(healthy) > 0 {
		return healthy
	}
	return all
}

// snapshotStep: a healthy voter that is not OUT takes an etcd snapshot;
// done when its report says done and the snapshot is ready.
func (p *planner) snapshotStep(out *Node) (Plan, bool) {
	id := p.rec.ID
	for i := range p.nodes {
		n := &p.nodes[i]
		if rep := n.answer(id, api.RequestSnapshot); rep != nil && rep.State == api.StateDone && rep.Snapshot.Ready() {
			return Plan{}, true
		}
	}
	if p.pastBound(api.StepSnapshot) {
		return p.abandon(fmt.Sprintf("no snapshot was ready within %s", p.bound(api.StepSnapshot))), false
	}
	var target *Node
	for _, v := range p.voters {
		if v.Name != out.Name && v.requested(id, api.RequestSnapshot) != nil && p.unhealthy(v) == "" {
			target = v
			break
		}
	}
	if target == nil {
		for _, v := range p.voters {
			if v.Name != out.Name && p.unhealthy(v) == "" {
				target = v
				break
			}
		}
	}
	if target == nil {
		return p.wait(api.StepSnapshot, "no healthy voter other than the outgoing %s to take the snapshot", out.Name), false
	}
	ask := func(why string) Plan {
		return p.act(api.StepSnapshot, p.request(target, api.ActionSnapshot, api.RequestSnapshot), "%s", why)
	}
	if target.requested(id, api.RequestSnapshot) == nil {
		return ask(fmt.Sprintf("asking the voter %s for an etcd snapshot before the swap", target.Name)), false
	}
	rep := target.answer(id, api.RequestSnapshot)
	switch {
	case rep == nil:
		return p.wait(api.StepSnapshot, "waiting for the snapshot from %s", target.Name), false
	case rep.State == api.StateDone:
		return p.wait(api.StepSnapshot, "%s says the snapshot is done but it is not ready (no verified file, size and sha256 yet)", target.Name), false
	}
	return ask(fmt.Sprintf("the snapshot on %s %s (%s): asking again", target.Name, rep.State, rep.Message)), false
}

func (p *planner) promoteWait(in, out *Node) Plan {
	if plan, votes := p.promoted(in, ""); !votes {
		return plan
	}
	if out == nil {
		return p.settleWithoutOutgoing(in)
	}
	return p.prepareOut(in, out)
}

// promoted waits for IN's answer to its promotion and for its vote,
// rolling back past their bounds or on a failure, abandoning on a refusal
// (refused adds to the reason); votes once IN votes.
func (p *planner) promoted(in *Node, refused string) (plan Plan, votes bool) {
	rep := in.answer(p.rec.ID, api.RequestPromote)
	if rep == nil {
		if p.pastBound(api.StepPromote) {
			return p.rollback(fmt.Sprintf("the candidate %s did not answer the promotion within %s", in.Name, p.bound(api.StepPromote))), false
		}
		return p.wait(api.StepPromote, "waiting for the candidate %s to report its promotion", in.Name), false
	}
	switch rep.State {
	case api.StateRefused:
		return p.abandon(fmt.Sprintf("the candidate %s refused the promotion (%s): nothing changed on the host%s", in.Name, rep.Message, refused)), false
	case api.StateFailed:
		return p.rollback(fmt.Sprintf("the promotion failed on the candidate %s (%s)", in.Name, rep.Message)), false
	}
	if why := p.notVoting(in, p.rec.Out, rep); why != "" {
		if p.pastBound(api.StepJoin) {
			return p.rollback(fmt.Sprintf("the candidate %s is not a voter within %s: %s", in.Name, p.bound(api.StepJoin), why)), false
		}
		return p.wait(api.StepJoin, "waiting for the candidate to vote: %s", why), false
	}
	return Plan{}, true
}

// notVoting says why IN does not vote yet: EtcdIsVoter True, every voter
// but OUT lists it as a voter, and it is Ready on a kubelet heartbeat later
// than the server start it reported.
func (p *planner) notVoting(in *Node, out string, rep *api.Report) string {
	if in.EtcdIsVoter.Status != "True" {
		return fmt.Sprintf("%s's EtcdIsVoter is %q/%q", in.Name, in.EtcdIsVoter.Status, in.EtcdIsVoter.Reason)
	}
	if !in.Voter() {
		return fmt.Sprintf("%s carries no %s label", in.Name, api.LabelEtcd)
	}
	for _, v := range p.voters {
		if v.Name == out {
			continue
		}
		if !p.fresh(v) {
			return fmt.Sprintf("voter %s has no fresh member list", v.Name)
		}
		if !p.lists(v, in.Name, false) {
			return fmt.Sprintf("voter %s does not list %s as a voter", v.Name, in.Name)
		}
	}
	if rep.StartedAt == nil {
		return fmt.Sprintf("%s's report of the promotion says no server start", in.Name)
	}
	if !in.Ready || !beatAfter(in, *rep.StartedAt) {
		return fmt.Sprintf("%s is not Ready on a kubelet heartbeat after its server started at %s (Ready %t, heartbeat %s)",
			in.Name, stamp(*rep.StartedAt), in.Ready, stamp(in.Heartbeat))
	}
	return ""
}

// beatAfter says the Node's kubelet renewed its Lease after the start its
// agent reported: by the host's own clock (the kubelet's renewal and the
// agent's start are stamped by one clock), or, when the clock jumped
// between the two, by the controller's: a renewal seen after the report
// was seen was made after the report was written, so after the start.
func beatAfter(n *Node, start time.Time) bool {
	if n.Heartbeat.After(start) {
		return true
	}
	return !n.HeartbeatSeen.IsZero() && !n.ReportSeen.IsZero() && n.HeartbeatSeen.After(n.ReportSeen)
}

// gates: with N+1 voters, every voter but OUT healthy and fresh, each
// listing exactly the expected members, none a learner; OUT not silent
// while its Node is Ready; and no hold in force (Snapshot.Holds: kured's
// reboot lock held by another, an upgrade Plan applying, an alert).
//
// Note: one disruption at a time. The holds gate every step that lowers
// the failures etcd survives or takes a voter away: in a live voter's
// swap, the outgoing voter's stop (its step-down, and a failed step-down
// asked again); they hold every action on OUT until then, as the other
// gates do, past the gates' bound too. Four members with OUT stopping
// and another server rebooting leave two of four, below the quorum of
// three. They hold nothing else a swap does: the candidate's promotion
// never lowers the failures survived (a learner does not vote, and N+1
// voters survive as many failures as N, or one more: 3 and 4 survive 1, 5
// survives 2); a member's removal once OUT's server stopped restores a
// failure to spare and must never wait (removeMember); a rollback and an
// abandon put the cluster back as it was; a dead voter's swap removes its
// member first and promotes after, neither of which lowers them.
//
// Note: an OUT whose samples stopped while its kubelet's heartbeats did
// not (yet) may be paused or cut off, and would come back asked to step
// down, or with its member gone: nothing is asked of it until it samples
// again, or its Node turns NotReady (a host that is down is swapped out
// as it is).
func (p *planner) gates(in, out *Node) string {
	if out.Ready && out.Probe != nil && p.silent(out) {
		return fmt.Sprintf("the outgoing voter %s is Ready but its probe has been silent since %s (3 periods of %s): it may be paused or cut off",
			out.Name, stamp(out.Probe.At), p.period(out))
	}
	expected := p.voterSet([]string{in.Name, out.Name}, "")
	for _, name := range expected {
		if name == out.Name {
			continue
		}
		v := p.node(name)
		if v == nil {
			return fmt.Sprintf("voter %s has no Node", name)
		}
		if why := p.unhealthy(v); why != "" {
			return why
		}
		if why := p.membershipProblem(v, expected); why != "" {
			return why
		}
	}
	if h := p.holds(out.Name); len(h) > 0 {
		return held(h) + " (one disruption at a time: the outgoing voter is not stopped while another may be)"
	}
	return ""
}

// prepareOut: the gates, then cordon-out, runners-out, drain-out, then the
// step-down. The gates hold every action on OUT until it is asked to step
// down.
func (p *planner) prepareOut(in, out *Node) Plan {
	if why := p.gates(in, out); why != "" {
		if p.pastBound(api.StepGates) {
			return p.wait(api.StepGates, "gates held past their bound %s, the outgoing voter %s is not touched: %s", p.bound(api.StepGates), out.Name, why)
		}
		return p.wait(api.StepGates, "gates held, the outgoing voter %s is not touched: %s", out.Name, why)
	}
	if !out.Unschedulable {
		return p.act(api.StepCordonOut, Action{Type: api.ActionCordonOut, Node: out.Name}, "the gates hold: cordoning the outgoing voter %s", out.Name)
	}
	if runners := unfinishedRunners(out); len(runners) > 0 && !p.passed(api.StepRunnersOut) {
		return p.wait(api.StepRunnersOut, "waiting for %d runner pod(s) on the outgoing voter %s to finish: %s", len(runners), out.Name, short(runners))
	} else if len(runners) > 0 && p.s.Config.RunnersWait && !p.wentPast(api.StepRunnersOut) {
		// Note: the outgoing voter still votes; waiting costs no failure
		// etcd survives, and a drain would kill the jobs.
		return p.wait(api.StepRunnersOut, "waiting past its bound %s for %d runner pod(s) on the outgoing voter %s to finish "+
			"(runners_bound_action is wait; fleet-role swap --cancel rolls the swap back): %s", p.bound(api.StepRunnersOut), len(runners), out.Name, short(runners))
	}
	if pods, toEvict := evictable(out); len(pods) > 0 && !p.passed(api.StepDrainOut) {
		if toEvict {
			return p.act(api.StepDrainOut, Action{Type: api.ActionDrainOut, Node: out.Name}, "draining the outgoing voter %s: %d pod(s) to evict", out.Name, len(pods))
		}
		return p.wait(api.StepDrainOut, "waiting for %d evicted pod(s) on the outgoing voter %s to go: %s", len(pods), out.Name, short(pods))
	}
	a := p.request(out, api.ActionStepDown, api.RequestStepDown)
	a.Request.Leader = in.Name
	return p.act(api.StepStepDown, a, "asking the outgoing voter %s to step down (leadership moved to %s, server stopped)", out.Name, in.Name)
}

func (p *planner) stepDownWait(in, out *Node) Plan {
	rep := out.answer(p.rec.ID, api.RequestStepDown)
	gone := p.passed(api.StepStepDown)
	switch {
	case rep != nil && rep.State == api.StateFailed && out.Ready && !gone && len(p.holds(out.Name)) > 0:
		return p.wait(api.StepStepDown, "the step-down failed on %s (%s); asking again is %s (one disruption at a time)", out.Name, rep.Message, held(p.holds(out.Name)))
	case rep != nil && rep.State == api.StateFailed && out.Ready && !gone:
		a := p.request(out, api.ActionStepDown, api.RequestStepDown)
		a.Request.Leader = p.rec.In
		return p.act(api.StepStepDown, a, "the step-down failed on %s (%s): asking again", out.Name, rep.Message)
	case rep == nil && out.Ready && !gone:
		return p.wait(api.StepStepDown, "the removal waits for the step-down while %s is Ready and has not reported", out.Name)
	}
	return p.removeMember(in, out)
}

// removeMember asks k3s to remove OUT's member once the remaining voters
// can commit its removal: OUT's server is stopped by now (or OUT is
// unreachable), and its member, down, counts among the members etcd needs
// a majority of. A voter whose disk is only slow votes, and so counts.
//
// Note: the removal never lowers the failures the cluster survives, and
// raises them when OUT is down: with M members (OUT among them) of which
// U vote, etcd survives U - (M/2+1) more failures, and (M-1)/2+1 is never
// more than M/2+1:
//
//	members | voting | survives | after the removal | survives
//	   4    |   3    |    0     |     3 of 3        |    1
//	   5    |   4    |    1     |     4 of 4        |    1
//	   6    |   4    |    0     |     4 of 5        |    1
//
// Waiting for a slow or unhealthy remaining voter, as this did before,
// kept the cluster at no failure to spare for as long as that voter was
// unwell. Fewer voting than a majority of the members with OUT: the
// removal cannot commit (nor can anything else), and it waits.
func (p *planner) removeMember(in, out *Node) Plan {
	remaining := p.remaining(in, out)
	if in == nil {
		if m, lister := p.candidateMember(p.rec.In); lister != nil {
			return p.wait(api.StepRemoveMember, "removal held: %s still lists the member %s of the candidate %s, whose Node was deleted; "+
				"k3s removes the member of a deleted etcd Node, an operator must remove it if it does not", lister.Name, memberLabel(m), p.rec.In)
		}
	}
	voting, down := p.voterHealth(remaining, true)
	if need := Quorum(len(remaining) + 1); voting < need {
		return p.removalHeld("removal held: %d remaining voter(s) vote, not a majority (%d) of the %d members with %s's, which is down: %s",
			voting, need, len(remaining)+1, out.Name, strings.Join(down, "; "))
	}
	if len(down) > 0 {
		return p.act(api.StepRemoveMember, Action{Type: api.ActionRemoveMember, Node: out.Name},
			"asking k3s to remove the member of %s; %d of %d remaining voter(s) vote, a majority of the %d members with it (not voting: %s)",
			out.Name, voting, len(remaining), len(remaining)+1, strings.Join(down, "; "))
	}
	return p.act(api.StepRemoveMember, Action{Type: api.ActionRemoveMember, Node: out.Name},
		"asking k3s to remove the member of %s; %d remaining voter(s) vote", out.Name, voting)
}

// voterHealth counts the named voters that are healthy, and says why each
// other one is not. With slowVotes, a voter whose only fault is its
// disk's speed (Ready, a fresh sample with no error, over the fsync or
// read limits) counts: its member answers and votes, slowly.
func (p *planner) voterHealth(names []string, slowVotes bool) (healthy int, held []string) {
	for _, name := range names {
		v := p.node(name)
		switch {
		case v == nil:
			held = append(held, fmt.Sprintf("the voter %s has no Node", name))
		case v.Ready && v.Probe != nil && p.silent(v):
			// Note: a voter whose kubelet beats but whose agent writes
			// nothing may be one whose agent cannot reach the API, or a
			// host frozen within the node-monitor grace: it is named as
			// such, and counted down all the same.
			held = append(held, fmt.Sprintf("%s is Ready but its agent has been silent since %s (3 periods of %s): it may not reach the API server",
				v.Name, stamp(v.Probe.At), p.period(v)))
		default:
			if why := p.unhealthy(v); why != "" && !(slowVotes && p.onlySlow(v)) {
				held = append(held, why)
				continue
			}
			healthy++
		}
	}
	return healthy, held
}

// onlySlow says the voter's sample faults its disk's speed alone: Ready,
// fresh, sampled without error.
func (p *planner) onlySlow(v *Node) bool {
	return v.Ready && v.Probe != nil && p.fresh(v) && !v.Probe.Healthy && v.Probe.Error == ""
}

// candidateStopHeld says why the candidate, whose member a voter's last
// list shows voting (a stale list counts: the hold errs on the side of
// removing the member first), may not stop its server yet: the other
// voters that vote must be a quorum of the voters with it, as etcd counts
// a stopped voter until its member is removed. With three voters and the
// candidate, one other voter down and the candidate stopped would leave
// two of four. A voter whose disk is only slow votes: holding the stop
// for it would hold the rollback on a removal that waits for healthy
// voters, for as long as the disk is slow. Empty when it may stop, or
// when its member does not vote.
func (p *planner) candidateStopHeld(in *Node) string {
	if !slices.ContainsFunc(p.voters, func(v *Node) bool { return v != in && p.lists(v, in.Name, false) }) {
		return ""
	}
	others := p.voterSet(nil, in.Name)
	healthy, held := p.voterHealth(others, true)
	if healthy >= Quorum(len(others)+1) {
		return ""
	}
	return fmt.Sprintf("%d other voter(s) voting are not a quorum of %d with it: %s", healthy, len(others)+1, strings.Join(held, "; "))
}

// removalHeld waits at the removal, and says so once past its bound: the
// outgoing voter is stopped meanwhile, and the cluster has no fault
// tolerance to spare until its member goes.
func (p *planner) removalHeld(format string, args ...any) Plan {
	if p.pastBound(api.StepRemoveMember) {
		format = "held past its bound " + p.bound(api.StepRemoveMember).String() + " (the outgoing voter is stopped: no fault tolerance is left until its member goes): " + format
	}
	return p.wait(api.StepRemoveMember, format, args...)
}

// remaining are the voters left once OUT's member is removed: IN and the
// others; without IN when its Node was deleted (k3s removed its member).
func (p *planner) remaining(in, out *Node) []string {
	var add []string
	if in != nil {
		add = []string{in.Name}
	}
	return p.voterSet(add, out.Name)
}

// Quorum is the least number of members of an n-member etcd cluster that
// can commit.
func Quorum(n int) int { return n/2 + 1 }

// removeWait: OUT counts as a member until every remaining voter lists,
// fresh, as many members as there are remaining voters, OUT's not among
// them. It is held to no gate on its own health.
func (p *planner) removeWait(in, out *Node) Plan {
	remaining := p.remaining(in, out)
	for _, name := range remaining {
		v := p.node(name)
		if v == nil || !p.fresh(v) {
			return p.wait(api.StepRemoveMember, "waiting for the remaining voter %s to report a fresh member list", name)
		}
		members, _ := p.listed(v)
		if len(members) != len(remaining) || p.lists(v, out.Name, true) {
			return p.wait(api.StepRemoveMember, "waiting for the member of %s to go: %s lists %d member(s), %d voter(s) remain",
				out.Name, name, len(members), len(remaining))
		}
	}
	return p.act(api.StepMemberGone, Action{Type: api.ActionMemberGone, Node: out.Name},
		"every remaining voter lists %d member(s): telling %s its member is gone", len(remaining), out.Name)
}

// finished returns the Node's report of the finish of its demotion from
// the swap under way, if that is its report.
func (p *planner) finished(n *Node) *api.Report {
	return finishOf(n, p.rec.ID)
}

func (p *planner) memberGoneWait(out *Node) Plan {
	cleanUp := Action{Type: api.ActionCleanUp, Node: out.Name, Role: api.RoleStandby}
	if p.finished(out) != nil {
		return p.act(api.StepCleanUp, cleanUp, "%s finished its demotion: cleaning up its server state", out.Name)
	}
	if p.pastBound(api.StepMemberGone) {
		return p.act(api.StepCleanUp, cleanUp, "%s did not finish its demotion within %s: cleaning up its server state anyway; "+
			"its step-down and member-gone stay on its Node until its agent reports the finish", out.Name, p.bound(api.StepMemberGone))
	}
	return p.wait(api.StepMemberGone, "waiting for %s's agent to finish its demotion", out.Name)
}

// tail: after the clean-up, uncordon what this swap cordoned, OUT once it
// is Ready on a heartbeat later than the agent start it reported; then end.
//
// An OUT that did not finish its demotion ends the swap with OUT named
// pending; the end leaves its step-down, member-gone and cordon on its
// Node, for its agent, and clear-finished clears them once it reported
// the finish.
//
// Without IN (its Node deleted after OUT was asked to step down), the
// swap ends pending with IN named: the fleet has a voter fewer.
func (p *planner) tail(in, out *Node) Plan {
	id := p.rec.ID
	if in != nil && in.CordonedBy == id && in.Unschedulable {
		return p.act(api.StepUncordon, Action{Type: api.ActionUncordon, Node: in.Name}, "uncordoning the new voter %s", in.Name)
	}
	end := func(result string, pending []string, reason string) Plan {
		if in == nil {
			gone := fmt.Sprintf("the candidate's Node %s was deleted after the outgoing voter stepped down: k3s removed its member, "+
				"so the fleet has one voter fewer until another swap; with no Node, its agent can be told nothing: "+
				"its host may still run a server until an operator stops it", p.rec.In)
			if reason != "" {
				gone += "; " + reason
			}
			return p.end(api.ResultPending, append([]string{p.rec.In}, pending...), gone)
		}
		return p.end(result, pending, reason)
	}
	rep := p.finished(out)
	if rep == nil && p.rec.Dead {
		return end(api.ResultCompleted, []string{out.Name}, fmt.Sprintf("the dead voter %s was replaced and did not come back: "+
			"its step-down and member-gone stay on its Node, and it stays cordoned, until its agent reports the finish", out.Name))
	}
	if rep == nil {
		return end(api.ResultCompleted, []string{out.Name}, fmt.Sprintf("%s did not finish its demotion within %s: "+
			"its step-down and member-gone stay on its Node, and it stays cordoned, until its agent reports the finish", out.Name, p.bound(api.StepMemberGone)))
	}
	if out.CordonedBy == id && out.Unschedulable {
		if rep.StartedAt != nil && out.Ready && beatAfter(out, *rep.StartedAt) {
			return p.act(api.StepUncordon, Action{Type: api.ActionUncordon, Node: out.Name},
				"%s is Ready on a heartbeat after its agent started: uncordoning it", out.Name)
		}
		if p.pastBound(api.StepUncordon) {
			return end(api.ResultPending, []string{out.Name}, fmt.Sprintf("%s finished its demotion but was not Ready on a heartbeat after its agent started within %s: "+
				"it is left cordoned; uncordon it (kubectl uncordon %s) once it is back", out.Name, p.bound(api.StepUncordon), out.Name))
		}
		start := "no start"
		if rep.StartedAt != nil {
			start = stamp(*rep.StartedAt)
		}
		return p.wait(api.StepUncordon, "waiting for %s to be Ready on a heartbeat after its agent started (%s; Ready %t, heartbeat %s)",
			out.Name, start, out.Ready, stamp(out.Heartbeat))
	}
	return end(api.ResultCompleted, nil, "")
}

// cancelRefused says why the swap can no longer be taken back; empty while
// it can. A rollback undoes the candidate's side and the outgoing voter's
// cordon; it does not start a server that stepped down: from the
// step-down on, the way back is a new swap once this one ends.
func (p *planner) cancelRefused(in, out *Node) string {
	id := p.rec.ID
	switch {
	case out.Role == api.RoleStandby:
		return fmt.Sprintf("the swap is cleaning up: %s is no longer a voter; the way back is a new swap once this one ends", out.Name)
	case out.MemberGone == id || out.MemberRemoved():
		return fmt.Sprintf("the outgoing voter %s's member has been removed: the way back is a new swap once this one ends", out.Name)
	case out.RemoveRequested:
		return fmt.Sprintf("k3s has been asked to remove the outgoing voter %s's member: the way back is a new swap once this one ends", out.Name)
	case out.requested(id, api.RequestStepDown) != nil:
		return fmt.Sprintf("the outgoing voter %s has stepped down (its server is stopped) and its member is to be removed: "+
			"the way back is a new swap once this one ends", out.Name)
	}
	return ""
}

// CheckCancel says which swap `fleet-role swap --cancel` would take back,
// or why it cannot: no swap under way, a swap already going back or
// ending, or one whose outgoing voter stepped down. The planner checks the
// same again when it reads the cancel.
func CheckCancel(s Snapshot) (*api.SwapRecord, error) {
	p := newPlanner(s)
	var rec *api.SwapRecord
	switch l := s.Lease; {
	case p.leaseHeldByOther():
		return nil, fmt.Errorf("the Lease %s/%s is held by %q: a regrade is under way, not a swap", api.Namespace, api.LeaseName, l.Holder)
	case l.Holder == api.ControllerHolder && l.Swap != nil:
		rec = l.Swap
	case s.Status.Swap != nil && (s.Status.Last == nil || s.Status.Last.ID != s.Status.Swap.ID):
		rec = s.Status.Swap
	default:
		return nil, errors.New("no swap is under way")
	}
	switch rec.Phase {
	case "":
	case api.PhaseEnd:
		return rec, fmt.Errorf("swap %s is ending (%s)", rec.ID, rec.Result)
	default:
		return rec, fmt.Errorf("swap %s is already going back (%s: %s)", rec.ID, rec.Phase, rec.Reason)
	}
	p.rec = rec
	in, out := p.node(rec.In), p.node(rec.Out)
	if in == nil || out == nil {
		return rec, nil // the planner abandons, rolls back or goes on, as it does uncancelled
	}
	if why := p.cancelRefused(in, out); why != "" {
		return rec, fmt.Errorf("swap %s cannot be cancelled: %s", rec.ID, why)
	}
	return rec, nil
}

// rollback and abandon mark the swap's phase on the Lease; the next passes
// carry it out.
func (p *planner) rollback(reason string) Plan {
	rec := *p.rec
	rec.Phase, rec.Reason = api.PhaseRollback, reason
	return Plan{Action: Action{Type: api.ActionRollback}, Step: api.StepRollback, Swap: &rec, Reason: "rolling back: " + reason}
}

func (p *planner) abandon(reason string) Plan {
	rec := *p.rec
	rec.Phase, rec.Reason = api.PhaseAbandon, reason
	return Plan{Action: Action{Type: api.ActionAbandon}, Step: api.StepAbandon, Swap: &rec, Reason: "abandoning: " + reason}
}

func (p *planner) abandoning() Plan {
	if in := p.node(p.rec.In); in != nil && in.CordonedBy == p.rec.ID && in.Unschedulable {
		return p.act(api.StepAbandon, Action{Type: api.ActionUncordon, Node: in.Name}, "abandoned (%s): uncordoning the candidate %s", p.rec.Reason, in.Name)
	}
	return p.end(api.ResultAbandoned, nil, p.rec.Reason)
}

// rollingBack: step IN down, ask k3s to remove its member if it joined,
// wait until every voter lists the original members and no more, tell IN
// its member is gone, clean it, uncordon it, wait for its finish, end
// rolled-back; or, its agent silent or the bound past, end pending with
// IN named and its step-down and member-gone kept on its Node.
func (p *planner) rollingBack() Plan {
	id := p.rec.ID
	in := p.node(p.rec.In)
	if in == nil {
		return p.rollingBackWithoutCandidate()
	}
	if in.MemberGone == id {
		if !in.clean() || in.Role != api.RoleStandby {
			return p.act(api.StepRollback, Action{Type: api.ActionCleanUp, Node: in.Name, Role: api.RoleStandby},
				"rolling back: cleaning the candidate %s back to a standby", in.Name)
		}
		if in.CordonedBy == id && in.Unschedulable {
			return p.act(api.StepRollback, Action{Type: api.ActionUncordon, Node: in.Name}, "rolling back: uncordoning the candidate %s", in.Name)
		}
		// A swap cancelled after the outgoing voter was cordoned; a dead
		// voter whose member was removed stays cordoned for its agent.
		if out := p.node(p.rec.Out); out != nil && out.CordonedBy == id && out.Unschedulable && !p.deadRemoved(out) {
			return p.act(api.StepRollback, Action{Type: api.ActionUncordon, Node: out.Name}, "rolling back: uncordoning the outgoing voter %s", out.Name)
		}
		// Note: the swap waits for the candidate's agent to read the
		// member-gone and report its finish, as it waits for the outgoing
		// voter's going forward, while its agent samples. An end without
		// the finish keeps IN's step-down and member-gone on its Node
		// (end): its agent, back, finishes by them, and clear-finished
		// clears them then.
		if p.finished(in) != nil {
			return p.end(api.ResultRolledBack, nil, p.rec.Reason)
		}
		alive := in.Ready || !p.silent(in)
		if alive && !p.pastBound(api.StepMemberGone) {
			return p.wait(api.StepMemberGone, "rolling back: waiting for the candidate %s's agent to finish its demotion", in.Name)
		}
		why := fmt.Sprintf("within %s", p.bound(api.StepMemberGone))
		if !alive {
			why = fmt.Sprintf("while its Node is not Ready and its agent silent (%s)", p.silence(in))
		}
		return p.end(api.ResultPending, []string{in.Name}, p.rec.Reason+fmt.Sprintf("; %s did not finish its demotion %s: "+
			"its step-down and member-gone stay on its Node until its agent reports the finish", in.Name, why))
	}
	// A candidate whose member votes, stopped while another voter is
	// down, would leave etcd without a quorum: its member is removed
	// first, while its server runs, and it is asked to step down once
	// its member no longer votes.
	stopHeld := ""
	if in.requested(id, api.RequestStepDown) == nil {
		if stopHeld = p.candidateStopHeld(in); stopHeld == "" {
			return p.act(api.StepRollback, p.request(in, api.ActionStepDown, api.RequestStepDown), "rolling back: asking the candidate %s to step down", in.Name)
		}
	}
	// Note: a finish report of the swap answers the step-down too: the
	// agent reports it once the member is gone, over its step-down report.
	// The wait lasts while its agent samples, not only while its Node is
	// Ready: a candidate mid-promotion has no kubelet (k3s runs it once
	// its member votes), and one that never hears the step-down keeps
	// starting a server whose member is gone. Its agent samples while it
	// is not silent: a sample may come late while the candidate's own etcd
	// does not answer (each of its calls waits out its timeout), and one
	// only stale is no sign the agent is gone. A removal asked for, or
	// done, says the rollback went on past the wait: its own steps
	// (remove-candidate, remove-by-voter, stuck) do not return to it,
	// which would start its bound again.
	wentOn := in.RemoveRequested || in.MemberRemoved() || p.rec.Phase == api.PhaseStuck
	if stopHeld == "" && in.answer(id, api.RequestStepDown) == nil && p.finished(in) == nil && (in.Ready || !p.silent(in)) && !wentOn && !p.pastBound(api.StepRollback) {
		return p.wait(api.StepRollback, "rolling back: waiting for the candidate %s to step down", in.Name)
	}
	original := p.original()
	if p.joined(in) && !in.RemoveRequested && !in.MemberRemoved() {
		for _, name := range original {
			if name == p.rec.Out {
				continue
			}
			v := p.node(name)
			if v == nil {
				return p.wait(api.StepRollback, "rolling back: removal of %s's member held: voter %s has no Node", in.Name, name)
			}
			if why := p.unhealthy(v); why != "" {
				return p.wait(api.StepRollback, "rolling back: removal of %s's member held while a voter is unhealthy: %s", in.Name, why)
			}
		}
		if stopHeld != "" {
			return p.act(api.StepRollback, Action{Type: api.ActionRemoveMember, Node: in.Name},
				"rolling back: asking k3s to remove the member %s joined with before it stops, as stopping it first would leave etcd short of a quorum: %s", in.Name, stopHeld)
		}
		return p.act(api.StepRollback, Action{Type: api.ActionRemoveMember, Node: in.Name}, "rolling back: asking k3s to remove the member %s joined with", in.Name)
	}
	m, lister := p.candidateMember(in.Name)
	switch {
	case lister != nil && (in.RemoveRequested || p.rec.Phase == api.PhaseStuck):
		return p.removeCandidate(in, m, lister, original)
	case p.rec.Phase == api.PhaseStuck:
		// Note: the member is gone (an operator removed it, or k3s's
		// leader removed a stalled learner): the rollback goes on.
		rec := *p.rec
		rec.Phase, rec.Stuck = api.PhaseRollback, nil
		p.rec = &rec
	}
	// Note: the member lists must be sampled after the candidate's server
	// stopped. A learner its server added just before is in etcd's list,
	// though a sample taken earlier does not show it (a swap cancelled
	// right after the promotion).
	// The report's and the samples' stamps are of different hosts'
	// clocks: where they disagree with the controller's, a sample seen a
	// period after the report was seen was taken after it was written.
	var stopped, stoppedSeen time.Time
	if rep := in.Report; rep != nil && rep.Swap == id && rep.State == api.StateDone &&
		(rep.Action == api.RequestStepDown || rep.Action == api.ReportFinish) {
		stopped, stoppedSeen = rep.At, in.ReportSeen
	}
	for _, name := range original {
		if name == p.rec.Out {
			continue
		}
		v := p.node(name)
		if v == nil {
			return p.wait(api.StepRollback, "rolling back: voter %s has no Node", name)
		}
		seenAfter := !stoppedSeen.IsZero() && !v.ProbeSeen.IsZero() && v.ProbeSeen.Sub(stoppedSeen) >= p.period(v)
		if v.Probe != nil && !v.Probe.At.After(stopped) && !seenAfter {
			return p.wait(api.StepRollback, "rolling back: waiting for %s's member list sampled after the candidate %s stepped down", name, in.Name)
		}
		if why := p.membershipProblem(v, original); why != "" {
			return p.wait(api.StepRollback, "rolling back: waiting until every voter lists the original members and no more: %s", why)
		}
	}
	return p.act(api.StepRollback, Action{Type: api.ActionMemberGone, Node: in.Name},
		"rolling back: every voter lists the original members: telling %s its member is gone", in.Name)
}

// original are the voters before the swap: OUT (unless its Node was
// deleted, k3s removing its member, or it is a dead voter whose member was
// asked to go) and the others, IN left out.
func (p *planner) original() []string {
	out := p.node(p.rec.Out)
	if p.deadRemoved(out) {
		return slices.DeleteFunc(p.voterSet(nil, p.rec.In), func(n string) bool { return n == p.rec.Out })
	}
	var add []string
	if out != nil {
		add = []string{p.rec.Out}
	}
	return p.voterSet(add, p.rec.In)
}

// rollingBackWithoutCandidate: IN's Node was deleted. k3s removes the
// member of a deleted Node labelled an etcd Node; one whose Node was not
// (a learner, or a server whose apiserver never came up) it leaves, and
// that member is removed as a rollback removes one k3s cannot. Then,
// every voter listing the original members and no more, OUT is
// uncordoned if this swap cordoned it, and the swap ends rolled back with
// IN pending: no agent can be told anything on a host without its Node,
// so nothing is kept for it either. No action is aimed at IN.
func (p *planner) rollingBackWithoutCandidate() Plan {
	id := p.rec.ID
	original := p.original()
	if m, lister := p.candidateMember(p.rec.In); lister != nil {
		return p.removeCandidate(&Node{Name: p.rec.In}, m, lister, original)
	}
	if p.rec.Phase == api.PhaseStuck {
		rec := *p.rec
		rec.Phase, rec.Stuck = api.PhaseRollback, nil
		p.rec = &rec
	}
	for _, name := range original {
		if name == p.rec.Out {
			continue
		}
		v := p.node(name)
		if v == nil {
			return p.wait(api.StepRollback, "rolling back: voter %s has no Node", name)
		}
		if why := p.membershipProblem(v, original); why != "" {
			return p.wait(api.StepRollback, "rolling back: the candidate's Node %s was deleted; waiting until every voter lists the original members and no more: %s", p.rec.In, why)
		}
	}
	if out := p.node(p.rec.Out); out != nil && out.CordonedBy == id && out.Unschedulable && !p.deadRemoved(out) {
		return p.act(api.StepRollback, Action{Type: api.ActionUncordon, Node: out.Name}, "rolling back: uncordoning the outgoing voter %s", out.Name)
	}
	return p.end(api.ResultRolledBack, []string{p.rec.In}, p.rec.Reason+
		fmt.Sprintf("; every voter lists the original members; with no Node, %s's agent can be told nothing: "+
			"its host may still run what it was asked to until an operator stops it", p.rec.In))
}

// candidateMember returns IN's member as the first voter with a fresh
// sample lists it (OUT and IN left out), and that voter; nil when none
// lists it.
func (p *planner) candidateMember(in string) (api.Member, *Node) {
	for _, v := range p.voters {
		if v.Name == p.rec.Out || v.Name == in || !p.fresh(v) {
			continue
		}
		for _, m := range v.Probe.Members {
			if p.memberHost(m) == in {
				return m, v
			}
		}
	}
	return api.Member{}, nil
}

// removeCandidate: k3s was asked to remove IN's member and a voter still
// lists it. On real k3s that fails for a candidate whose apiserver never
// came up: k3s's member controller (k3s-io/k3s pkg/etcd/member_controller.go,
// etcdMemberHandler.sync) skips a Node without the etcd role label, and
// errors without the etcd.k3s.cattle.io/node-name and node-address
// annotations, all of which a server writes only once its apiserver runs
// (pkg/etcd/metadata_controller.go, handleSelf). So past remove_fallback a
// healthy voter's agent (not IN, not OUT; the first by name, or the one
// already asked) is asked to remove it with its etcd client, held while a
// voter is unhealthy as the annotation is; and when that agent fails, or
// does not manage within remove_by_voter, the swap stops stuck: it holds
// the Lease and says what an operator types, never waiting in silence.
func (p *planner) removeCandidate(in *Node, m api.Member, lister *Node, original []string) Plan {
	id := p.rec.ID
	if p.rec.Phase == api.PhaseStuck {
		st := p.rec.Stuck
		if st == nil {
			return p.stick(in, m, lister, "the swap record says stuck without saying why")
		}
		return p.wait(api.StepStuck, "stuck: the member %s of the candidate %s is still listed by %s and fleet-role cannot remove it (%s); "+
			"the Lease stays held until it is gone. Remove it by hand, as root on %s: %s",
			st.Member, in.Name, lister.Name, st.Why, st.Voter, st.Command())
	}
	var asked *Node
	for _, v := range p.voters {
		if v.requested(id, api.RequestRemoveMember) != nil {
			asked = v
			break
		}
	}
	if asked == nil {
		// Note: k3s's member controller removes the member its Node names
		// (node-name, written once the server's apiserver runs); one that
		// never started has no name, so k3s cannot, and its learner
		// manager would only 5 minutes after it was added, every other
		// join meanwhile refused ("too many learner members"): a voter's
		// agent is asked at once.
		if m.Name != "" && !p.pastBound(api.StepRemoveCandidate) {
			return p.wait(api.StepRemoveCandidate, "rolling back: waiting for k3s to remove the member %s of %s (%s lists it); past %s a voter's agent is asked to",
				memberLabel(m), in.Name, lister.Name, p.bound(api.StepRemoveCandidate))
		}
		var target *Node
		for _, name := range original {
			if name == p.rec.Out {
				continue
			}
			v := p.node(name)
			if v == nil {
				return p.wait(api.StepRemoveCandidate, "rolling back: removal of %s's member by a voter held: voter %s has no Node", in.Name, name)
			}
			if why := p.unhealthy(v); why != "" {
				return p.wait(api.StepRemoveCandidate, "rolling back: removal of %s's member by a voter held while a voter is unhealthy: %s", in.Name, why)
			}
			if target == nil && v.Voter() {
				target = v
			}
		}
		if target == nil {
			return p.stick(in, m, lister, "no voter but the outgoing one is left to ask")
		}
		a := p.request(target, api.ActionRemoveByVoter, api.RequestRemoveMember)
		a.Request.Member, a.Request.MemberID = m.Name, m.ID
		if m.Name == "" {
			return p.act(api.StepRemoveByVoter, a, "rolling back: k3s cannot remove the member %s of %s (it never started, so no Node names it): asking the agent of the voter %s to remove it",
				memberLabel(m), in.Name, target.Name)
		}
		return p.act(api.StepRemoveByVoter, a, "rolling back: k3s did not remove the member %s of %s within %s (its server never came up, so k3s cannot): asking the agent of the voter %s to remove it",
			memberLabel(m), in.Name, p.bound(api.StepRemoveCandidate), target.Name)
	}
	q := asked.Request
	if rep := asked.answer(id, api.RequestRemoveMember); rep != nil && rep.State != api.StateDone {
		return p.stick(in, m, asked, fmt.Sprintf("the agent of %s %s the removal: %s", asked.Name, rep.State, rep.Message))
	}
	if p.s.Now.Sub(q.At) > p.bound(api.StepRemoveByVoter) {
		return p.stick(in, m, asked, fmt.Sprintf("the agent of %s did not remove it within %s", asked.Name, p.bound(api.StepRemoveByVoter)))
	}
	return p.wait(api.StepRemoveByVoter, "rolling back: waiting for the agent of %s to remove the member %s of %s (%s lists it)",
		asked.Name, memberLabel(m), in.Name, lister.Name)
}

// memberLabel names a member in a reason: by its name, or, one that
// never started, by its ID.
func memberLabel(m api.Member) string {
	if m.Name != "" {
		return m.Name
	}
	return fmt.Sprintf("%s (a learner that never started)", m.ID)
}

// stick stops the swap stuck: the phase on the Lease says so, and what
// an operator types.
func (p *planner) stick(in *Node, m api.Member, voter *Node, why string) Plan {
	rec := *p.rec
	rec.Phase = api.PhaseStuck
	rec.Stuck = &api.Stuck{Node: in.Name, Member: m.Name, MemberID: m.ID, Voter: voter.Name, Why: why}
	return Plan{Action: Action{Type: api.ActionStuck, Node: in.Name}, Step: api.StepStuck, Swap: &rec,
		Reason: fmt.Sprintf("stuck: the member %s of the candidate %s cannot be removed (%s); the Lease stays held until it is gone. Remove it by hand, as root on %s: %s",
			memberLabel(m), in.Name, why, voter.Name, rec.Stuck.Command())}
}

// joined says IN has, or had, an etcd member: k3s named one, or a voter lists one.
func (p *planner) joined(in *Node) bool {
	if in.MemberName != "" {
		return true
	}
	for _, v := range p.voters {
		if v.Name != in.Name && p.lists(v, in.Name, true) {
			return true
		}
	}
	return false
}

// end clears the swap's annotations, records the result and the cooldown
// (none after an abandon) and releases the Lease; the record is marked first
// so an end interrupted midway is ended again, not started again. The
// annotations of a host named pending that has a Node and has not reported
// the finish of its demotion stay (kept): its agent reads only its own
// Node, and finishes by them when it runs again.
func (p *planner) end(result string, pending []string, reason string) Plan {
	rec := *p.rec
	if rec.Phase != api.PhaseEnd {
		now := p.s.Now
		rec.Phase, rec.Result, rec.EndedAt, rec.Pending = api.PhaseEnd, result, &now, pending
		if reason != "" {
			rec.Reason = reason
		}
		// A dead voter asked to step down keeps what it was asked, for
		// its agent if its host comes back, however the swap ends.
		if out := p.node(rec.Out); rec.Dead && out != nil && out.requested(rec.ID, api.RequestStepDown) != nil &&
			finishOf(out, rec.ID) == nil && !slices.Contains(pending, rec.Out) {
			rec.Pending = append(slices.Clone(pending), rec.Out)
		}
	}
	var cooldown *time.Time
	if rec.Result != api.ResultAbandoned && p.s.Config.Cooldown > 0 {
		t := rec.EndedAt.Add(p.s.Config.Cooldown)
		cooldown = &t
	}
	kept := p.kept(&rec)
	var clear []string
	for i := range p.nodes {
		if n := &p.nodes[i]; n.carries(rec.ID) && !slices.Contains(kept, n.Name) {
			clear = append(clear, n.Name)
		}
	}
	why := fmt.Sprintf("swap %s ends %s", rec.ID, rec.Result)
	if rec.Reason != "" {
		why += ": " + rec.Reason
	}
	return Plan{
		Action: Action{Type: api.ActionEnd, Result: rec.Result, Clear: clear, Pending: slices.Clone(rec.Pending), CooldownUntil: cooldown,
			Remediations: p.remediations(&rec)},
		Step:   api.StepEnd,
		Swap:   &rec,
		Reason: why,
	}
}
