package swapplan

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/fleet-role/fleet-role/api"
)

// A host a swap asked to step down finishes its demotion on its own: its
// agent reads the swap's step-down request and member-gone on its own
// Node, stops its server, moves its datastore aside, starts its agent
// unit and reports the finish. A swap that ends before that report (its
// bound passed, or its agent is silent) keeps those annotations on the
// host's Node (end): cleared, they would leave an agent that comes back
// nothing to finish by, and its role file and datastore those of a
// server whose member is gone. Once the finish is reported, with no swap
// under way, the controller clears them (clearFinished).

// finishOf returns the Node's report of the finish of its demotion from
// the swap, if that is its report.
func finishOf(n *Node, swap string) *api.Report {
	if r := n.Report; r != nil && r.Swap == swap && r.Action == api.ReportFinish && r.State == api.StateDone {
		return r
	}
	return nil
}

// endedInstruction returns the swap, not the one under way (rec), whose
// annotations the Node keeps; "" when none. Those of the swap rec ending
// count only on a host its end leaves pending: its end clears the others.
func endedInstruction(n *Node, rec *api.SwapRecord) string {
	var request string
	if n.Request != nil {
		request = n.Request.Swap
	}
	for _, id := range []string{n.MemberGone, request, n.CordonedBy} {
		switch {
		case id == "":
		case rec != nil && id == rec.ID && (rec.Phase != api.PhaseEnd || !slices.Contains(rec.Pending, n.Name)):
		default:
			return id
		}
	}
	return ""
}

// unfinishedDemotion says why the Node's host is no candidate while it
// keeps an instruction of a swap that ended; empty when it keeps none, or
// its agent reported the finish.
func (p *planner) unfinishedDemotion(n *Node) string {
	if id := endedInstruction(n, p.rec); id != "" && finishOf(n, id) == nil {
		return fmt.Sprintf("%s has not finished its demotion from swap %s: its agent has not reported the finish", n.Name, id)
	}
	return ""
}

// unfinished are the hosts whose demotion a swap that ended (rec, when it
// ends with this plan) left unfinished: the Nodes that keep its
// instruction with no finish reported, and the hosts its end named
// pending whose Node is gone, by name.
func (p *planner) unfinished(rec *api.SwapRecord) []api.UnfinishedDemotion {
	var out []api.UnfinishedDemotion
	for i := range p.nodes {
		n := &p.nodes[i]
		if id := endedInstruction(n, rec); id != "" && finishOf(n, id) == nil {
			out = append(out, api.UnfinishedDemotion{Node: n.Name, Swap: id})
		}
	}
	var last string
	var pending []string
	switch {
	case rec != nil && rec.Phase == api.PhaseEnd:
		last, pending = rec.ID, rec.Pending
	case p.s.Status.Last != nil:
		last, pending = p.s.Status.Last.ID, p.s.Status.Last.Pending
	}
	for _, name := range pending {
		if p.node(name) == nil && !slices.ContainsFunc(out, func(u api.UnfinishedDemotion) bool { return u.Node == name }) {
			out = append(out, api.UnfinishedDemotion{Node: name, Swap: last, NodeGone: true})
		}
	}
	slices.SortFunc(out, func(a, b api.UnfinishedDemotion) int { return cmp.Compare(a.Node, b.Node) })
	return out
}

// kept are the hosts the swap's end leaves its annotations on: those it
// names pending that have a Node and have not reported the finish of
// their demotion.
func (p *planner) kept(rec *api.SwapRecord) []string {
	var names []string
	for _, name := range rec.Pending {
		if n := p.node(name); n != nil && finishOf(n, rec.ID) == nil {
			names = append(names, name)
		}
	}
	return names
}

// clearFinished: the first Node by name that keeps the annotations of a
// swap that ended and whose agent reported the finish of that swap has
// them cleared. A Node that swap left cordoned is uncordoned first, once
// Ready on a kubelet heartbeat after its agent started (as the swap's own
// uncordon waits); until then it is left as it is, cordoned, and nothing
// else waits for it.
//
// Note: only with no swap under way. A swap's passes are its own, one
// action each; a host whose agent finished is harmless meanwhile (its
// agent is done with the instruction, and a kept host is no candidate)
// and is cleared once the swap ends.
func (p *planner) clearFinished() (Plan, bool) {
	for i := range p.nodes {
		n := &p.nodes[i]
		id := endedInstruction(n, nil)
		if id == "" {
			continue
		}
		rep := finishOf(n, id)
		if rep == nil {
			continue
		}
		a := Action{Type: api.ActionClearFinished, Node: n.Name, Swap: id}
		if n.CordonedBy == id && n.Unschedulable {
			if rep.StartedAt == nil || !n.Ready || !beatAfter(n, *rep.StartedAt) {
				continue
			}
			a.Uncordon = true
			return p.act("", a, "%s finished its demotion from swap %s and is Ready on a heartbeat after its agent started: "+
				"uncordoning it and clearing the swap's annotations from its Node", n.Name, id), true
		}
		return p.act("", a, "%s finished its demotion from swap %s: clearing the swap's annotations from its Node", n.Name, id), true
	}
	return Plan{}, false
}
