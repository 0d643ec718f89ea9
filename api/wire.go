package api

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The requests the controller makes of an agent (Request.Action): written
// by the controller in AnnotationRequest, read by the agent, and echoed in
// the agent's Report.Action.
const (
	// RequestPromote asks a staged standby to become a server and join
	// through the voters the request names.
	RequestPromote = "promote"
	// RequestStepDown asks a voter to hand etcd leadership away and stop
	// its server.
	RequestStepDown = "step-down"
	// RequestSnapshot asks a voter for an etcd snapshot, verified.
	RequestSnapshot = "snapshot"
	// RequestRemoveMember asks a voter's agent to remove another host's
	// etcd member (Request.Member, Request.MemberID) with its etcd client:
	// the rollback's way to remove a candidate k3s cannot remove.
	RequestRemoveMember = "remove-member"
)

// requestActions are the actions a Request may carry.
var requestActions = []string{RequestPromote, RequestStepDown, RequestSnapshot, RequestRemoveMember}

// ReportFinish is the action an agent reports when it has finished a
// demotion on its own (its member gone), without a request: written by
// the agent in Report.Action, read by the controller.
const ReportFinish = "finish"

// Report states (Report.State): written by the agent, read by the
// controller.
const (
	StateDone    = "done"
	StateRefused = "refused"
	StateFailed  = "failed"
)

// Request is what the controller asks of a host's agent: written by the
// controller in AnnotationRequest, read by the agent, which keeps the last
// one it carried out in its AgentState.
type Request struct {
	// V is the format's version (Version when written; 1 when missing).
	V      int       `json:"v"`
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

// SnapshotFile describes an etcd snapshot an agent took and verified, in
// its Report.
type SnapshotFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	// Copy is the snapshot's copy off the host, whole and of the same
	// sha256, when the agent has a snapshot_copy_dir; empty otherwise.
	Copy string `json:"copy,omitempty"`
}

var sha256Hex = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Ready says whether the snapshot is there to restore from: a path, a
// non-empty file and its checksum.
func (f *SnapshotFile) Ready() bool {
	return f != nil && f.Path != "" && f.Size > 0 && sha256Hex.MatchString(f.SHA256)
}

