package swapplan

import (
	"time"

	"github.com/fleet-role/fleet-role/api"
)

// Snapshot is everything the planner reads: the cluster as the controller
// saw it in one pass, and Now, the one time every rule of that pass uses.
// It holds business logic only and never connects to anything.
type Snapshot struct {
	Now    time.Time
	Config Config
	// Nodes, in any order; the planner works on them sorted by name.
	Nodes []Node
	// Lease is the regrade Lease (api.Namespace/api.LeaseName); the zero
	// Lease is free.
	Lease Lease
	// Status is the status the controller last published (api.StatusKey).
	Status api.Status
	// Request is the manual request (api.RequestKey), if any.
	Request *api.ManualRequest
	// Pause is the pause in force (api.PauseKey), if any: no swap starts,
	// but a forced manual request; a swap under way goes on.
	Pause *api.Pause
	// Cancel is the cancel of a swap (api.CancelKey), if any: the swap it
	// names is rolled back (or abandoned) while its outgoing voter has not
	// stepped down.
	Cancel *api.Cancel
	// Holds say what else disrupts the cluster now (kured's reboot lock
	// held by another than the controller, an upgrade applying, an alert
	// firing), each a sentence: no swap starts but a forced manual
	// request, and a swap under way does not stop its outgoing voter (the
	// gates; see gates in swap.go for the steps they hold and why). The
	// controller reads them on every pass, with a swap under way or not,
	// so that a dry run says what would wait and a disruption that begins
	// mid-swap holds the next stop.
	Holds []string
}

// Config is what the planner needs of the controller's configuration.
type Config struct {
	// DryRun: an automatic decision is only reported; a manual request and
	// a swap under way are still carried out.
	DryRun bool
	// Cooldown is the least time between the end of a swap and the start
	// of an automatic one.
	Cooldown time.Duration
	// ProbePeriod is the agents' probe period, used for a sample that does
	// not say its own.
	ProbePeriod time.Duration
	// Window is when an automatic swap may start.
	Window Window
	Bounds Bounds
	// Remediation limits the retries of automatic swaps.
	Remediation Remediation
	// DomainLabel is the Node label that names a host's failure domain;
	// empty: none is weighed.
	DomainLabel string
	// DeadAfter is how long a voter's kubelet has not beaten, with every
	// other sign of death, before the voter is called dead.
	DeadAfter time.Duration
	// ReplaceDead: a dead voter starts an automatic swap. Off, it is only
	// reported (Plan.Dead) and the decision says why no swap starts; a
	// manual swap of it is carried out.
	ReplaceDead bool
	// RunnersWait: past the runners bound, a swap keeps waiting for the
	// runner pods on the outgoing voter, and says it is past its bound;
	// off, it goes on to the drain, which evicts them.
	RunnersWait bool
}

// Remediation limits automatic swaps as Cluster API's
// KubeadmControlPlane limits its remediation (remediationStrategy): an
// automatic swap of a voter that an automatic swap put in less than
// MinHealthyPeriod before (from that swap's start) is a retry of the same
// remediation; it waits RetryPeriod from that start, and past MaxRetries
// retries (-1: no limit) it does not start until the period runs out. A
// manual swap is not limited.
type Remediation struct {
	MaxRetries       int
	RetryPeriod      time.Duration
	MinHealthyPeriod time.Duration
}

// Bounds are the steps' own bounds. What happens past each is in the
// steps' table of docs/swap.md.
type Bounds struct {
	Snapshot time.Duration // past it: abandon
	Runners  time.Duration // runners-in: abandon; runners-out: Config.RunnersWait
	Drain    time.Duration // drain-in: abandon; drain-out: go on
	Promote  time.Duration // rollback
	Join     time.Duration // rollback
	Gates    time.Duration // hold, and say so
	StepDown time.Duration // go on
	// RemoveMember: the removal held while the remaining voters that
	// vote are no majority of the members with OUT: hold, and say so.
	RemoveMember time.Duration
	MemberGone   time.Duration // clean up anyway; OUT left pending
	Uncordon     time.Duration // end pending
	Rollback     time.Duration // the candidate's step-down: go on
	// RemoveFallback is how long k3s is given to remove the candidate's
	// member in a rollback; past it a voter's agent is asked to.
	RemoveFallback time.Duration
	// RemoveByVoter is how long that agent is given; past it (or when it
	// fails) the swap stops stuck, for an operator.
	RemoveByVoter time.Duration
}

// Sum is the longest a swap waits on its bounded steps: the whole wait,
// but with Config.RunnersWait, which waits on runners past their bound.
func (b Bounds) Sum() time.Duration {
	return b.Snapshot + 2*b.Runners + 2*b.Drain + b.Promote + b.Join + b.Gates +
		b.StepDown + b.RemoveMember + b.MemberGone + b.Uncordon + b.Rollback + b.RemoveFallback + b.RemoveByVoter
}

// Lease is the regrade Lease.
type Lease struct {
	Holder    string
	RenewTime time.Time
	Duration  time.Duration
	// Swap is the record in api.AnnotationSwap, if any.
	Swap *api.SwapRecord
}

