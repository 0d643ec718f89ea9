package api

// The objects fleet-role keeps in its namespace.
const (
	// Namespace is where the controller, its Leases and its status
	// ConfigMap live: the default of the controller's `namespace`. Created
	// by the Ansible role and the manifests; read by the controller and
	// the commands (`fleet-role swap`, `status`, `plan`).
	Namespace = "fleet-role"
	// LeaseName is the regrade Lease, the one lock for swaps and regrades.
	// Taken and renewed by the controller through a swap (holder
	// ControllerHolder, record AnnotationSwap) and by regrade; read by the
	// controller, `fleet-role swap` and `fleet-role plan`, and by the
	// Ansible role before it uninstalls or reconfigures.
	LeaseName = "regrade"
	// WritesLease is the controller's own Lease, renewed every quarter
	// second during a swap's leadership move and member removal to time
	// what they cost the cluster's writes (WriteCost): created and
	// written by the controller alone, read by nobody.
	WritesLease = "fleet-role-writes"
	// ControllerHolder is the holder identity the controller writes on the
	// regrade Lease; the controller and the commands read it to tell a
	// swap's hold from a regrade's.
	ControllerHolder = "fleet-role-controller"
	// LeaderElectionLease is the default name of the controller replicas'
	// election Lease (`leader_election.lease`), not the regrade Lease:
	// written and read by the replicas, deleted by the Ansible role on
	// uninstall.
	LeaderElectionLease = "fleet-role-controller"
	// StatusConfigMap holds StatusKey, RequestKey, PauseKey, CancelKey and
	// NotifyQueueKey. Written by the controller and by `fleet-role
	// swap|pause|resume`; read by the controller and the commands.
	StatusConfigMap = "fleet-role-status"
	// StatusKey holds the controller's published Status: written by the
	// controller every pass, read back by it (the planner's memory of the
	// step and since when), and by `fleet-role status`, `fleet-role swap`,
	// `fleet-role plan` and the Ansible role.
	StatusKey = "status.json"
	// RequestKey holds the ManualRequest: written by `fleet-role swap`,
	// read by the controller, which deletes it when the swap it started
	// ends, and by `fleet-role status`.
	RequestKey = "request.json"
	// PauseKey holds the Pause: written by `fleet-role pause`, deleted by
	// `fleet-role resume`; read by the controller, which starts no swap
	// while it is there, and by `fleet-role status`.
	PauseKey = "pause.json"
	// CancelKey holds the Cancel: written by `fleet-role swap --cancel`,
	// read by the controller, which rolls the swap it names back (or
	// abandons it) while its outgoing voter has not stepped down, and by
	// `fleet-role status`; a Cancel of a swap that ended is left alone.
	CancelKey = "cancel.json"
	// NotifyQueueKey holds the NotifyQueue, the notifications not sent
	// yet: written and read by the leading controller alone, so that a
	// restart loses none.
	NotifyQueueKey = "notify-queue.json"
)

