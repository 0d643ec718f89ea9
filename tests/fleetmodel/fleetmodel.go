// Package fleetmodel is the one model of how a k3s fleet's hosts answer
// fleet-role, for the suites that play a fleet rather than run one: the
// planner's own tests (swapplan) and tests/fleetsim, which plays the fleet
// over the Kubernetes API. It holds the truth (etcd's member list with its
// learners; each host's units, role file and incarnation; which standbys
// are staged) and the reactions to it of each host's agent (answering the
// controller's requests, finishing a demotion, writing probes), of k3s
// (learners promoted, a member removed on the remove annotation, a
// server's labels, node-name and EtcdIsVoter) and of the kubelets (Ready,
// heartbeats, the Pods they delete), over the planner's own value of a
// Node and a time passed in. It does no I/O and reads no clock.
//
// Where the two copies this model replaced differed, it keeps the one
// closer to k3s (tests/k3sdouble's doc comment says what k3s does, and
// where); each such place says so.
package fleetmodel

import (
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// Timing is how fast the modelled parts go.
type Timing struct {
	// ProbePeriod: an agent writes a probe once a period.
	ProbePeriod time.Duration
	// Heartbeat: a Ready kubelet renews its Lease once a period; zero
	// renews it at every reaction.
	Heartbeat time.Duration
	// CatchUp is how long a learner takes to catch up once its server
	// started: k3s's leader promotes it then.
	CatchUp time.Duration
	// LearnerStall is how long k3s's leader lets a learner whose applied
	// index does not grow stay before it removes it: one that never
	// started (Host.NeverStarts). k3s: pkg/etcd/etcd.go,
	// trackLearnerProgress, learnerMaxStallTime (5 minutes). Zero never.
	LearnerStall time.Duration
	// NodeGrace is the node lifecycle controller's grace: a Node whose
	// kubelet stopped renewing stays Ready until that long after its
	// last heartbeat, then turns Unknown (not Ready). Kubernetes:
	// pkg/controller/nodelifecycle, tryUpdateNodeHealth,
	// --node-monitor-grace-period (50s since 1.32). Zero turns it at once.
	NodeGrace time.Duration
}

// Fleet is the truth of a fleet and the parts that react to it.
type Fleet struct {
	Timing Timing
	// Hosts by Node name.
	Hosts map[string]*Host
	// Members is etcd's member list, in the order members were added.
	Members []Member
	// K3sPaused: k3s removes no member while set.
	K3sPaused bool
}

// Member is a member of etcd's list.
type Member struct {
	Name, Node string
	Learner    bool
}

// Host is one host: its units, role file and member, and the faults it
// has. A fault field's zero value is a host that behaves.
type Host struct {
	// Staged: the host is staged to become a server.
	Staged bool
	// Server and Agent say which k3s unit runs.
	Server, Agent bool
	// RoleFile is the role file's word: "server" or "agent".
	RoleFile string
	// Member is the member its server runs as (k3s's
	// server/db/etcd/name); Incarnation counts its promotions.
	Member       string
	Incarnation  int
	ServerStart  time.Time
	AgentStart   time.Time
	LearnerSince time.Time
	// Handled is the time of the last request the agent read; Swap is
	// the swap of the last step-down it carried out, Finished the swap
	// whose finish it reported (the agent's state keeps both).
	Handled  time.Time
	Swap     string
	Finished string
	// FsyncMs is the fsync p99 its probes measure.
	FsyncMs float64
	// K3sConfig is the k3s server config its agent publishes in its
	// probes (a server's with the cluster CA's hash); nil: an older
	// agent that publishes none. Add gives every host ModelK3sConfig.
	K3sConfig *api.K3sConfig

	// Paused: the host is frozen: its agent, its k3s and its kubelet do
	// nothing, and its member does not answer.
	Paused bool
	// Cut: its agent cannot reach the API server: it reads no request
	// and writes no report or probe, but its k3s and kubelet go on. Once
	// no longer cut it writes what it has, as a real agent's retried
	// writes land.
	Cut bool
	// ClockOffset is how far its agent's wall clock is off: the times
	// the agent writes (its probes', its reports') are off by it.
	ClockOffset time.Duration
	// probed and beat are when it last wrote a probe and renewed its
	// kubelet's Lease, on the true clock.
	probed, beat time.Time
	// SilentUntil: its agent writes no probe until then; UnhealthyUntil:
	// its probes say unhealthy until then.
	SilentUntil    time.Time
	UnhealthyUntil time.Time
	// RefusePromote: its agent refuses a promotion; IgnorePromote and
	// IgnoreStepDown: it never answers one.
	RefusePromote  bool
	IgnorePromote  bool
	IgnoreStepDown bool
	// FailStepDowns: its agent fails that many step-downs, changing
	// nothing, before it carries one out.
	FailStepDowns int
	// HeartbeatStuck: Ready, but its kubelet's Lease is not renewed;
	// KubeletDead: never Ready again.
	HeartbeatStuck bool
	KubeletDead    bool
	// NeverJoin: its member stays a learner.
	NeverJoin bool
	// NeverStarts: its server's member is added as a learner but never
	// starts (as with its peer port dropped): etcd lists it with no name,
	// by its peer URL alone, and it never catches up.
	NeverStarts bool
	// NeverReady: its server runs but its apiserver never comes up, so
	// k3s writes none of its Node's etcd labels and annotations.
	NeverReady bool
	// SnapshotNotReady: its agent says a snapshot is done without one.
	SnapshotNotReady bool
	// RemoveFails: its agent fails a remove-member request;
	// RemoveIgnored: it never answers one.
	RemoveFails   bool
	RemoveIgnored bool
	// NoFinish: its agent never reports a finish (it misses member-gone).
	NoFinish bool
}

// New returns an empty fleet.
func New(t Timing) *Fleet {
	return &Fleet{Timing: t, Hosts: map[string]*Host{}}
}

// Add adds a host in the role (api.RoleVoter, api.RoleStandby or
// api.RoleAgent), its unit running since then (a standby's host staged),
// and returns its Node as k3s and the role label leave it: a voter's with
// the server labels, its member's name and EtcdIsVoter. Its kubelet and
// agent write the rest at the first reaction.
func (f *Fleet) Add(name, role string, since time.Time) swapplan.Node {
	h := &Host{Agent: true, RoleFile: "agent", AgentStart: since, FsyncMs: 2, K3sConfig: ModelK3sConfig()}
	n := swapplan.Node{Name: name, Role: role, Addresses: []string{Address(name)}}
	switch role {
	case api.RoleVoter:
		h.Server, h.Agent, h.RoleFile, h.ServerStart, h.AgentStart = true, false, "server", since, time.Time{}
		h.Member = memberName(name, 0)
		f.Members = append(f.Members, Member{Name: h.Member, Node: name})
		n.ServerLabels = slices.Clone(api.ServerLabels)
		n.MemberName = h.Member
		n.EtcdIsVoter = swapplan.Condition{Status: "True", Reason: api.ReasonMemberNotLearner}
	case api.RoleStandby:
		h.Staged = true
	}
	f.Hosts[name] = h
	return n
}

// ModelCAHash is the model cluster's CA hash, which its tokens pin.
const ModelCAHash = "5e8c6b3a1f0d2e4c7b9a8f6e5d4c3b2a1f0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c"

// ModelK3sConfig is the k3s server config every host of the model stages
// (a few of k3s's critical settings, at k3s's defaults) with a token that
// pins the model cluster's CA.
func ModelK3sConfig() *api.K3sConfig {
	return &api.K3sConfig{
		Critical:    map[string]string{"cluster-cidr": "10.42.0.0/16", "service-cidr": "10.43.0.0/16", "cluster-dns": "10.43.0.10", "flannel-backend": "vxlan"},
		TokenCAHash: ModelCAHash,
	}
}

// memberName is k3s's name for a member: the Node's name, "-" and 8 hex
// digits, a new one each time the host joins.
func memberName(node string, incarnation int) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", node, incarnation)
	return fmt.Sprintf("%s-%08x", node, h.Sum32())
}

