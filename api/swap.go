package api

import (
	"fmt"
	"slices"
	"time"
)

// The steps of a swap, in the order a swap goes forward (docs/swap.md),
// then the phases a swap can leave the forward path by: written by the
// controller in Status.Step, read back by it and by `fleet-role status`;
// `fleet-role plan` prints them. They also name the actions that carry the
// steps out (the Action* types).
const (
	StepStart        = "start"
	StepSnapshot     = "snapshot"
	StepCordonIn     = "cordon-in"
	StepRunnersIn    = "runners-in"
	StepDrainIn      = "drain-in"
	StepPromote      = "promote"
	StepJoin         = "join"
	StepGates        = "gates"
	StepCordonOut    = "cordon-out"
	StepRunnersOut   = "runners-out"
	StepDrainOut     = "drain-out"
	StepStepDown     = "step-down"
	StepRemoveMember = "remove-member"
	StepMemberGone   = "member-gone"
	StepCleanUp      = "clean-up"
	StepUncordon     = "uncordon"
	StepEnd          = "end"
	StepRollback     = "rollback"
	// StepRemoveCandidate: in a rollback, k3s was asked to remove the
	// candidate's member and a voter still lists it.
	StepRemoveCandidate = "remove-candidate"
	// StepRemoveByVoter: past remove_fallback, a voter's agent was asked
	// to remove it with its etcd client.
	StepRemoveByVoter = "remove-by-voter"
	// StepStuck: neither could; the swap waits, the Lease held, for an
	// operator to remove it (PhaseStuck).
	StepStuck   = "stuck"
	StepAbandon = "abandon"
)

// Steps lists every step, forward ones first in their order.
var Steps = []string{
	StepStart, StepSnapshot, StepCordonIn, StepRunnersIn, StepDrainIn, StepPromote, StepJoin,
	StepGates, StepCordonOut, StepRunnersOut, StepDrainOut, StepStepDown, StepRemoveMember,
	StepMemberGone, StepCleanUp, StepUncordon, StepEnd, StepRollback, StepRemoveCandidate,
	StepRemoveByVoter, StepStuck, StepAbandon,
}

// The action types the planner returns and the controller carries out:
// written by the controller in Status.LastAction.Type and in its Events'
// reasons (EventSwapReason), read by `fleet-role status`; `fleet-role
// plan` prints them. Each names the step it carries out; ActionNone waits,
// and ActionClearFinished, taken with no swap under way, names none.
const (
	ActionNone         = "none"
	ActionStart        = StepStart        // acquire the Lease with the swap record
	ActionSnapshot     = StepSnapshot     // write a snapshot request on the Node
	ActionCordonIn     = StepCordonIn     // cordon the Node, annotate cordoned-by
	ActionDrainIn      = StepDrainIn      // evict the Node's pods
	ActionPromote      = StepPromote      // write a promote request on the Node
	ActionCordonOut    = StepCordonOut    // as ActionCordonIn
	ActionDrainOut     = StepDrainOut     // as ActionDrainIn
	ActionStepDown     = StepStepDown     // write a step-down request on the Node
	ActionRemoveMember = StepRemoveMember // annotate the Node etcd.k3s.cattle.io/remove=true
	ActionMemberGone   = StepMemberGone   // annotate the Node member-gone=<swap>
	ActionCleanUp      = StepCleanUp      // label the Node's role; for RoleStandby drop all server state
	ActionUncordon     = StepUncordon     // uncordon the Node, drop cordoned-by
	ActionEnd          = StepEnd          // write the record, clear the swap's annotations, record, release
	ActionRollback     = StepRollback     // write the record (phase rollback) to the Lease
	ActionAbandon      = StepAbandon      // write the record (phase abandon) to the Lease
	// ActionRemoveByVoter writes a remove-member request on a voter.
	ActionRemoveByVoter = StepRemoveByVoter
	// ActionStuck writes the record (phase stuck) to the Lease; its Event,
	// a warning on the candidate's Node, says what an operator does.
	ActionStuck = StepStuck
	// ActionClearFinished clears SwapAnnotations from a Node whose host a
	// swap that ended left with its demotion unfinished, once its agent
	// reported the finish; it lifts the cordon that swap left first. It
	// is taken with no swap under way, so it names no step.
	ActionClearFinished = "clear-finished"
)

// Swap origins (SwapRecord.Origin, SwapResult.Origin): written by the
// controller, read by it and by `fleet-role status`.
const (
	OriginManual    = "manual"
	OriginAutomatic = "automatic"
)

// Swap phases (SwapRecord.Phase): written by the controller, read by it,
// by `fleet-role status` and by the Ansible role. The empty phase is a
// swap going forward.
// PhaseStuck is a rollback that cannot remove the candidate's member on its
// own: it waits, the Lease held, until an operator removes it
// (SwapRecord.Stuck says how), then rolls back on.
const (
	PhaseRollback = "rollback"
	PhaseStuck    = "stuck"
	PhaseAbandon  = "abandon"
	PhaseEnd      = "end"
)

// Swap results (SwapRecord.Result, SwapResult.Result): written by the
// controller, read by it and by `fleet-role status`. ResultPending is a
// swap that ended without a host it needed (SwapRecord.Pending): a
// rolled-back candidate that did not finish its demotion, a candidate
// whose Node was deleted after the outgoing voter stepped down, an
// outgoing voter that did not come back Ready.
const (
	ResultCompleted  = "completed"
	ResultRolledBack = "rolled-back"
	ResultAbandoned  = "abandoned"
	ResultPending    = "pending"
)

