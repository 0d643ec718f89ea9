package swapplan

import (
	"fmt"

	"github.com/fleet-role/fleet-role/api"
)

// forwardDead: the swap of a voter that was dead when it started
// (SwapRecord.Dead). etcd's rule for a member that failed is to remove it
// before adding its replacement; so the dead voter's member is removed
// first and the candidate promoted after, the reverse of a live voter's
// swap. docs/swap.md ("A dead voter") has the arithmetic. The candidate
// is made ready (cordoned, its runners finished, drained) before anything
// touches the dead voter, so the removal is never followed by an abandon
// for its sake. The steps, by the strongest evidence first:
//
//	snapshot, cordon-in, runners-in, drain-in, gates, cordon-out,
//	step-down (asked of its Node, for when its host comes back),
//	remove-member, member-gone, promote, join, clean-up, uncordon, end.
func (p *planner) forwardDead(in, out *Node) Plan {
	id := p.rec.ID
	switch {
	case in.Role == api.RoleVoter && out.Role == api.RoleStandby:
		return p.tail(in, out)
	case out.Role == api.RoleStandby:
		return p.act(api.StepCleanUp, Action{Type: api.ActionCleanUp, Node: in.Name, Role: api.RoleVoter},
			"the dead voter %s is cleaned up: labelling the candidate %s a voter", out.Name, in.Name)
	case in.requested(id, api.RequestPromote) != nil:
		return p.promoteWaitDead(in, out)
	case out.MemberGone == id:
		a := p.request(in, api.ActionPromote, api.RequestPromote)
		a.Request.Voters = p.joinThrough(in, out)
		return p.act(api.StepPromote, a, "the dead voter %s's member is gone: asking the candidate %s's agent to promote it", out.Name, in.Name)
	case out.RemoveRequested || out.MemberRemoved():
		return p.removeWait(nil, out)
	case out.requested(id, api.RequestStepDown) != nil:
		return p.removeMember(nil, out)
	case out.CordonedBy == id:
		return p.act(api.StepStepDown, p.request(out, api.ActionStepDown, api.RequestStepDown),
			"asking the dead voter %s to step down, for its agent to read if its host comes back; its member is removed next", out.Name)
	}
	if plan, done := p.readyIn(in, out); !done {
		return plan
	}
	if _, dead := p.dead(out); !dead {
		return p.abandon(fmt.Sprintf("the voter %s is no longer dead by every sign (%s): nothing was asked of it; "+
			"a new decision judges it afresh", out.Name, p.aliveSign(out)))
	}
	if why := p.startGates(out); why != "" {
		if p.pastBound(api.StepGates) {
			return p.wait(api.StepGates, "gates held past their bound %s, the dead voter %s is not touched: %s", p.bound(api.StepGates), out.Name, why)
		}
		return p.wait(api.StepGates, "gates held, the dead voter %s is not touched: %s", out.Name, why)
	}
	return p.act(api.StepCordonOut, Action{Type: api.ActionCordonOut, Node: out.Name},
		"the candidate %s is ready and every other voter healthy: cordoning the dead voter %s", in.Name, out.Name)
}

// aliveSign says which sign of life the voter shows.
func (p *planner) aliveSign(v *Node) string {
	switch {
	case v.Maintenance != "":
		return "it is under maintenance: " + v.Maintenance
	case !p.silent(v):
		return "its agent samples"
	case v.Ready:
		return "its Node is Ready"
	}
	return "its kubelet beat within dead_after, or another voter reaches its member"
}

// promoteWaitDead: as promoteWait, and once the candidate votes, the dead
// voter is cleaned up at once: its member is gone already, and its agent,
// if it comes back, finishes its demotion by what stays on its Node.
func (p *planner) promoteWaitDead(in, out *Node) Plan {
	if plan, votes := p.promoted(in, fmt.Sprintf("; the dead voter %s's member stays removed", out.Name)); !votes {
		return plan
	}
	return p.act(api.StepCleanUp, Action{Type: api.ActionCleanUp, Node: out.Name, Role: api.RoleStandby},
		"the candidate %s votes: cleaning up the dead voter %s's server state; its step-down and member-gone stay on its Node until its agent reports the finish",
		in.Name, out.Name)
}

// deadRemoved says the swap is of a dead voter whose member it asked to
// remove: that cannot be taken back, and its host, if it comes back,
// must find its step-down and member-gone on its Node.
func (p *planner) deadRemoved(out *Node) bool {
	return p.rec.Dead && out != nil && (out.RemoveRequested || out.MemberRemoved() || out.MemberGone == p.rec.ID)
}