// Report is an agent's answer to a Request, or its word that it finished a
// demotion (ReportFinish): written by the agent in AnnotationReport (kept
// in its AgentState until the API server takes it), read by the
// controller.
type Report struct {
	// V is the format's version (Version when written; 1 when missing).
	V      int    `json:"v"`
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

// Member is one etcd member as a host's etcd lists it: in a Probe, and in
// Status.Members.
type Member struct {
	// Name is the member's name; etcd lists a learner that has not
	// started yet without one.
	Name    string `json:"name"`
	Learner bool   `json:"learner,omitempty"`
	// ID is the member's ID in hex, as etcdctl prints it.
	ID string `json:"id,omitempty"`
	// PeerURLs are the member's peer URLs: a learner that has not started
	// is known by their host alone.
	PeerURLs []string `json:"peerURLs,omitempty"`
}

// EtcdStatus is what a member says of itself: etcd's Maintenance.Status.
type EtcdStatus struct {
	// ID is the member's ID in hex, as etcdctl prints it.
	ID      string `json:"id"`
	Learner bool   `json:"learner,omitempty"`
	// Leader is the ID of the leader it follows, in hex.
	Leader    string `json:"leader,omitempty"`
	RaftIndex uint64 `json:"raftIndex"`
	RaftTerm  uint64 `json:"raftTerm"`
	// DBSize is the size of its backend database, DBSizeInUse the part in
	// use, in bytes.
	DBSize      int64 `json:"dbSize"`
	DBSizeInUse int64 `json:"dbSizeInUse"`
	// Errors are its alarms and errors (a NOSPACE alarm, say).
	Errors []string `json:"errors,omitempty"`
}

// Probe is an agent's latest health sample: written by the agent in
// AnnotationProbe every probe period, read by the controller.
type Probe struct {
	// V is the format's version (Version when written; 1 when missing).
	V      int       `json:"v"`
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
	// Unreachable names the members this host's etcd lists, but its own
	// and those not started, that did not answer a status request on
	// their client URL (servers only).
	Unreachable []string `json:"unreachable,omitempty"`
	// Leader is the member name of the leader this host's etcd reports.
	Leader string `json:"leader,omitempty"`
	// Etcd is what this host's member says of itself (servers only; nil
	// when it did not answer).
	Etcd *EtcdStatus `json:"etcd,omitempty"`
	// EtcdLatencies are this host's member's own latency histograms
	// (servers only; nil from an agent that does not read them): the
	// controller judges a voter by them.
	EtcdLatencies *EtcdLatencies `json:"etcdLatencies,omitempty"`
	// FsyncP99Ms is the p99 of the probe's own fdatasync'd writes: the
	// controller judges a standby by it.
	FsyncP99Ms float64 `json:"fsyncP99Ms"`
	// RTTMs is the latency of a linearizable read through the local etcd.
	RTTMs float64 `json:"rttMs,omitempty"`
	// Error says what could not be sampled (etcd unreachable, say).
	Error string `json:"error,omitempty"`
	// RoleFileError says, while the host's role file is corrupt, what is
	// wrong with it: the agent changes nothing on the host until it is
	// mended, so the host keeps KeptRole, the role file's last good word
	// ("" when the agent has read none since it started). Both are empty
	// when the role file is good or missing.
	RoleFileError string   `json:"roleFileError,omitempty"`
	KeptRole      HostRole `json:"keptRole,omitempty"`
	// K3sConfig is what the agent read of its host's k3s server
	// configuration: a voter's running one, a standby's staged one. The
	// controller compares a candidate's with the voters' before a swap
	// starts. Nil from an agent that does not read it.
	K3sConfig *K3sConfig `json:"k3sConfig,omitempty"`
}

// K3sConfig is a host's k3s server configuration as far as k3s requires
// every server to agree on it: the settings k3s compares when a server
// joins (k3s-io/k3s pkg/cluster/bootstrap.go, compareConfig, over
// pkg/daemons/config CriticalControlArgs), and the cluster CA its token
// pins. Its values are no secret: the token's password is never in it.
type K3sConfig struct {
	// Critical are the settings by k3s's own name for each (the cli tag
	// k3s logs on a mismatch, "critical configuration mismatched:
	// cluster-cidr"), each value as k3s resolves it from the config
	// files and its defaults: CIDRs and IPs in canonical form, lists
	// joined by commas, booleans "true" or "false".
	Critical map[string]string `json:"critical,omitempty"`
	// TokenCAHash is the cluster CA hash the token pins: the hex after
	// K10 in a token of k3s's full form K10<hash>::<user>:<password>.
	// Empty when the config files give no token, or one without a hash.
	TokenCAHash string `json:"tokenCAHash,omitempty"`
	// ServerCAHash is the hash of this host's cluster CA
	// (server/tls/server-ca.crt) as k3s computes it for its tokens: what
	// a joining server's TokenCAHash must be. Empty where there is none.
	ServerCAHash string `json:"serverCAHash,omitempty"`
	// TokenError says why the token's CA hash could not be read (a token
	// file unreadable, a hash k3s refuses); the settings are still given.
	TokenError string `json:"tokenError,omitempty"`
	// Error says why the configuration could not be read; then Critical
	// and TokenCAHash are empty.
	Error string `json:"error,omitempty"`
}

// EtcdLatencies are a member's own latency histograms from its /metrics,
// as they stand when sampled: cumulative since the member started, so
// that the controller takes the p99 over its verdict's window from the
// difference of two samples.
type EtcdLatencies struct {
	// WALFsync is etcd_disk_wal_fsync_duration_seconds; BackendCommit is
	// etcd_disk_backend_commit_duration_seconds. etcd's own guidance: p99
	// under 10 ms and 25 ms.
	WALFsync      *Histogram `json:"walFsync,omitempty"`
	BackendCommit *Histogram `json:"backendCommit,omitempty"`
	// Error says why they could not be read: not a fault of the host, and
	// no verdict is made on latencies not read.
	Error string `json:"error,omitempty"`
}

// Histogram is a cumulative Prometheus histogram of durations in seconds.
type Histogram struct {
	// Count is every observation (the +Inf bucket); Sum their total, in
	// seconds.
	Count uint64  `json:"count"`
	Sum   float64 `json:"sum"`
	// Buckets are by upper bound, ascending, +Inf left out: each counts
	// the observations at most its bound.
	Buckets []Bucket `json:"buckets"`
}

// Bucket is one cumulative bucket of a Histogram.
type Bucket struct {
	// LE is the bucket's upper bound, in seconds.
	LE    float64 `json:"le"`
	Count uint64  `json:"count"`
}

// Validate reports what is wrong with a histogram: bounds not ascending,
// or counts that fall.
func (h Histogram) Validate() error {
	prevLE, prev := math.Inf(-1), uint64(0)
	for i, b := range h.Buckets {
		if math.IsNaN(b.LE) || math.IsInf(b.LE, 0) || b.LE <= prevLE {
			return fmt.Errorf("buckets[%d].le: %v is not a finite bound above the one before", i, b.LE)
		}
		if b.Count < prev {
			return fmt.Errorf("buckets[%d].count: %d is less than the bucket before's %d", i, b.Count, prev)
		}
		prevLE, prev = b.LE, b.Count
	}
	if h.Count < prev {
		return fmt.Errorf("count: %d is less than the last bucket's %d", h.Count, prev)
	}
	return nil
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
	if c := p.K3sConfig; c != nil {
		for _, h := range []struct{ field, v string }{{"k3sConfig.tokenCAHash", c.TokenCAHash}, {"k3sConfig.serverCAHash", c.ServerCAHash}} {
			if h.v != "" && !sha256Hex.MatchString(h.v) {
				errs = append(errs, fmt.Errorf("field %q: %q is not a sha256 in hex", h.field, h.v))
			}
		}
	}
	if l := p.EtcdLatencies; l != nil {
		for _, h := range []struct {
			field string
			h     *Histogram
		}{{"etcdLatencies.walFsync", l.WALFsync}, {"etcdLatencies.backendCommit", l.BackendCommit}} {
			if h.h != nil {
				if err := h.h.Validate(); err != nil {
					errs = append(errs, prefixed("field "+strconv.Quote(h.field), err))
				}
			}
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
