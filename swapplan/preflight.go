package swapplan

import (
	"fmt"
	"slices"
	"strings"
)

// preflight compares the k3s server configuration the candidate in has
// staged with the voters' (every voter but out, which is on its way out
// and is never the server in joins through), as their agents publish them
// (api.K3sConfig), before a swap starts.
//
// k3s refuses a server whose critical settings differ from the cluster's:
// the joining server fetches the config of the server it joins through and
// exits with "critical configuration value mismatch between servers"
// (k3s-io/k3s pkg/cluster/bootstrap.go, compareConfig); and it refuses a
// token whose CA hash is not the cluster CA's (pkg/clientaccess/token.go,
// validateCAHash). Either way the candidate's k3s exits at every start,
// and the swap would roll back only once its promotion timed out.
//
// refused names each setting that differs, with both values: the swap
// must not start. unknown says what could not be compared (an agent that
// publishes nothing, or could not read its config): it does not refuse.
// Both empty: everything compared agrees.
func (p *planner) preflight(out, in *Node) (refused, unknown string) {
	if in == nil {
		return "", ""
	}
	var voters []*Node
	for _, v := range p.voters {
		if out != nil && v.Name == out.Name {
			continue
		}
		if v.Probe != nil && v.Probe.K3sConfig != nil && v.Probe.K3sConfig.Error == "" {
			voters = append(voters, v)
		}
	}
	cand := in.Probe
	switch {
	case cand == nil || cand.K3sConfig == nil:
		return "", fmt.Sprintf("%s's agent publishes no k3s server config (an older agent): its settings are not compared with the voters'", in.Name)
	case cand.K3sConfig.Error != "":
		return "", fmt.Sprintf("%s's staged k3s server config could not be read (%s): its settings are not compared with the voters'", in.Name, cand.K3sConfig.Error)
	case len(voters) == 0:
		return "", fmt.Sprintf("no voter publishes its k3s server config: %s's staged settings are compared with nothing", in.Name)
	}
	c := cand.K3sConfig
	var why []string
	names := make([]string, 0, len(c.Critical))
	for name := range c.Critical {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if d := differs(voters, c.Critical[name], func(n *Node) string { return n.Probe.K3sConfig.Critical[name] }); d != "" {
			why = append(why, fmt.Sprintf("%s's staged %s %s differs from %s", in.Name, name, orNone(c.Critical[name]), d))
		}
	}
	if c.TokenCAHash != "" {
		if d := differs(voters, c.TokenCAHash, func(n *Node) string { return n.Probe.K3sConfig.ServerCAHash }); d != "" {
			why = append(why, fmt.Sprintf("%s's staged token pins the cluster CA hash %s, which differs from %s", in.Name, c.TokenCAHash, d))
		}
	}
	if c.TokenError != "" {
		unknown = fmt.Sprintf("%s's token could not be read (%s): its cluster CA is not compared with the voters'", in.Name, c.TokenError)
	}
	if len(why) == 0 {
		return "", unknown
	}
	return strings.Join(why, "; ") + ": k3s would refuse its join", unknown
}

// differs says whose value of a setting differs from want, among the
// voters that publish one ("the voters' X" when each does, with one
// value; else each value with the voters that hold it); empty when none
// does. A voter that publishes no value for it (an agent older than the
// setting) is left out.
func differs(voters []*Node, want string, value func(*Node) string) string {
	held := map[string][]string{}
	var values []string
	known := 0
	for _, v := range voters {
		got := value(v)
		if got == "" {
			continue
		}
		known++
		if got == want {
			continue
		}
		if _, ok := held[got]; !ok {
			values = append(values, got)
		}
		held[got] = append(held[got], v.Name)
	}
	if len(values) == 0 {
		return ""
	}
	if len(values) == 1 && len(held[values[0]]) == known {
		return "the voters' " + values[0]
	}
	slices.Sort(values)
	var parts []string
	for _, val := range values {
		parts = append(parts, strings.Join(held[val], "'s and ")+"'s "+val)
	}
	return strings.Join(parts, " and ")
}

// orNone shows an empty value.
func orNone(v string) string {
	if v == "" {
		return `""`
	}
	return v
}

// Preflight compares the k3s server configuration that the standby in
// has staged with the voters' but out's, as the planner does before it
// starts a swap of out for in: refused names each setting k3s would
// refuse the join for, unknown what could not be compared. It is what
// `fleet-role swap --dry-run` shows of it.
func Preflight(s Snapshot, out, in string) (refused, unknown string) {
	p := newPlanner(s)
	return p.preflight(p.node(out), p.node(in))
}
