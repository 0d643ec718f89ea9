package swapplan

// The names fleet-role reads and writes on the cluster: the wire contract
// between the controller, the agents, k3s and the people who read them. They
// live in this one file so that a rename is one change.
const (
	// Namespace is where the controller, its Lease and its ConfigMap live.
	Namespace = "fleet-role"
	// LeaseName is the one lock for swaps and regrades.
	LeaseName = "regrade"
	// ControllerHolder is the Lease holder identity of the controller.
	ControllerHolder = "fleet-role-controller"
	// StatusConfigMap holds StatusKey, written by the controller, and
	// RequestKey, written by `fleet-role swap`.
	StatusConfigMap = "fleet-role-status"
	// StatusKey is the controller's published status (Status).
	StatusKey = "status.json"
	// RequestKey is the manual request (ManualRequest).
	RequestKey = "request.json"

	// LabelRole is a Node's fleet role: RoleVoter, RoleStandby or RoleAgent.
	LabelRole = "fleet-role.io/role"
	// LabelLevel is a server's level (full, etcd-only), set by regrade.
	LabelLevel = "fleet-role.io/level"
	// TaintEtcdOnly is the NoSchedule taint regrade puts on an etcd-only server.
	TaintEtcdOnly = "fleet-role.io/etcd-only"
	// AnnotationRequest carries a Request for the host's agent.
	AnnotationRequest = "fleet-role.io/request"
	// AnnotationMemberGone names the swap once every remaining voter shows
	// the host's member gone.
	AnnotationMemberGone = "fleet-role.io/member-gone"
	// AnnotationReport carries the agent's Report.
	AnnotationReport = "fleet-role.io/report"
	// AnnotationProbe carries the agent's latest Probe sample.
	AnnotationProbe = "fleet-role.io/probe"
	// AnnotationCordonedBy names the swap that cordoned the Node.
	AnnotationCordonedBy = "fleet-role.io/cordoned-by"
	// AnnotationSwap carries the SwapRecord on the Lease.
	AnnotationSwap = "fleet-role.io/swap"
	// AnnotationConfigChecksum, on the controller Deployment's pod
	// template, is the sha256 of its configuration as its ConfigMap holds
	// it: written by the Ansible role, so that a changed configuration
	// rolls the controller's Pods.
	AnnotationConfigChecksum = "fleet-role.io/config-checksum"

	// AnnotationEtcdNodeName is written by k3s: the host's etcd member name.
	AnnotationEtcdNodeName = "etcd.k3s.cattle.io/node-name"
	// AnnotationEtcdRemove = "true" asks k3s to remove the Node's member.
	AnnotationEtcdRemove = "etcd.k3s.cattle.io/remove"
	// AnnotationEtcdRemovedNodeName is written by k3s: the member it last
	// removed for the Node, which may be an older member than the current one.
	AnnotationEtcdRemovedNodeName = "etcd.k3s.cattle.io/removed-node-name"
	// ConditionEtcdIsVoter is the Node condition the etcd leader writes.
	ConditionEtcdIsVoter = "EtcdIsVoter"
	// LabelEtcd, LabelControlPlane and LabelMaster are k3s's server roles;
	// k3s never strips them on demotion, the clean-up does.
	LabelEtcd         = "node-role.kubernetes.io/etcd"
	LabelControlPlane = "node-role.kubernetes.io/control-plane"
	LabelMaster       = "node-role.kubernetes.io/master"
	// NodeLeaseNamespace holds the kubelets' heartbeat Leases.
	NodeLeaseNamespace = "kube-node-lease"
	// TombstonePath and MemberNamePath are relative to k3s's data dir.
	TombstonePath  = "server/db/etcd/tombstone"
	MemberNamePath = "server/db/etcd/name"
)

// Roles, the values of LabelRole.
const (
	RoleVoter   = "voter"
	RoleStandby = "standby"
	RoleAgent   = "agent"
)

// EtcdIsVoter reasons written by k3s.
const (
	ReasonMemberNotLearner = "MemberNotLearner"
	ReasonMemberIsLearner  = "MemberIsLearner"
	ReasonUnhealthy        = "Unhealthy"
	ReasonNotAMember       = "NotAMember"
)

// ServerLabels are the k3s server role labels the clean-up removes.
var ServerLabels = []string{LabelEtcd, LabelControlPlane, LabelMaster}

// EtcdAnnotations are the k3s etcd annotations the clean-up removes.
var EtcdAnnotations = []string{AnnotationEtcdNodeName, AnnotationEtcdRemovedNodeName, AnnotationEtcdRemove}

// SwapAnnotations are the Node annotations a swap writes and its end clears.
var SwapAnnotations = []string{AnnotationRequest, AnnotationMemberGone, AnnotationCordonedBy}
