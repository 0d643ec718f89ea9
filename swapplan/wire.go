package swapplan

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Requests the controller asks of an agent (Request.Action).
const (
	RequestPromote  = "promote"
	RequestStepDown = "step-down"
	RequestSnapshot = "snapshot"
	// RequestRemoveMember asks a voter's agent to remove another host's
	// etcd member (Request.Member, Request.MemberID) with its etcd client:
	// the rollback's way to remove a candidate k3s cannot remove.
	RequestRemoveMember = "remove-member"
)

// requestActions are the actions a Request may carry.
var requestActions = []string{RequestPromote, RequestStepDown, RequestSnapshot, RequestRemoveMember}

// ReportFinish is the action an agent reports when it has finished a
// demotion on its own (the member gone), without a request.
const ReportFinish = "finish"

// Report states.
const (
	StateDone    = "done"
	StateRefused = "refused"
	StateFailed  = "failed"
)

// Swap origins.
const (
	OriginManual    = "manual"
	OriginAutomatic = "automatic"
)

// Swap phases (SwapRecord.Phase). The empty phase is a swap going forward.
// PhaseStuck is a rollback that cannot remove the candidate's member on its
// own: it waits, the Lease held, until an operator removes it
// (SwapRecord.Stuck says how), then rolls back on.
const (
	PhaseRollback = "rollback"
	PhaseStuck    = "stuck"
	PhaseAbandon  = "abandon"
	PhaseEnd      = "end"
)

// Swap results (SwapRecord.Result, SwapResult.Result).
const (
	ResultCompleted  = "completed"
	ResultRolledBack = "rolled-back"
	ResultAbandoned  = "abandoned"
	ResultPending    = "pending"
)

// Duration is a time.Duration written in JSON as a Go duration string ("90s").
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string such as "90s" or "1m30s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"60s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Request is what the controller asks of a host's agent
// (AnnotationRequest).
type Request struct {
	Swap   string    `json:"swap"`
	Action string    `json:"action"`
	At     time.Time `json:"at"`
	// Leader is the node a step-down hands etcd leadership to if it can:
	// the swap's candidate. Empty: any voter that answers.
	Leader string `json:"leader,omitempty"`
	// Voters are, on a promotion, the nodes whose members vote and are
	// healthy, the outgoing voter left out: the agent derives from them
	// the server its k3s server joins through (its `server:`), so that it
	// never joins through a host that is no longer a server.
	Voters []string `json:"voters,omitempty"`
	// Member and MemberID name the member a remove-member request removes:
	// its name as the voters list it, and its ID in hex as etcdctl prints
	// it (empty when the voters' samples do not say it).
	Member   string `json:"member,omitempty"`
	MemberID string `json:"memberID,omitempty"`
}

// Validate reports the first field that is missing or wrong.
func (r Request) Validate() error {
	var errs []error
	if r.Swap == "" {
		errs = append(errs, missing("swap"))
	}
	if !slices.Contains(requestActions, r.Action) {
		errs = append(errs, oneOf("action", r.Action, requestActions...))
	}
	if r.At.IsZero() {
		errs = append(errs, missing("at"))
	}
	if r.Action == RequestRemoveMember && r.Member == "" && r.MemberID == "" {
		errs = append(errs, fmt.Errorf("fields %q and %q: a %s request names the member", "member", "memberID", RequestRemoveMember))
	}
	if r.MemberID != "" && !memberID.MatchString(r.MemberID) {
		errs = append(errs, fmt.Errorf("field %q: %q is not a member ID in hex", "memberID", r.MemberID))
	}
	return joinFields(errs)
}

var memberID = regexp.MustCompile(`^[0-9a-f]{1,16}$`)

// SnapshotFile describes an etcd snapshot an agent took and verified.
type SnapshotFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Ready says whether the snapshot is there to restore from: a path, a
// non-empty file and its checksum.
func (f *SnapshotFile) Ready() bool {
	return f != nil && f.Path != "" && f.Size > 0 && sha256Hex.MatchString(f.SHA256)
}

// Report is an agent's answer (AnnotationReport).
type Report struct {
	Swap   string `json:"swap"`
	Action string `json:"action"`
	State  string `json:"state"`
	// StartedAt is the start of the unit the action left running.
	StartedAt *time.Time `json:"startedAt,omitempty"`
	At        time.Time  `json:"at"`
	Message   string     `json:"message,omitempty"`
	// RequestAt echoes the At of the Request answered, so an answer to an
	// earlier request of the same swap is not taken for this one.
	RequestAt *time.Time    `json:"requestAt,omitempty"`
	Snapshot  *SnapshotFile `json:"snapshot,omitempty"`
}

