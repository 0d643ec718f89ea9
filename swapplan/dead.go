package swapplan

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleet-role/fleet-role/api"
)

// deadVoters are the voters dead by every sign the controller has (dead).
func (p *planner) deadVoters() []api.DeadVoter {
	var out []api.DeadVoter
	for _, v := range p.voters {
		if d, ok := p.dead(v); ok {
			out = append(out, d)
		}
	}
	return out
}

// maintainedSilent says which voters show every sign of death but are
// under maintenance (Node.Maintenance), and so are not called dead: one
// sentence each, empty when none is.
func (p *planner) maintainedSilent() []string {
	var out []string
	for _, v := range p.voters {
		if v.Maintenance == "" {
			continue
		}
		if d, ok := p.deadBySigns(v); ok {
			out = append(out, fmt.Sprintf("the voter %s is under maintenance (%s), so not called dead though %s", v.Name, v.Maintenance, d.Reason))
		}
	}
	return out
}

// dead says the voter is dead by every sign, each of which alone a live
// host can show for a while: its agent silent (three probe periods), its
// Node not Ready, its kubelet's last heartbeat, on the host's stamp and
// on the controller's clock alike, at least Config.DeadAfter ago (as the
// node lifecycle controller judges a kubelet by both:
// pkg/controller/nodelifecycle, tryUpdateNodeHealth), and its member named
// unreachable by every other voter's fresh sample (the agents' status
// request to it on its client URL went unanswered). A heartbeat never
// seen, a member not known, or another voter without a fresh sample is no
// sign: the voter is not called dead on less. A voter under maintenance
// (Node.Maintenance) is never dead, whatever its silence: a reboot longer
// than dead_after, a firmware update or a hung shutdown is no reason to
// remove its member for good.
func (p *planner) dead(v *Node) (api.DeadVoter, bool) {
	if v.Maintenance != "" {
		return api.DeadVoter{}, false
	}
	return p.deadBySigns(v)
}

// deadBySigns is dead but for maintenance.
func (p *planner) deadBySigns(v *Node) (api.DeadVoter, bool) {
	if !p.silent(v) || v.Ready || v.MemberName == "" || p.s.Config.DeadAfter <= 0 {
		return api.DeadVoter{}, false
	}
	beat := v.Heartbeat
	if v.HeartbeatSeen.After(beat) {
		beat = v.HeartbeatSeen
	}
	if beat.IsZero() || p.s.Now.Sub(beat) < p.s.Config.DeadAfter {
		return api.DeadVoter{}, false
	}
	var witnesses []string
	for _, o := range p.voters {
		if o == v {
			continue
		}
		if !p.fresh(o) || !slices.Contains(o.Probe.Unreachable, v.MemberName) {
			return api.DeadVoter{}, false
		}
		witnesses = append(witnesses, o.Name)
	}
	if len(witnesses) == 0 {
		return api.DeadVoter{}, false
	}
	return api.DeadVoter{Node: v.Name, Member: v.MemberName, Heartbeat: beat, Reason: fmt.Sprintf(
		"%s; not Ready, its kubelet's last heartbeat at %s (%s ago, dead_after %s); its member %s unreachable from %s",
		p.silence(v), stamp(beat), p.s.Now.Sub(beat).Round(time.Second), p.s.Config.DeadAfter, v.MemberName, strings.Join(witnesses, ", "))}, true
}
