package api

import (
	"fmt"
	"slices"
	"time"
)

// ManualRequest is the request to swap Out for In: written by `fleet-role
// swap OUT IN` in RequestKey, read by the controller (which honours it
// once, by its At) and by `fleet-role status`; mirrored in Status.Request.
type ManualRequest struct {
	// V is the format's version (Version when written; 1 when missing).
	V   int       `json:"v"`
	Out string    `json:"out"`
	In  string    `json:"in"`
	At  time.Time `json:"at"`
	By  string    `json:"by,omitempty"`
	// Overrides name the refusals the request is carried out past, each
	// one of Overrides (`fleet-role swap --override`): OverridePause,
	// OverrideHolds, OverrideDomains. A request an older CLI wrote with
	// "force": true is read as all three (UnmarshalJSON); none is written
	// so. Note: a controller older than the overrides ignores them, so it
	// waits for the pause and the holds and refuses the failure domain: it
	// fails safe.
	Overrides []string `json:"overrides,omitempty"`
}

// The overrides of a manual request (ManualRequest.Overrides): each passes
// one refusal of the start of the swap, and only that one. Written by
// `fleet-role swap --override`, read by the controller, recorded in the
// swap's record (SwapRecord.Overrides) and its result.
const (
	// OverridePause: the swap starts while the controller is paused
	// (Pause).
	OverridePause = "pause"
	// OverrideHolds: the swap starts while a hold is in force (kured's
	// lock, an upgrade plan, a Prometheus alert: Status.Controller.Held).
	OverrideHolds = "holds"
	// OverrideDomains: the swap starts though it leaves a majority of the
	// voters in one failure domain.
	OverrideDomains = "domains"
)

// Overrides lists every override, in the order they are written.
func Overrides() []string { return []string{OverridePause, OverrideHolds, OverrideDomains} }