// Validate reports the fields that are missing or wrong.
func (r Report) Validate() error {
	var errs []error
	if r.Swap == "" {
		errs = append(errs, missing("swap"))
	}
	if actions := append(slices.Clone(requestActions), ReportFinish); !slices.Contains(actions, r.Action) {
		errs = append(errs, oneOf("action", r.Action, actions...))
	}
	if !slices.Contains([]string{StateDone, StateRefused, StateFailed}, r.State) {
		errs = append(errs, oneOf("state", r.State, StateDone, StateRefused, StateFailed))
	}
	if r.At.IsZero() {
		errs = append(errs, missing("at"))
	}
	return joinFields(errs)
}

// Answers says whether the report answers the request.
func (r *Report) Answers(q *Request) bool {
	if r == nil || q == nil {
		return false
	}
	if r.Swap != q.Swap || r.Action != q.Action {
		return false
	}
	return r.RequestAt == nil || r.RequestAt.Equal(q.At)
}

// Member is one etcd member as a host's etcd lists it.
type Member struct {
	// Name is the member's name; etcd lists a learner that has not
	// started yet without one.
	Name    string `json:"name"`
	Learner bool   `json:"learner,omitempty"`
	// ID is the member's ID in hex, as etcdctl prints it.
	ID string `json:"id,omitempty"`
}

// Probe is an agent's latest health sample (AnnotationProbe).
type Probe struct {
	At     time.Time `json:"at"`
	Period Duration  `json:"period"`
	// Healthy is the agent's own judgement of this sample: the disk and,
	// on a server, etcd answered within their limits.
	Healthy bool `json:"healthy"`
	// Staged says the host is staged to become a server (standby).
	Staged bool `json:"staged"`
	// Member is this host's etcd member name, if it has one.
	Member string `json:"member,omitempty"`
	// Members is the member list this host's etcd returned (servers only).
	Members []Member `json:"members,omitempty"`
	// Leader is the member name of the leader this host's etcd reports.
	Leader     string  `json:"leader,omitempty"`
	FsyncP99Ms float64 `json:"fsyncP99Ms"`
	// RTTMs is the latency of a linearizable read through the local etcd.
	RTTMs float64 `json:"rttMs,omitempty"`
	// Error says what could not be sampled (etcd unreachable, say).
	Error string `json:"error,omitempty"`
}

// Validate reports the fields that are missing or wrong.
func (p Probe) Validate() error {
	var errs []error
	if p.At.IsZero() {
		errs = append(errs, missing("at"))
	}
	if p.Period <= 0 {
		errs = append(errs, fmt.Errorf("field %q: must be a positive duration", "period"))
	}
	for i, m := range p.Members {
		if m.Name == "" && !m.Learner {
			errs = append(errs, missing(fmt.Sprintf("members[%d].name", i)))
		}
	}
	return joinFields(errs)
}