// Address is the host's address: its Node's InternalIP, the host of its
// member's peer URL.
func Address(node string) string {
	h := fnv.New32a()
	fmt.Fprint(h, node)
	v := h.Sum32()
	return fmt.Sprintf("10.%d.%d.%d", v>>16&0xff, v>>8&0xff, v&0xff)
}

// MemberID is a member's ID in hex, as etcdctl prints it.
func MemberID(name string) string {
	h := fnv.New64a()
	fmt.Fprint(h, name)
	return fmt.Sprintf("%x", h.Sum64())
}

// IsMember says etcd lists the member.
func (f *Fleet) IsMember(name string) bool {
	return slices.ContainsFunc(f.Members, func(m Member) bool { return m.Name == name })
}

// React plays one look of every host's agent, of k3s and of every kubelet
// at now, in that order, on the Nodes as the cluster holds them; a Node
// of no host of the fleet is left alone. It changes only what those parts
// write: Report, Probe, ServerLabels, MemberName, RemovedMember,
// EtcdIsVoter, Ready, Heartbeat, and Pods (those deleted are gone).
func (f *Fleet) React(now time.Time, nodes []swapplan.Node) {
	for i := range nodes {
		if h := f.Hosts[nodes[i].Name]; h != nil {
			f.agent(now, &nodes[i], h)
		}
	}
	f.k3s(now, nodes)
	for i := range nodes {
		if h := f.Hosts[nodes[i].Name]; h != nil {
			f.kubelet(now, &nodes[i], h)
			f.probe(now, &nodes[i], h)
		}
	}
}