// The names fleet-role writes on Nodes and on its Lease.
const (
	// LabelRole is a Node's fleet role: RoleVoter, RoleStandby or
	// RoleAgent. Put on a registered Node that has none by the Ansible
	// role at deployment (never k3s's node-label, which k3s puts back at
	// every start), changed by the controller at a swap's clean-up; read
	// by the controller.
	LabelRole = "fleet-role.io/role"
	// LabelSwapping is on every voter while a swap runs and on the
	// standby it brings in: LabelSwappingOut on the voter going out,
	// LabelSwappingIn on the standby coming in, LabelSwappingVoter on
	// every other voter, so that other tools (a system-upgrade-controller
	// Plan's nodeSelector, a drain job) can keep off them while the
	// cluster has a failure less to spare: written and removed by the
	// controller alone.
	LabelSwapping      = "fleet-role.io/swapping"
	LabelSwappingOut   = "out"
	LabelSwappingIn    = "in"
	LabelSwappingVoter = "voter"
	// LabelLevel is a server's level (full, etcd-only): set by regrade,
	// removed by the controller's clean-up of a demoted server, read by
	// the controller.
	LabelLevel = "fleet-role.io/level"
	// TaintEtcdOnly is the NoSchedule taint regrade puts on an etcd-only
	// server: removed by the controller's clean-up, read by the
	// controller.
	TaintEtcdOnly = "fleet-role.io/etcd-only"
	// AnnotationRequest carries a Request: written by the controller, read
	// by the host's agent and by the controller (a request already made).
	AnnotationRequest = "fleet-role.io/request"
	// AnnotationMemberGone names the swap once every remaining voter lists
	// the host's member gone: written by the controller, read by the
	// host's agent (its demotion may finish) and by the controller.
	AnnotationMemberGone = "fleet-role.io/member-gone"
	// AnnotationReport carries the agent's Report: written by the agent,
	// read by the controller.
	AnnotationReport = "fleet-role.io/report"
	// AnnotationProbe carries the agent's latest Probe sample: written by
	// the agent every probe period, and at once when its role file turns
	// corrupt or is mended; read by the controller (its verdicts and
	// gates).
	AnnotationProbe = "fleet-role.io/probe"
	// AnnotationCordonedBy names the swap that cordoned the Node: written
	// and read by the controller, which uncordons only what it cordoned.
	AnnotationCordonedBy = "fleet-role.io/cordoned-by"
	// AnnotationMaintenance marks a Node under maintenance, its value
	// saying why (any text; empty counts as no mark): written by people
	// or their tools before work that may keep the host down longer than
	// dead_after (a firmware update, a disk check), removed by them
	// after; read by the controller, which never calls a voter so marked
	// dead. A cordon by anything but fleet-role counts the same.
	AnnotationMaintenance = "fleet-role.io/maintenance"
	// AnnotationSwap carries the SwapRecord on the regrade Lease: written
	// by the controller, read by the controller, `fleet-role swap`,
	// `fleet-role plan` and the Ansible role.
	AnnotationSwap = "fleet-role.io/swap"
	// AnnotationConfigChecksum, on the controller Deployment's pod
	// template, is the sha256 of its configuration as its ConfigMap holds
	// it: written by the Ansible role, so that a changed configuration
	// rolls the controller's Pods.
	AnnotationConfigChecksum = "fleet-role.io/config-checksum"
)

// SwapAnnotations are the Node annotations a swap writes and its end
// clears, but on a host that has not reported the finish of its
// demotion: there they stay, for its agent, until it has, and the
// controller's ActionClearFinished clears them.
var SwapAnnotations = []string{AnnotationRequest, AnnotationMemberGone, AnnotationCordonedBy}

// The roles, the values of LabelRole.
const (
	// RoleVoter is a server whose etcd member votes.
	RoleVoter = "voter"
	// RoleStandby is an agent staged to become a server, a swap's
	// candidate.
	RoleStandby = "standby"
	// RoleAgent is an agent that never becomes a server.
	RoleAgent = "agent"
)

// The names k3s and the kubelets write, which fleet-role reads and, where
// a swap's clean-up says so, removes.
const (
	// AnnotationEtcdNodeName is the host's etcd member name: written by
	// k3s, read by the controller, removed by its clean-up.
	AnnotationEtcdNodeName = "etcd.k3s.cattle.io/node-name"
	// AnnotationEtcdNodeAddress is the host's etcd peer address, written
	// by k3s with the node-name and removed by the clean-up with it: k3s's
	// member controller removes both after a removal it made itself
	// (pkg/etcd/member_controller.go, sync), but when the member removed
	// was that controller's own, the patch is left to the next leader,
	// which skips the Node once the clean-up took its etcd label.
	AnnotationEtcdNodeAddress = "etcd.k3s.cattle.io/node-address"
	// AnnotationEtcdRemove = "true" asks k3s to remove the Node's member:
	// written by the controller, read by k3s.
	AnnotationEtcdRemove = "etcd.k3s.cattle.io/remove"
	// AnnotationEtcdRemovedNodeName is the member k3s last removed for the
	// Node, which may be an older member than the current one: written by
	// k3s, read by the controller and the host's agent.
	AnnotationEtcdRemovedNodeName = "etcd.k3s.cattle.io/removed-node-name"
	// ConditionEtcdIsVoter is the Node condition the etcd leader's k3s
	// writes (reasons Reason*); read by the controller.
	ConditionEtcdIsVoter = "EtcdIsVoter"
	// LabelEtcd, LabelControlPlane and LabelMaster are k3s's server roles,
	// written by k3s and read by the controller; k3s never strips them on
	// demotion, the controller's clean-up does.
	LabelEtcd         = "node-role.kubernetes.io/etcd"
	LabelControlPlane = "node-role.kubernetes.io/control-plane"
	LabelMaster       = "node-role.kubernetes.io/master"
	// NodeLeaseNamespace holds the kubelets' heartbeat Leases, which the
	// controller reads.
	NodeLeaseNamespace = "kube-node-lease"
)