// NormalOverrides are the overrides each once, the known ones in the
// order of Overrides, then those it does not know as they first came (for
// Validate to name). Nil for none.
func NormalOverrides(overrides []string) []string {
	var out []string
	for _, o := range Overrides() {
		if slices.Contains(overrides, o) {
			out = append(out, o)
		}
	}
	for _, o := range overrides {
		if !slices.Contains(Overrides(), o) && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	return out
}

// Overridden says the request is carried out past the refusal the
// override names.
func (r ManualRequest) Overridden(override string) bool {
	return slices.Contains(r.Overrides, override)
}

// Pause holds every new swap, automatic or manual (a manual one passes
// with OverridePause), while a swap under way goes on to its end: written by
// `fleet-role pause` in PauseKey, deleted by `fleet-role resume`, read by
// the controller and mirrored in Status.Pause.
type Pause struct {
	// V is the format's version (Version when written; 1 when missing).
	V      int       `json:"v"`
	By     string    `json:"by,omitempty"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// Cancel asks the controller to take the swap Swap back: written by
// `fleet-role swap --cancel` in CancelKey, read by the controller.
type Cancel struct {
	// V is the format's version (Version when written; 1 when missing).
	V    int       `json:"v"`
	Swap string    `json:"swap"`
	By   string    `json:"by,omitempty"`
	At   time.Time `json:"at"`
}

// Validate reports the fields that are missing or wrong.
func (c Cancel) Validate() error {
	var errs []error
	if c.Swap == "" {
		errs = append(errs, missing("swap"))
	}
	if c.At.IsZero() {
		errs = append(errs, missing("at"))
	}
	return joinFields(errs)
}

// Validate reports the fields that are missing or wrong.
func (p Pause) Validate() error {
	var errs []error
	if p.Reason == "" {
		errs = append(errs, missing("reason"))
	}
	if p.At.IsZero() {
		errs = append(errs, missing("at"))
	}
	return joinFields(errs)
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
	errs = append(errs, validOverrides(r.Overrides))
	return joinFields(errs)
}

// validOverrides names the overrides that are not one of Overrides.
func validOverrides(overrides []string) error {
	for _, o := range overrides {
		if !slices.Contains(Overrides(), o) {
			return oneOf("overrides", o, Overrides()...)
		}
	}
	return nil
}

// Verdict states (Verdict.State): written by the controller in
// Status.Verdicts, read back by it and by `fleet-role status`.
const (
	VerdictFit     = "fit"
	VerdictUnfit   = "unfit"
	VerdictPartial = "partial" // not yet a full window: no verdict
	VerdictSilent  = "silent"  // no sample for 3 periods
)

// Verdict is the controller's judgement of a host's fitness over a window
// of its probe samples, published in Status.Verdicts.
type Verdict struct {
	State string `json:"state"`
	// Score orders hosts of the same state: higher is worse.
	Score float64 `json:"score"`
	// Samples and Bad count the window's samples and those over a threshold.
	Samples int `json:"samples,omitempty"`
	Bad     int `json:"bad,omitempty"`
	// Figures that led to it: the median of the samples' probe fsync p99
	// and read latencies.
	FsyncP99Ms float64 `json:"fsyncP99Ms,omitempty"`
	RTTMs      float64 `json:"rttMs,omitempty"`
	// WALFsyncP99Ms and BackendCommitP99Ms are a voter's member's own
	// p99s over the window, from its histograms (0 when not judged on
	// them); Writes is the WAL fsyncs they are over.
	WALFsyncP99Ms      float64 `json:"walFsyncP99Ms,omitempty"`
	BackendCommitP99Ms float64 `json:"backendCommitP99Ms,omitempty"`
	Writes             uint64  `json:"writes,omitempty"`
	Reason             string  `json:"reason,omitempty"`
}

// Decision is the automatic decision, swap Out for In, published in
// Status.Decision (also when a dry run only reports it).
type Decision struct {
	Out    string `json:"out"`
	In     string `json:"in"`
	Reason string `json:"reason"`
}

// SwapResult is how a swap ended, kept in Status.Last: the controller
// reads it back for the cooldown and to honour a manual request once.
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
	// By is who asked, for a manual swap.
	By string `json:"by,omitempty"`
	// Overrides are those the swap was started with (SwapRecord.Overrides).
	Overrides []string `json:"overrides,omitempty"`
	// Dead: Out was dead by every sign at the start (SwapRecord.Dead).
	Dead bool `json:"dead,omitempty"`
	// Steps are the steps it went through, in order, each from when it
	// began to when the next did.
	Steps []StepSpan `json:"steps,omitempty"`
	// Writes is what its leadership move and member removal cost the
	// cluster's writes, as the controller timed them; nil when it did not
	// reach them.
	Writes *WriteCost `json:"writes,omitempty"`
}

// WriteCost is what a swap's leadership move and member removal cost the
// cluster's writes: the controller's own small writes (api.WritesLease),
// made one after another through the API while those steps ran.
type WriteCost struct {
	// Writes made, and of them Failed (an error, or no answer within
	// the write's timeout).
	Writes int `json:"writes"`
	Failed int `json:"failed"`
	// LongestGap is the longest time from one write that succeeded (or
	// the timing's start) to the next that succeeded.
	LongestGap Duration `json:"longestGap"`
}

// StepSpan is a step of a swap and how long it lasted.
type StepSpan struct {
	Step  string    `json:"step"`
	Start time.Time `json:"start"`
	// End is when the next step began; zero for the step the swap is at.
	End time.Time `json:"end,omitzero"`
}

// HistoryLength is how many ended swaps Status.History keeps.
const HistoryLength = 20

// Remediation is an automatic swap that completed, kept for the voter it
// put in while the minimum healthy period runs from the swap's start: an
// automatic swap of that voter within it is a retry of the same
// remediation, as Cluster API's KubeadmControlPlane counts one
// (controlplane/kubeadm/internal/controllers/remediation.go,
// checkRetryLimits: the replacement's remediation data, its time that of
// the remediation, its retry count carried over). Written by the
// controller in Status.Remediations at the swap's end, read back by the
// planner.
type Remediation struct {
	// Swap is the ID of the swap; Out the voter it replaced; In the voter
	// it put in.
	Swap string `json:"swap"`
	Out  string `json:"out"`
	In   string `json:"in"`
	// At is the swap's start, the time of the remediation.
	At time.Time `json:"at"`
	// Retry counts the retries of the remediation this swap was: 0 for a
	// first one (its outgoing voter not put in by a remediation within
	// the minimum healthy period), else the previous one's plus one.
	Retry int `json:"retry"`
}

// ControllerState is what governs the controller's decisions, as the
// leading replica stood at its last status: written in Status.Controller,
// read by `fleet-role status`, so that a quiet fleet still says why it is
// quiet.
type ControllerState struct {
	// Leader is the replica that wrote the status.
	Leader string `json:"leader"`
	// DryRun: the automatic decisions are only reported.
	DryRun bool `json:"dryRun"`
	// Window is the maintenance window; nil when it is open always.
	Window *WindowState `json:"window,omitempty"`
	// Holds are the holds watched, each a phrase; HoldsOff those not
	// watched, each saying why (off in the configuration, or its object
	// not found); Held those in force when they were last read.
	Holds    []string `json:"holds,omitempty"`
	HoldsOff []string `json:"holdsOff,omitempty"`
	Held     []string `json:"held,omitempty"`
}

// WindowState is the maintenance window at a pass: its days and times, open
// or not, and when that next changes (nil: never).
type WindowState struct {
	Spec string     `json:"spec"`
	Open bool       `json:"open"`
	Next *time.Time `json:"next,omitempty"`
}

// Domains is how the voters lie across failure domains (the Nodes'
// label Label, topology.kubernetes.io/zone by default): written by the
// controller in Status.Domains every pass, read by `fleet-role status`.
type Domains struct {
	Label string `json:"label"`
	// Voters counts the voters in each domain.
	Voters map[string]int `json:"voters,omitempty"`
	// Span is how many domains hold a voter; Survives how many domains
	// may be lost together, whichever they are, with quorum kept.
	Span     int `json:"span"`
	Survives int `json:"survives"`
	// Unlabelled are the voters without the label: with any, the domains
	// are not told (Span and Survives 0) and no choice weighs them.
	Unlabelled []string `json:"unlabelled,omitempty"`
}

// DeadVoter is a voter dead by every sign the controller has: its agent
// silent, its Node not Ready, its kubelet's last heartbeat older than
// dead_after, and its member named unreachable by every other voter's
// fresh sample. Written by the controller in Status.Dead every pass, read
// by `fleet-role status`.
type DeadVoter struct {
	Node   string `json:"node"`
	Member string `json:"member"`
	// Heartbeat is the kubelet's last heartbeat the controller knows.
	Heartbeat time.Time `json:"heartbeat"`
	// Reason says every sign, as a person reads it.
	Reason string `json:"reason"`
}

// UnfinishedDemotion is a host a swap that ended asked to step down whose
// agent has not reported the finish of its demotion: written by the
// controller in Status.Unfinished every pass, read by `fleet-role
// status`.
type UnfinishedDemotion struct {
	Node string `json:"node"`
	// Swap is the ID of the swap that asked.
	Swap string `json:"swap"`
	// NodeGone: the host's Node was deleted, so nothing is kept on it
	// for its agent and nothing is cleared: the host is named as long as
	// the last swap's result names it and no Node of that name is back.
	// Otherwise the Node keeps the swap's step-down and member-gone until
	// the agent reports the finish, then the controller clears them
	// (ActionClearFinished).
	NodeGone bool `json:"nodeGone,omitempty"`
}

// LastAction is the last action the controller carried out (its type an
// Action* name), and its error, kept in Status.LastAction.
type LastAction struct {
	Type  string    `json:"type"`
	Node  string    `json:"node,omitempty"`
	At    time.Time `json:"at"`
	Error string    `json:"error,omitempty"`
}

// Status is the controller's published status: written by the controller
// in StatusKey every pass, read by `fleet-role status`, `fleet-role swap`,
// `fleet-role plan` and the Ansible role (the swap under way). The controller reads back the fields it wrote:
// the swap under way, the step and since when, the last result and the
// cooldown, and the verdicts.
type Status struct {
	// V is the format's version (Version when written; 1 when missing).
	V      int         `json:"v"`
	Swap   *SwapRecord `json:"swap"`
	Step   string      `json:"step,omitempty"`
	Since  *time.Time  `json:"since,omitempty"`
	Bound  Duration    `json:"bound,omitempty"`
	Reason string      `json:"reason,omitempty"`
	// WaitingOn are the runner pods the swap waits for to finish (at
	// runners-in and runners-out), namespace/name, all of them: each runs
	// one GitHub Actions job. Written by the controller, read by
	// fleet-role status.
	WaitingOn []string `json:"waitingOn,omitempty"`
	// Jobs names the GitHub Actions job each pod of WaitingOn runs, by
	// namespace/name, where its actions-runner-controller EphemeralRunner
	// names one ("owner/repo: job (run N)").
	Jobs          map[string]string  `json:"jobs,omitempty"`
	Last          *SwapResult        `json:"last,omitempty"`
	CooldownUntil *time.Time         `json:"cooldownUntil,omitempty"`
	Verdicts      map[string]Verdict `json:"verdicts,omitempty"`
	Decision      *Decision          `json:"decision,omitempty"`
	Request       *ManualRequest     `json:"request,omitempty"`
	// Pause is the pause in force, if any.
	Pause *Pause `json:"pause,omitempty"`
	// Cancel is the cancel of the swap under way, if any.
	Cancel *Cancel  `json:"cancel,omitempty"`
	Voters []string `json:"voters,omitempty"`
	// Members is the membership each voter lists, by voter.
	Members map[string][]Member `json:"members,omitempty"`
	// Etcd is what each voter's member, and the candidate's while it
	// joins, says of itself in its host's last sample, by host.
	Etcd       map[string]EtcdStatus `json:"etcd,omitempty"`
	LastAction *LastAction           `json:"lastAction,omitempty"`
	// Pending names the hosts of Unfinished. Note: kept as names, as
	// releases before Unfinished wrote it (then the last end's
	// SwapResult.Pending), so that a status of either reads.
	Pending []string `json:"pending,omitempty"`
	// Unfinished are the hosts whose demotion a swap that ended left
	// unfinished, by name.
	Unfinished []UnfinishedDemotion `json:"unfinished,omitempty"`
	// Steps are the steps of the swap under way so far.
	Steps []StepSpan `json:"steps,omitempty"`
	// History are the last swaps that ended, the newest first, at most
	// HistoryLength.
	History []SwapResult `json:"history,omitempty"`
	// Controller is what governs its decisions: the dry run, the window,
	// the holds, and which replica leads.
	Controller *ControllerState `json:"controller,omitempty"`
	// Domains is how the voters lie across failure domains, when a label
	// names them.
	Domains *Domains `json:"domains,omitempty"`
	// Dead are the voters dead by every sign (DeadVoter).
	Dead []DeadVoter `json:"dead,omitempty"`
	// Remediations are the automatic swaps that completed whose minimum
	// healthy period has not run out, one for each voter they put in: the
	// remediation limits' record.
	Remediations []Remediation `json:"remediations,omitempty"`
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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