// Condition is a Node condition; the zero Condition is absent.
type Condition struct {
	Status string // "True", "False", "Unknown"
	Reason string
}

// Node is what the planner knows of one Node.
type Node struct {
	Name string
	// Role is api.LabelRole, Level api.LabelLevel.
	Role  string
	Level string
	// ServerLabels are the k3s server role labels the Node carries.
	ServerLabels []string
	// EtcdTaint says the Node carries api.TaintEtcdOnly.
	EtcdTaint bool
	// MemberName is api.AnnotationEtcdNodeName, RemovedMember
	// api.AnnotationEtcdRemovedNodeName, RemoveRequested
	// api.AnnotationEtcdRemove.
	MemberName      string
	RemovedMember   string
	RemoveRequested bool
	// MemberAddress is api.AnnotationEtcdNodeAddress: the holds read it
	// to know an alert about this host's member.
	MemberAddress string
	// Addresses are the Node's InternalIP addresses: a learner etcd lists
	// without a name (its member never started) is this host's when its
	// peer URL's host is one of them. k3s advertises a member's peer URL
	// at its node-ip, the InternalIP; an ExternalIP, which hosts behind
	// one NAT may share, names no member.
	Addresses   []string
	EtcdIsVoter Condition
	Ready       bool
	// Heartbeat is the renew time of the kubelet's Lease; HeartbeatSeen
	// when the controller saw it renewed, on its own clock (zero when it
	// cannot tell).
	Heartbeat     time.Time
	HeartbeatSeen time.Time
	Unschedulable bool
	CordonedBy    string
	// Maintenance says why the Node is under maintenance, empty when it
	// is not: cordoned by someone other than fleet-role (Unschedulable
	// with no CordonedBy), annotated api.AnnotationMaintenance, or
	// holding kured's reboot lock. The controller's adapt fills it
	// (adapt.Maintenance). A voter under maintenance is never dead,
	// however long it is silent: a long reboot is no death.
	Maintenance string
	MemberGone  string
	Request     *api.Request
	Report      *api.Report
	Probe       *api.Probe
	// ProbeSeen and ReportSeen are when the controller saw the Probe and
	// the Report change, on its own clock; zero when it cannot tell (a
	// Node as it found it at its start, or fleet-role plan's input).
	ProbeSeen, ReportSeen time.Time
	Verdict               api.Verdict
	Pods                  []Pod
	// Domain is the host's failure domain, the value of its Node's
	// Config.DomainLabel; empty when it has none.
	Domain string
}

// Pod is what the planner knows of a Pod on a Node.
type Pod struct {
	Namespace, Name string
	// Runner: a GitHub Actions runner pod, waited for, not evicted early.
	Runner bool
	// DaemonSet and Mirror pods are left alone by a drain.
	DaemonSet bool
	Mirror    bool
	// Finished: Succeeded or Failed.
	Finished bool
	// Terminating: deletion under way.
	Terminating bool
}

// EtcdServer says k3s runs an etcd server on the Node (api.LabelEtcd).
func (n *Node) EtcdServer() bool {
	for _, l := range n.ServerLabels {
		if l == api.LabelEtcd {
			return true
		}
	}
	return false
}

// MemberRemoved says k3s removed the Node's current member: its last
// removed member is its current one, or it has no current one.
func (n *Node) MemberRemoved() bool {
	return n.RemovedMember != "" && (n.MemberName == "" || n.MemberName == n.RemovedMember)
}

// Voter says the Node's etcd member votes: an etcd server whose member k3s
// has not removed and whose condition does not say learner or not a member.
// A Node whose member k3s removed is no voter, whatever its stale label and
// condition say.
func (n *Node) Voter() bool {
	if !n.EtcdServer() || n.MemberRemoved() {
		return false
	}
	if n.EtcdIsVoter.Status == "False" &&
		(n.EtcdIsVoter.Reason == api.ReasonMemberIsLearner || n.EtcdIsVoter.Reason == api.ReasonNotAMember) {
		return false
	}
	return true
}

// clean says no server state is left on the Node: no k3s server labels,
// etcd annotations, level or taint.
func (n *Node) clean() bool {
	return len(n.ServerLabels) == 0 && n.MemberName == "" && n.RemovedMember == "" &&
		!n.RemoveRequested && n.Level == "" && !n.EtcdTaint
}

// requested returns the Node's request of the swap for the action, if any.
func (n *Node) requested(swap, action string) *api.Request {
	if n.Request != nil && n.Request.Swap == swap && n.Request.Action == action {
		return n.Request
	}
	return nil
}

// answer returns the report answering the Node's request of the swap for
// the action, if both are there.
func (n *Node) answer(swap, action string) *api.Report {
	if q := n.requested(swap, action); q != nil && n.Report.Answers(q) {
		return n.Report
	}
	return nil
}

// carries says the Node holds any of the swap's annotations.
func (n *Node) carries(swap string) bool {
	return (n.Request != nil && n.Request.Swap == swap) || n.CordonedBy == swap || n.MemberGone == swap
}