// ConditionEtcdIsVoter's reasons, written by k3s; read by the controller,
// for which a learner or a node that is not a member is no voter.
const (
	ReasonMemberNotLearner = "MemberNotLearner"
	ReasonMemberIsLearner  = "MemberIsLearner"
	ReasonUnhealthy        = "Unhealthy"
	ReasonNotAMember       = "NotAMember"
)

// ServerLabels are the k3s server role labels the clean-up removes.
var ServerLabels = []string{LabelEtcd, LabelControlPlane, LabelMaster}

// EtcdAnnotations are the k3s etcd annotations the clean-up removes.
var EtcdAnnotations = []string{AnnotationEtcdNodeName, AnnotationEtcdNodeAddress, AnnotationEtcdRemovedNodeName, AnnotationEtcdRemove}

// The Events fleet-role records on Nodes, which people read with kubectl
// and the tests look for.
const (
	// EventSourceController and EventSourceAgent are the Events' source
	// components.
	EventSourceController = "fleet-role-controller"
	EventSourceAgent      = "fleet-role-agent"
	// EventSwapActionFailed is the reason of the controller's warning that
	// an action failed (it is repeated next pass).
	EventSwapActionFailed = "SwapActionFailed"
	// EventCorruptRoleFile is the reason of the agent's warning that its
	// role file holds neither role.
	EventCorruptRoleFile = "CorruptRoleFile"
	// EventBadRequest is the reason of the agent's warning that
	// AnnotationRequest does not read as a Request.
	EventBadRequest = "BadRequest"
	// EventDryRunWouldSwap is the reason of the controller's Event, on the
	// voter it would swap out, that a dry run only reported an automatic
	// decision: recorded once a decision, as the counter
	// fleet_role_dry_run_decisions_total counts it.
	EventDryRunWouldSwap = "DryRunWouldSwap"
	// EventDemotionUnfinished is the reason of the controller's warning,
	// on the Node of each host a swap ends without the finish of its
	// demotion, that the swap's step-down and member-gone stay on the
	// Node until its agent reports the finish, and what an operator does.
	EventDemotionUnfinished = "DemotionUnfinished"
	// EventHoldUnreadable is the reason of the controller's warning, on
	// its status ConfigMap, that a hold (config [holds]) turned unreadable:
	// it holds until it can be read (fleet_role_hold_unreadable).
	EventHoldUnreadable = "HoldUnreadable"
	// EventPreflightRefused is the reason of the controller's warning, on
	// a standby's Node, that the preflight refuses to swap it in: a
	// setting of its staged k3s server config, or its token's CA, differs
	// from the voters', so k3s would refuse its join. Recorded once for
	// as long as the same refusal stands.
	EventPreflightRefused = "PreflightRefused"
)

// EventSwapReason is the reason of the controller's Event for the action
// it carried out: "Swap" and the action type in title case, as
// SwapCordonIn for ActionCordonIn.
func EventSwapReason(action string) string {
	out := []byte("Swap")
	up := true
	for i := range len(action) {
		ch := action[i]
		if ch == '-' {
			up = true
			continue
		}
		if up && ch >= 'a' && ch <= 'z' {
			ch -= 'a' - 'A'
		}
		up = false
		out = append(out, ch)
	}
	return string(out)
}

// The files k3s writes under its data dir, which the agent reads. Paths
// are slash-separated, relative to the data dir (`data_dir` of the agent's
// configuration).
const (
	// TombstonePath is the file k3s leaves when its member was removed.
	TombstonePath = "server/db/etcd/tombstone"
	// MemberNamePath holds the host's etcd member name.
	MemberNamePath = "server/db/etcd/name"
)

// The etcd client certificates k3s writes under its data dir (k3s-io/k3s
// pkg/daemons/control/deps/deps.go, CreateRuntimeCertFiles:
// server/tls/etcd/server-ca.crt, client.crt, client.key), here under k3s's
// default data dir: the defaults of the agent's `[etcd]` files, and what
// Stuck.Command tells an operator to use.
const (
	K3sEtcdCA   = "/var/lib/rancher/k3s/server/tls/etcd/server-ca.crt"
	K3sEtcdCert = "/var/lib/rancher/k3s/server/tls/etcd/client.crt"
	K3sEtcdKey  = "/var/lib/rancher/k3s/server/tls/etcd/client.key"
)