// SwapRecord is the swap the regrade Lease holds: written by the
// controller in AnnotationSwap, read by the controller, `fleet-role swap`,
// `fleet-role plan` and the Ansible role. It is also mirrored in Status.Swap, so a swap
// whose Lease was lost is resumed, not forgotten.
type SwapRecord struct {
	// V is the format's version (Version when written; 1 when missing).
	V         int       `json:"v"`
	ID        string    `json:"id"`
	Out       string    `json:"out"`
	In        string    `json:"in"`
	Origin    string    `json:"origin"`
	StartedAt time.Time `json:"startedAt"`
	// RequestAt is the At of the manual request that started the swap.
	RequestAt *time.Time `json:"requestAt,omitempty"`
	// Overrides are the overrides of the manual request that started the
	// swap (ManualRequest.Overrides): the refusals it was started past.
	Overrides []string `json:"overrides,omitempty"`
	// Dead: Out was dead by every sign when the swap started (DeadVoter);
	// its member is removed before In is promoted (docs/swap.md, A dead
	// voter).
	Dead bool `json:"dead,omitempty"`
	// Phase is empty going forward, else PhaseRollback, PhaseStuck,
	// PhaseAbandon or PhaseEnd; Reason says why it was entered.
	Phase  string `json:"phase,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Result and EndedAt are set with PhaseEnd.
	Result  string     `json:"result,omitempty"`
	EndedAt *time.Time `json:"endedAt,omitempty"`
	// Pending names the hosts the swap ends without: set with PhaseEnd.
	// A host that did not report the finish of its demotion keeps the
	// swap's step-down and member-gone on its Node until its agent does
	// (Status.Unfinished); one whose Node was deleted had no Node to keep
	// them on; one that finished but did not come back Ready is left
	// cordoned.
	Pending []string `json:"pending,omitempty"`
	// Stuck says which member the swap could not remove, set with
	// PhaseStuck.
	Stuck *Stuck `json:"stuck,omitempty"`
}

// Validate reports the fields that are missing or wrong.
func (r SwapRecord) Validate() error {
	var errs []error
	if r.ID == "" {
		errs = append(errs, missing("id"))
	}
	if r.Out == "" {
		errs = append(errs, missing("out"))
	}
	if r.In == "" {
		errs = append(errs, missing("in"))
	}
	if !slices.Contains([]string{OriginManual, OriginAutomatic}, r.Origin) {
		errs = append(errs, oneOf("origin", r.Origin, OriginManual, OriginAutomatic))
	}
	if r.StartedAt.IsZero() {
		errs = append(errs, missing("startedAt"))
	}
	errs = append(errs, validOverrides(r.Overrides))
	if !slices.Contains([]string{"", PhaseRollback, PhaseStuck, PhaseAbandon, PhaseEnd}, r.Phase) {
		errs = append(errs, oneOf("phase", r.Phase, PhaseRollback, PhaseStuck, PhaseAbandon, PhaseEnd))
	}
	if r.Phase == PhaseStuck && r.Stuck == nil {
		errs = append(errs, missing("stuck"))
	}
	if r.Phase == PhaseEnd {
		if !slices.Contains([]string{ResultCompleted, ResultRolledBack, ResultAbandoned, ResultPending}, r.Result) {
			errs = append(errs, oneOf("result", r.Result, ResultCompleted, ResultRolledBack, ResultAbandoned, ResultPending))
		}
		if r.EndedAt == nil {
			errs = append(errs, missing("endedAt"))
		}
	}
	return joinFields(errs)
}

// Stuck is the candidate's member a rollback could not remove, neither
// through k3s nor through a voter's agent, and how an operator removes it.
type Stuck struct {
	// Node is the candidate whose member it is.
	Node string `json:"node"`
	// Member is its name as the voters list it, MemberID its ID in hex
	// (empty when the voters' samples did not say it).
	Member   string `json:"member"`
	MemberID string `json:"memberID,omitempty"`
	// Voter is a voter to run the command on.
	Voter string `json:"voter"`
	// Why the removal failed.
	Why string `json:"why"`
}

// Command is what an operator types, as root on the voter, to remove the
// member: etcdctl (which k3s does not ship; etcd's release of the same
// minor version) through the local member with k3s's client certificates.
// Note: not `kubectl annotate ... etcd.k3s.cattle.io/remove=true`: that is
// the path that already failed, since k3s's member controller
// (pkg/etcd/member_controller.go, etcdMemberHandler.sync) skips a Node
// without the etcd role label and the node-name and node-address
// annotations, which a server whose apiserver never came up never wrote.
func (s Stuck) Command() string {
	etcdctl := fmt.Sprintf("etcdctl --endpoints=https://127.0.0.1:2379 --cacert=%s --cert=%s --key=%s", K3sEtcdCA, K3sEtcdCert, K3sEtcdKey)
	if s.MemberID != "" {
		return fmt.Sprintf("%s member remove %s", etcdctl, s.MemberID)
	}
	return fmt.Sprintf("%s member remove \"$(%s member list | awk -F', ' '$3 == \"%s\" {print $1}')\"", etcdctl, etcdctl, s.Member)
}
