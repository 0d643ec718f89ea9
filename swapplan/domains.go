package swapplan

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/fleet-role/fleet-role/api"
)

// Failure domains: the Nodes' Config.DomainLabel. A swap that would put
// a majority of the voters in one domain, so that losing that domain
// loses quorum, is avoided by the automatic choice where another standby
// avoids it, and refused to a manual request unless it overrides the
// refusal (api.OverrideDomains); as Cluster API's KubeadmControlPlane
// spreads its machines across failure domains.

// domainCounts counts the voters in each domain once out is replaced by
// in (both nil: the voters now); ok is false when the label names none,
// or a voter has no domain.
func (p *planner) domainCounts(out, in *Node) (counts map[string]int, total int, ok bool) {
	if p.s.Config.DomainLabel == "" {
		return nil, 0, false
	}
	counts = map[string]int{}
	add := func(n *Node) bool {
		if n.Domain == "" {
			return false
		}
		counts[n.Domain]++
		total++
		return true
	}
	for _, v := range p.voters {
		if out != nil && v.Name == out.Name {
			continue
		}
		if !add(v) {
			return nil, 0, false
		}
	}
	if in != nil && !add(in) {
		return nil, 0, false
	}
	return counts, total, true
}

// domainRefusal says why swapping out for in would crowd in's domain: it
// would then hold a majority of the voters, one more than before. Empty
// when it would not, or the domains are not known.
func (p *planner) domainRefusal(out, in *Node) string {
	counts, total, ok := p.domainCounts(out, in)
	if !ok || out.Domain == in.Domain || counts[in.Domain] <= total/2 {
		return ""
	}
	return fmt.Sprintf("it would put %d of the %d voters in %s %q, a majority: losing that domain would lose quorum", counts[in.Domain], total,
		p.s.Config.DomainLabel, in.Domain)
}

// spreadKey orders the standbys for the automatic choice: first those
// that leave the largest domain the smallest, then those that leave the
// voters in the most domains. A standby that crowds a domain (it gives a
// domain a majority, or one more voter to a domain that holds one) leaves
// a larger largest domain than any that does not, so comes after it.
func (p *planner) spreadKey(out, in *Node) []int {
	counts, _, ok := p.domainCounts(out, in)
	if !ok {
		return []int{0, 0}
	}
	return []int{slices.Max(slices.Collect(maps.Values(counts))), -len(counts)}
}

// domains is how the voters lie across failure domains now; nil when no
// label names them.
func (p *planner) domains() *api.Domains {
	label := p.s.Config.DomainLabel
	if label == "" {
		return nil
	}
	d := &api.Domains{Label: label, Voters: map[string]int{}}
	for _, v := range p.voters {
		if v.Domain == "" {
			d.Unlabelled = append(d.Unlabelled, v.Name)
			continue
		}
		d.Voters[v.Domain]++
	}
	if len(d.Unlabelled) > 0 || len(p.voters) == 0 {
		d.Voters = nil
		return d
	}
	d.Span = len(d.Voters)
	// The largest domains lost first: the worst case for any k of them.
	sizes := slices.SortedFunc(maps.Values(d.Voters), func(a, b int) int { return cmp.Compare(b, a) })
	left, quorum := len(p.voters), len(p.voters)/2+1
	for _, n := range sizes {
		if left-n < quorum {
			break
		}
		left -= n
		d.Survives++
	}
	return d
}