// SwapRecord is the swap a Lease holds (AnnotationSwap). It is also mirrored
// in Status, so a swap whose Lease was lost is resumed, not forgotten.
type SwapRecord struct {
	ID        string    `json:"id"`
	Out       string    `json:"out"`
	In        string    `json:"in"`
	Origin    string    `json:"origin"`
	StartedAt time.Time `json:"startedAt"`
	// RequestAt is the At of the manual request that started the swap.
	RequestAt *time.Time `json:"requestAt,omitempty"`
	// Phase is empty going forward, else PhaseRollback, PhaseAbandon or
	// PhaseEnd; Reason says why it was entered.
	Phase  string `json:"phase,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Result and EndedAt are set with PhaseEnd.
	Result  string     `json:"result,omitempty"`
	EndedAt *time.Time `json:"endedAt,omitempty"`
	// Pending names the hosts left to node recovery, set with PhaseEnd.
	Pending []string `json:"pending,omitempty"`
	// Stuck says which member the swap could not remove, set with
	// PhaseStuck.
	Stuck *Stuck `json:"stuck,omitempty"`
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

// K3sEtcdCerts are the etcd client certificates k3s writes under its data
// dir (k3s-io/k3s pkg/daemons/control/deps/deps.go, CreateRuntimeCertFiles:
// server/tls/etcd/server-ca.crt, client.crt, client.key), here under k3s's
// default data dir.
const (
	K3sEtcdCA   = "/var/lib/rancher/k3s/server/tls/etcd/server-ca.crt"
	K3sEtcdCert = "/var/lib/rancher/k3s/server/tls/etcd/client.crt"
	K3sEtcdKey  = "/var/lib/rancher/k3s/server/tls/etcd/client.key"
)

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

// ManualRequest is what `fleet-role swap OUT IN` writes (RequestKey).
type ManualRequest struct {
	Out string    `json:"out"`
	In  string    `json:"in"`
	At  time.Time `json:"at"`
	By  string    `json:"by,omitempty"`
}

// Validate reports the fields that are missing or wrong.
func (r ManualRequest) Validate() error {
	var errs []error
	if r.Out == "" {
		errs = append(errs, missing("out"))
	}
	if r.In == "" {
		errs = append(errs, missing("in"))
	}
	if r.Out != "" && r.Out == r.In {
		errs = append(errs, fmt.Errorf("fields %q and %q: name the same node %q", "out", "in", r.Out))
	}
	if r.At.IsZero() {
		errs = append(errs, missing("at"))
	}
	return joinFields(errs)
}

// Verdict states.
const (
	VerdictFit     = "fit"
	VerdictUnfit   = "unfit"
	VerdictPartial = "partial" // not yet a full window: no verdict
	VerdictSilent  = "silent"  // no sample for 3 periods
)

// Verdict is the controller's judgement of a host's fitness over a window
// of its probe samples.
type Verdict struct {
	State string `json:"state"`
	// Score orders hosts of the same state: higher is worse.
	Score float64 `json:"score"`
	// Samples and Bad count the window's samples and those over a threshold.
	Samples int `json:"samples,omitempty"`
	Bad     int `json:"bad,omitempty"`
	// Figures that led to it.
	FsyncP99Ms float64 `json:"fsyncP99Ms,omitempty"`
	RTTMs      float64 `json:"rttMs,omitempty"`
	Reason     string  `json:"reason,omitempty"`
}

// Decision is the automatic decision: swap Out for In.
type Decision struct {
	Out    string `json:"out"`
	In     string `json:"in"`
	Reason string `json:"reason"`
}

// SwapResult is how a swap ended, kept in Status.
type SwapResult struct {
	ID        string     `json:"id"`
	Out       string     `json:"out"`
	In        string     `json:"in"`
	Origin    string     `json:"origin"`
	Result    string     `json:"result"`
	Reason    string     `json:"reason,omitempty"`
	StartedAt time.Time  `json:"startedAt"`
	EndedAt   time.Time  `json:"endedAt"`
	RequestAt *time.Time `json:"requestAt,omitempty"`
	Pending   []string   `json:"pending,omitempty"`
}

// LastAction is the last action the controller carried out, and its error.
type LastAction struct {
	Type  string    `json:"type"`
	Node  string    `json:"node,omitempty"`
	At    time.Time `json:"at"`
	Error string    `json:"error,omitempty"`
}

// Status is the controller's published status (StatusKey). The planner
// reads back the fields it wrote: the swap under way, the step and since
// when, the last result and the cooldown, and the verdicts.
type Status struct {
	Swap          *SwapRecord        `json:"swap"`
	Step          string             `json:"step,omitempty"`
	Since         *time.Time         `json:"since,omitempty"`
	Bound         Duration           `json:"bound,omitempty"`
	Reason        string             `json:"reason,omitempty"`
	Last          *SwapResult        `json:"last,omitempty"`
	CooldownUntil *time.Time         `json:"cooldownUntil,omitempty"`
	Verdicts      map[string]Verdict `json:"verdicts,omitempty"`
	Decision      *Decision          `json:"decision,omitempty"`
	Request       *ManualRequest     `json:"request,omitempty"`
	Voters        []string           `json:"voters,omitempty"`
	// Members is the membership each voter lists, by voter.
	Members    map[string][]Member `json:"members,omitempty"`
	LastAction *LastAction         `json:"lastAction,omitempty"`
	Pending    []string            `json:"pending,omitempty"`
	// Problems are the malformed objects and annotations, read as absent.
	Problems  []string  `json:"problems,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Validate reports the fields that are wrong.
func (s Status) Validate() error {
	var errs []error
	if s.Swap != nil {
		if err := s.Swap.Validate(); err != nil {
			errs = append(errs, prefixed("swap", err))
		}
	}
	if s.Step != "" && !slices.Contains(Steps, s.Step) {
		errs = append(errs, oneOf("step", s.Step, Steps...))
	}
	for _, name := range sortedKeys(s.Verdicts) {
		st := s.Verdicts[name].State
		if !slices.Contains([]string{VerdictFit, VerdictUnfit, VerdictPartial, VerdictSilent}, st) {
			errs = append(errs, oneOf("verdicts."+name+".state", st, VerdictFit, VerdictUnfit, VerdictPartial, VerdictSilent))
		}
	}
	return joinFields(errs)
}

// joinFields joins the problems of one value on one line.
func joinFields(errs []error) error {
	var msgs []string
	for _, err := range errs {
		if err != nil {
			msgs = append(msgs, err.Error())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; "))
}

func missing(field string) error { return fmt.Errorf("field %q: missing", field) }

func oneOf(field, got string, want ...string) error {
	return fmt.Errorf("field %q: %q is not one of %s", field, got, strings.Join(want, ", "))
}

func prefixed(prefix string, err error) error {
	return fmt.Errorf("%s: %w", prefix, err)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