func report(now time.Time, n *swapplan.Node, r api.Report) {
	r.At = now
	n.Report = &r
}

// agent answers the request on the Node, once, and finishes a demotion,
// as fleet-role agent does (role.Decide).
func (f *Fleet) agent(now time.Time, n *swapplan.Node, h *Host) {
	if h.Paused || h.Cut {
		return
	}
	// The host's state keeps the true time; what the agent writes, its
	// own clock's.
	stamp := func(t time.Time) *time.Time { t = t.Add(h.ClockOffset); return &t }
	report := func(now time.Time, n *swapplan.Node, r api.Report) { report(*stamp(now), n, r) }
	if q := n.Request; q != nil && !q.At.Equal(h.Handled) {
		h.Handled = q.At
		at := q.At
		switch q.Action {
		case api.RequestPromote:
			switch {
			case h.IgnorePromote:
			case !h.Staged || h.RefusePromote:
				report(now, n, api.Report{Swap: q.Swap, Action: q.Action, State: api.StateRefused, RequestAt: &at, Message: "not staged"})
			default:
				if !h.Server {
					h.Agent, h.Server, h.ServerStart = false, true, now
					h.Incarnation++
					h.Member = memberName(n.Name, h.Incarnation)
					h.LearnerSince = now
					f.Members = append(f.Members, Member{Name: h.Member, Node: n.Name, Learner: true})
				}
				h.RoleFile = "server"
				report(now, n, api.Report{Swap: q.Swap, Action: q.Action, State: api.StateDone, StartedAt: stamp(h.ServerStart), RequestAt: &at})
			}
		case api.RequestStepDown:
			if h.IgnoreStepDown {
				break
			}
			if h.FailStepDowns > 0 {
				h.FailStepDowns--
				report(now, n, api.Report{Swap: q.Swap, Action: q.Action, State: api.StateFailed, RequestAt: &at, Message: "systemctl stop k3s: timed out"})
				break
			}
			h.RoleFile, h.Server, h.Swap = "agent", false, q.Swap
			report(now, n, api.Report{Swap: q.Swap, Action: q.Action, State: api.StateDone, RequestAt: &at})
		case api.RequestSnapshot:
			r := api.Report{Swap: q.Swap, Action: q.Action, State: api.StateDone, RequestAt: &at}
			if !h.SnapshotNotReady {
				r.Snapshot = &api.SnapshotFile{Path: "/var/lib/rancher/k3s/server/db/snapshots/s.db", Size: 4096,
					SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
			}
			report(now, n, r)
		case api.RequestRemoveMember:
			// Note: tests/fleetsim's copy never answered this request;
			// the agent does (role.Decide), so the model does.
			switch {
			case h.RemoveIgnored:
			case h.RemoveFails || !h.Server:
				report(now, n, api.Report{Swap: q.Swap, Action: q.Action, State: api.StateFailed, RequestAt: &at, Message: "etcd member remove: injected failure"})
			default:
				report(now, n, f.removeByVoter(now, h, q))
			}
		}
	}
	// The demotion finishes once the step-down is carried out, the
	// server stopped, and the member gone (or member-gone names the
	// swap), once a swap; a host with no member finishes at once, as the
	// agent does with no datastore (role.Decide), and its agent unit,
	// running already (a candidate whose promotion was never carried
	// out), is the one whose start the finish reports.
	if h.NoFinish || h.Swap == "" || h.Finished == h.Swap || h.RoleFile != "agent" || h.Server {
		return
	}
	if h.Member == "" || !f.IsMember(h.Member) || (n.MemberGone != "" && n.MemberGone == h.Swap) {
		if !h.Agent {
			h.Agent, h.AgentStart = true, now
		}
		h.Member, h.Finished = "", h.Swap
		report(now, n, api.Report{Swap: h.Swap, Action: api.ReportFinish, State: api.StateDone, StartedAt: stamp(h.AgentStart)})
	}
}

// removeByVoter removes the member a remove-member request names, as the
// agent does with its etcd client: never its own, never when the voters
// left that run would not be a quorum; one already gone is done.
func (f *Fleet) removeByVoter(now time.Time, h *Host, q *api.Request) api.Report {
	at := q.At
	r := api.Report{Swap: q.Swap, Action: q.Action, State: api.StateDone, RequestAt: &at}
	// As the agent's etcdclient.RemoveMember: by its ID where given, the
	// name too where given (a learner that never started has none).
	i := slices.IndexFunc(f.Members, func(m Member) bool {
		return MemberID(m.Name) == q.MemberID && (q.Member == "" || m.Name == q.Member)
	})
	if i < 0 {
		return r
	}
	if f.Members[i].Name == h.Member {
		r.State, r.Message = api.StateFailed, "the member is this host's own"
		return r
	}
	if !f.Members[i].Learner && f.QuorumKept(QuorumCheck{Now: now, Removed: f.Members[i].Node}) != nil {
		r.State, r.Message = api.StateFailed, "the voters left would not be a quorum"
		return r
	}
	f.Members = slices.Delete(f.Members, i, i+1)
	return r
}

// serving says the host's server runs its apiserver and controllers,
// which k3s starts once its member votes (never, for a NeverReady host).
func (f *Fleet) serving(h *Host) bool {
	return h.Server && !h.NeverReady && slices.ContainsFunc(f.Members, func(m Member) bool { return m.Name == h.Member && !m.Learner })
}

// k3s: the leader promotes caught-up learners and removes members on the
// remove annotation; a serving server keeps its labels and node-name; the
// leader writes EtcdIsVoter.
func (f *Fleet) k3s(now time.Time, nodes []swapplan.Node) {
	for i := range f.Members {
		m := &f.Members[i]
		if h := f.Hosts[m.Node]; m.Learner && h != nil && h.Server && !h.NeverJoin && !h.NeverStarts && now.Sub(h.LearnerSince) >= f.Timing.CatchUp {
			m.Learner = false
		}
	}
	f.Members = slices.DeleteFunc(f.Members, func(m Member) bool {
		h := f.Hosts[m.Node]
		return f.Timing.LearnerStall > 0 && m.Learner && h != nil && h.NeverStarts && now.Sub(h.LearnerSince) > f.Timing.LearnerStall
	})
	for i := range nodes {
		n := &nodes[i]
		h := f.Hosts[n.Name]
		if h == nil {
			continue
		}
		// k3s's member controller (v1.34.2 on; pkg/etcd/member_controller.go,
		// etcdMemberHandler.sync): it removes the member node-name names
		// (none there is success), records removed-node-name and drops
		// remove and node-name; without node-name it errs and keeps
		// remove, asked again.
		// A removed-node-name of an older member resets the removal
		// without making it: both dropped, to be asked again.
		switch {
		case f.K3sPaused || !n.RemoveRequested || n.MemberName == "":
		case n.RemovedMember == "":
			f.Members = slices.DeleteFunc(f.Members, func(m Member) bool { return m.Name == n.MemberName })
			n.RemovedMember, n.MemberName, n.RemoveRequested = n.MemberName, "", false
		case n.RemovedMember != n.MemberName:
			n.RemovedMember, n.RemoveRequested = "", false
		}
		// Note: k3s writes a server's labels and node-name once its
		// apiserver and controllers run, which needs its member to vote
		// (tests/fleetsim's copy wrote them as soon as the server ran).
		if f.serving(h) && !h.Paused {
			if slices.ContainsFunc(api.ServerLabels, func(l string) bool { return !slices.Contains(n.ServerLabels, l) }) {
				labels := slices.Clone(n.ServerLabels)
				for _, l := range api.ServerLabels {
					if !slices.Contains(labels, l) {
						labels = append(labels, l)
					}
				}
				n.ServerLabels = labels
			}
			n.MemberName = h.Member
		}
		// Note: k3s's leader leaves the condition of a Node that is no
		// etcd Node and matches no member as it is (tests/fleetsim's copy
		// removed it), and a paused host's member does not answer its
		// status call: Unhealthy. Still simpler than k3s, which writes
		// the condition on etcd Nodes only: a learner's Node, which has
		// no etcd label yet, is said to be a learner.
		switch idx := slices.IndexFunc(f.Members, func(m Member) bool { return m.Node == n.Name }); {
		case h.NeverReady && !n.EtcdServer():
		case idx < 0 && n.EtcdServer():
			n.EtcdIsVoter = swapplan.Condition{Status: "False", Reason: api.ReasonNotAMember}
		case idx < 0:
		case f.Members[idx].Learner:
			n.EtcdIsVoter = swapplan.Condition{Status: "False", Reason: api.ReasonMemberIsLearner}
		case !h.Server || h.Paused:
			n.EtcdIsVoter = swapplan.Condition{Status: "False", Reason: api.ReasonUnhealthy}
		default:
			n.EtcdIsVoter = swapplan.Condition{Status: "True", Reason: api.ReasonMemberNotLearner}
		}
	}
}

// kubelet sets Ready, renews the heartbeat and deletes the Pods being
// deleted.
func (f *Fleet) kubelet(now time.Time, n *swapplan.Node, h *Host) {
	// Note: a k3s server runs its kubelet once its apiserver serves, which
	// needs its member to vote: a joining server's Node is not Ready
	// (k3s-io/k3s pkg/cli/server, run; the k3s double does the same;
	// tests/fleetsim's copy had it Ready at once).
	//
	// A paused host's kubelet posts nothing: its Node keeps the Ready it
	// had until the node lifecycle controller's grace passed since its
	// last heartbeat (Timing.NodeGrace).
	if h.Paused {
		if n.Ready && now.Sub(h.beat) >= f.Timing.NodeGrace {
			n.Ready = false
		}
	} else {
		n.Ready = (h.Agent || f.serving(h)) && !h.KubeletDead
	}
	// The kubelet shares the agent's clock (ClockOffset), and paces its
	// renewals on the monotonic one.
	if n.Ready && !h.Paused && !h.HeartbeatStuck && (now.Sub(h.beat) >= f.Timing.Heartbeat || n.Heartbeat.IsZero()) {
		h.beat = now
		n.Heartbeat = now.Add(h.ClockOffset)
	}
	terminating := func(p swapplan.Pod) bool { return p.Terminating }
	if slices.ContainsFunc(n.Pods, terminating) {
		n.Pods = slices.DeleteFunc(slices.Clone(n.Pods), terminating)
	}
}

// probe: the agent writes its sample when one is due, after k3s acted in
// the same look; a server's lists etcd's members with their IDs.
func (f *Fleet) probe(now time.Time, n *swapplan.Node, h *Host) {
	if h.Paused || h.Cut || now.Before(h.SilentUntil) {
		return
	}
	// The agent's probe period is a ticker's, on the monotonic clock: a
	// jump of its wall clock moves the samples' times, not their pace.
	if n.Probe != nil && now.Sub(h.probed) < f.Timing.ProbePeriod {
		return
	}
	h.probed = now
	now = now.Add(h.ClockOffset)
	p := &api.Probe{At: now, Period: api.Duration(f.Timing.ProbePeriod), Healthy: !now.Before(h.UnhealthyUntil),
		Staged: h.Staged && !h.Server, FsyncP99Ms: h.FsyncMs, RTTMs: 1}
	if h.Server {
		p.Member = h.Member
		for _, m := range f.Members {
			listed := api.Member{Name: m.Name, Learner: m.Learner, ID: MemberID(m.Name), PeerURLs: []string{"https://" + Address(m.Node) + ":2380"}}
			if o := f.Hosts[m.Node]; o != nil && o.NeverStarts && m.Learner {
				listed.Name = ""
			}
			p.Members = append(p.Members, listed)
			// As the agent's etcdclient.Unanswering: each other member
			// asked on its client URL; one whose host is frozen, or whose
			// server is stopped, does not answer.
			if o := f.Hosts[m.Node]; m.Name != h.Member && m.Name != "" && (o == nil || o.Paused || !o.Server || o.Member != m.Name) {
				p.Unreachable = append(p.Unreachable, m.Name)
			}
		}
		slices.Sort(p.Unreachable)
	}
	if c := h.K3sConfig; c != nil {
		k := *c
		k.Critical = maps.Clone(c.Critical)
		if h.Server {
			k.ServerCAHash = ModelCAHash
		}
		p.K3sConfig = &k
	}
	n.Probe = p
}

// Delete plays k3s's answer to the deletion of the Node, and says whether
// the Node goes. k3s's etcd member controller registers an on-remove
// handler (k3s-io/k3s pkg/etcd/member_controller.go, registerMemberHandlers:
// nodes.OnRemove(ctx, "managed-etcd-controller", e.onRemove)), for which
// wrangler puts its finalizer on every Node and drops it only once the
// handler returns no error (rancher/wrangler pkg/generic/remove.go); the
// handler ((*etcdMemberHandler).onRemove) lets a Node without the etcd
// role label go with its member left as it is, lets one go whose member
// was removed on its remove annotation (remove "true" and a
// removed-node-name), and otherwise removes the member its node-name
// annotation names (RemovePeer) or, without that annotation, fails, so
// that the Node stays, being deleted, and the handler is tried again.
// Note: k3s also needs the node-address annotation, which it writes with
// node-name (pkg/etcd/metadata_controller.go, handleSelf); the model has
// no addresses. The host is left as it is: its agent and kubelet have no
// Node to read or write any more.
func (f *Fleet) Delete(n *swapplan.Node) (gone bool) {
	switch {
	case !n.EtcdServer():
		return true
	case n.RemovedMember != "":
		return true // removed already (k3s: onRemove skips it)
	case n.MemberName == "" || f.K3sPaused:
		return false
	}
	f.Members = slices.DeleteFunc(f.Members, func(m Member) bool { return m.Name == n.MemberName })
	return true
}

// QuorumCheck is what the quorum oracle is asked: whether etcd keeps a
// quorum at Now once the host Stopped stops its server (a step-down) or
// the member of the host Removed is removed (a removal).
type QuorumCheck struct {
	Now time.Time
	// Stopped and Removed name the host an action takes out, or "".
	Stopped, Removed string
	// Grace: a paused host counts as up until that long after its
	// agent's last probe sample, the time in which no planner can tell
	// it from a host that answers; zero counts it down at once.
	Grace time.Duration
	// Healthy counts only the voters whose probes say healthy, as the
	// removal of a running candidate's member needs (the planner holds it
	// while one is unhealthy); the outgoing voter's, down, needs only
	// that the others vote (Stopped).
	Healthy bool
}

// QuorumKept is the one quorum oracle of the suites that play a fleet
// (the planner's property, sequence and Node-deletion tests, and
// tests/controller over tests/fleetsim): it says why etcd would be left
// without a quorum, nil when it is not. Only voting members count: a
// learner neither votes nor counts in the majority (etcd:
// server/etcdserver/api/membership, VotingMembers; raft's quorum is a
// majority of the voters). A voter is up while its host's server runs and
// its host is not paused (past the grace).
func (f *Fleet) QuorumKept(c QuorumCheck) error {
	var voters, up int
	var down []string
	for _, m := range f.Members {
		if m.Learner || (c.Removed != "" && m.Node == c.Removed) {
			continue
		}
		voters++
		h := f.Hosts[m.Node]
		switch {
		case h == nil || !h.Server || m.Node == c.Stopped:
			down = append(down, m.Node+" (stopped)")
		case h.Paused && c.Now.Sub(h.probed) >= c.Grace:
			down = append(down, m.Node+" (paused)")
		case c.Healthy && c.Now.Before(h.UnhealthyUntil):
			down = append(down, m.Node+" (unhealthy)")
		default:
			up++
		}
	}
	if up < swapplan.Quorum(voters) {
		return fmt.Errorf("%d of %d voting members up, a quorum is %d; down: %s", up, voters, swapplan.Quorum(voters), strings.Join(down, ", "))
	}
	return nil
}
