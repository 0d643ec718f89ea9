package config

import (
	"bytes"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/fleet-role/fleet-role/api"
)

// Controller is the configuration of `fleet-role controller` and of the
// commands that plan as it does (`fleet-role plan`).
type Controller struct {
	// Version is the format of the file, which this build reads: 1. A
	// file must state it.
	Version int `toml:"version"`
	// DryRun: an automatic decision is only reported; a manual request and
	// a swap under way are still carried out.
	DryRun bool `toml:"dry_run"`
	// Namespace of the regrade Lease and the status ConfigMap.
	Namespace string `toml:"namespace"`
	// Period: a pass runs on each relevant change and at least this often.
	Period time.Duration `toml:"period"`
	// LeaseDuration of the regrade Lease; renewed every pass.
	LeaseDuration time.Duration `toml:"lease_duration"`
	// DeadAfter: a voter whose agent is silent, whose Node is not Ready,
	// whose kubelet has not beaten for this long and whose member every
	// other voter finds unreachable is dead (status, alert
	// FleetRoleVoterDead).
	DeadAfter time.Duration `toml:"dead_after"`
	// ReplaceDeadVoters: a dead voter starts an automatic swap that
	// removes its member first (docs/swap.md, "A dead voter"). Off, it is
	// only reported (status, metric, alert), and a person replaces it with
	// fleet-role swap. The dry run stays the switch of every automatic
	// swap: on, nothing automatic starts either way.
	ReplaceDeadVoters bool `toml:"replace_dead_voters"`
	// RunnersBoundAction is what a swap does once the runners bound ends
	// on the outgoing voter with runner pods still running: "wait" keeps
	// waiting, and says it is past its bound; "drain" goes on to the
	// drain, which evicts them.
	RunnersBoundAction string `toml:"runners_bound_action"`
	// WriteGapBudget is the longest gap between two of the controller's
	// own writes a swap's leadership move and member removal may cost
	// before fleet_role_swaps_over_write_gap_budget_total counts it (and
	// the alert FleetRoleSwapWriteGapOverBudget fires).
	WriteGapBudget time.Duration `toml:"write_gap_budget"`
	// Cooldown between the end of a swap and the start of an automatic one.
	// A manual request does not wait for it.
	Cooldown time.Duration `toml:"cooldown"`
	// ProbePeriod is the agents' probe period. A sample older than two
	// periods is stale; a voter silent for three periods holds every step.
	ProbePeriod time.Duration `toml:"probe_period"`
	// RunnerSelector is a label selector for the GitHub Actions runner
	// pods, which a swap waits for before it drains a node.
	RunnerSelector string `toml:"runner_selector"`
	// MinPassInterval spaces passes however often the cluster changes: one
	// every interval on average, after a burst of a few.
	MinPassInterval time.Duration `toml:"min_pass_interval"`
	// DrainTimeout bounds one drain action; the drain step's own bound
	// is in [bounds].
	DrainTimeout time.Duration `toml:"drain_timeout"`
	// ListenAddress serves /metrics, /healthz and /readyz; empty serves
	// nothing.
	ListenAddress string `toml:"listen_address"`
	// FailureDomainLabel is the Node label naming a host's failure domain
	// (its zone, rack or room): the automatic choice keeps the voters
	// spread across the domains, and a manual swap that would put a
	// majority of them in one is refused unless it overrides it (swap
	// --override domains). Empty: none.
	FailureDomainLabel string            `toml:"failure_domain_label"`
	LeaderElection     LeaderElection    `toml:"leader_election"`
	Verdicts           Verdicts          `toml:"verdicts"`
	MaintenanceWindow  MaintenanceWindow `toml:"maintenance_window"`
	Holds              Holds             `toml:"holds"`
	Notify             Notify            `toml:"notify"`
	Bounds             Bounds            `toml:"bounds"`
	Remediation        Remediation       `toml:"remediation"`
}

// Remediation limits the automatic swaps of a voter put in by an
// automatic swap, as Cluster API's KubeadmControlPlane limits its
// remediation (remediationStrategy: maxRetry, retryPeriod,
// minHealthyPeriod): an automatic swap of a voter that an automatic swap
// put in less than MinHealthyPeriod before is a retry of the same
// remediation; past MaxRetries, automatic swaps stop until that period
// ends, and say why. A manual swap is never limited.
type Remediation struct {
	// MaxRetries is how many retries a remediation may take; -1 is no
	// limit, 0 no retry at all.
	MaxRetries int `toml:"max_retries"`
	// RetryPeriod is the least time from the start of a remediation to
	// the start of its retry (the cooldown applies too).
	RetryPeriod time.Duration `toml:"retry_period"`
	// MinHealthyPeriod: a voter put in by an automatic swap that turns
	// unfit and is swapped within it counts as a retry; after it, its
	// swap is a remediation of its own. It should exceed the cooldown,
	// which spaces every automatic swap anyway.
	MinHealthyPeriod time.Duration `toml:"min_healthy_period"`
}

// Holds are what else holds a swap's start and its disruptive steps (the
// outgoing voter's step-down): kured's reboot lock, a
// system-upgrade-controller Plan applying to a server, or Prometheus
// alerts, as kured holds a reboot for them. kured's lock and the Plans are
// watched by default wherever their object exists (kured's DaemonSet found
// by its label or name, the Plans' CRD installed); "off" turns either off. They
// are read before every disruptive step, so one that begins mid-swap holds
// the next stop of a voter; they never hold a member's removal, a
// rollback, or the steps that change no voter. A swap --override holds passes them
// at the start only. A hold that cannot be read holds, and says why.
type Holds struct {
	// KuredDaemonSet is kured's DaemonSet, "namespace/name" (kured's
	// --ds-namespace and --ds-name): while its lock annotation names a
	// holder whose TTL has not run out, a node is rebooting or about to.
	// Empty (the default): found by itself, a DaemonSet labelled
	// app.kubernetes.io/name=kured (kured's Helm chart) or named kured
	// (kured's manifests), its --lock-annotation and --concurrency read
	// from it where it sets them; no hold while none is found. "off": no
	// hold.
	KuredDaemonSet string `toml:"kured_daemonset"`
	// KuredLockAnnotation is kured's --lock-annotation.
	KuredLockAnnotation string `toml:"kured_lock_annotation"`
	// KuredLockTTL: while a swap runs, the controller holds kured's lock
	// itself, in kured's own format, with this TTL, renewed as the swap
	// goes on; a controller gone for good mid-swap leaves kured a lock
	// that runs out.
	KuredLockTTL time.Duration `toml:"kured_lock_ttl"`
	// KuredConcurrency is kured's --concurrency: above 1, kured keeps
	// several holders in its lock, and the controller takes every place.
	KuredConcurrency int `toml:"kured_concurrency"`
	// UpgradePlansNamespace is the system-upgrade-controller's namespace:
	// while a Plan in it is applying to a Node of the fleet (a server or a
	// standby), that Node is being upgraded. Empty (the default): the
	// Plans of every namespace, while the CRD plans.upgrade.cattle.io is
	// installed (no hold while it is not). "off": no hold.
	UpgradePlansNamespace string `toml:"upgrade_plans_namespace"`
	// PrometheusURL: while an alert is active there, as kured's
	// --prometheus-url, filtered as its --alert-filter-regexp,
	// --alert-filter-match-only and --alert-firing-only filter. Empty: no
	// hold.
	PrometheusURL string `toml:"prometheus_url"`
	// AlertFilterRegexp: alerts whose name it matches do not hold (or,
	// with alert_filter_match_only, only they do). Empty: every alert.
	AlertFilterRegexp    string `toml:"alert_filter_regexp"`
	AlertFilterMatchOnly bool   `toml:"alert_filter_match_only"`
	// AlertFiringOnly: pending alerts do not hold.
	AlertFiringOnly bool `toml:"alert_firing_only"`
	// AlertIgnoreRegexp: alerts whose name it matches never hold, before
	// the filter: by default kube-prometheus's Watchdog and InfoInhibitor,
	// which fire always, and fleet-role's own alerts, which a swap answers.
	// Empty: none is ignored.
	AlertIgnoreRegexp string `toml:"alert_ignore_regexp"`
	// AlertIgnoreOutgoing: an alert about the voter a swap would take out
	// does not hold that swap: one whose node label is its Node's name, or
	// whose instance label (less its port) is its Node's name or its etcd
	// address (k3s's etcd.k3s.cattle.io/node-address). An alert over the
	// whole cluster (etcdMembersDown, etcdInsufficientMembers) names no
	// member and still holds.
	AlertIgnoreOutgoing bool `toml:"alert_ignore_outgoing"`
}

// HoldOff turns off a hold that is on by default (holds.kured_daemonset,
// holds.upgrade_plans_namespace).
const HoldOff = "off"

// DefaultAlertIgnoreRegexp is holds.alert_ignore_regexp's default.
const DefaultAlertIgnoreRegexp = "^(Watchdog|InfoInhibitor|FleetRole.*)$"

// Notify is where a swap's start, end, rollback, abandon and stuck, a
// dry run's decision, and a pause and its resume are told, by shoutrrr
// URLs (as kured's --notify-url): "generic://host/path" for a webhook,
// "slack://…", "teams://…", "smtp://…" and the rest of shoutrrr's
// services. A message that fails to send is tried again, after a backoff
// that doubles up to a limit; the messages not sent yet are kept in the
// status ConfigMap, so that a restart sends them.
type Notify struct {
	// URLs are written here; a URL with a token in it belongs in URLsFile.
	URLs []string `toml:"urls"`
	// URLsFile is a file of more URLs, one a line (a mounted Secret, say);
	// blank lines and lines starting with "#" are skipped.
	URLsFile string `toml:"urls_file"`
	// RetryBackoff is the wait after a URL's first failed send before its
	// next; each failure after doubles it.
	RetryBackoff time.Duration `toml:"retry_backoff"`
	// MaxRetryBackoff is the longest wait between two sends to a URL.
	MaxRetryBackoff time.Duration `toml:"max_retry_backoff"`
	// MaxQueued is how many messages (one for each URL) may wait to be
	// sent; past it the oldest is dropped, and counted.
	MaxQueued int `toml:"max_queued"`
}

// DefaultKuredLockAnnotation is kured's default --lock-annotation.
const DefaultKuredLockAnnotation = "weave.works/kured-node-lock"

// MaintenanceWindow is when an automatic swap may start, as kured's
// --reboot-days, --start-time, --end-time and --time-zone give its reboot
// window. A swap started inside goes on outside; a manual swap starts at
// any time. The defaults (every day, 00:00 to 00:00) are open always.
type MaintenanceWindow struct {
	// Days are the days the window opens on: "mon" to "sun"; none listed
	// is every day.
	Days []string `toml:"days"`
	// Start is the time of day it opens, "HH:MM".
	Start string `toml:"start"`
	// End is the time of day it closes, "HH:MM": before Start, it closes
	// the next day; equal to Start, it is open the whole day.
	End string `toml:"end"`
	// TimeZone is the IANA name of the clock Start and End are read on.
	TimeZone string `toml:"time_zone"`
}

var weekdays = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// Parse reads the window: its days by time.Weekday, its start and end
// since midnight, and its time zone.
func (m MaintenanceWindow) Parse() (days [7]bool, start, end time.Duration, loc *time.Location, err error) {
	for _, d := range m.Days {
		i := slices.Index(weekdays, strings.ToLower(d))
		if i < 0 {
			return days, 0, 0, nil, fmt.Errorf("%q is not a day: want one of %s", d, strings.Join(weekdays, ", "))
		}
		days[i] = true
	}
	if start, err = timeOfDay(m.Start); err != nil {
		return days, 0, 0, nil, err
	}
	if end, err = timeOfDay(m.End); err != nil {
		return days, 0, 0, nil, err
	}
	if loc, err = time.LoadLocation(m.TimeZone); err != nil {
		return days, 0, 0, nil, fmt.Errorf("time zone %q: %v", m.TimeZone, err)
	}
	return days, start, end, loc, nil
}

// timeOfDay reads "HH:MM" as the time since midnight.
func timeOfDay(s string) (time.Duration, error) {
	t, err := time.Parse("15:04", s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a time of day such as \"02:30\"", s)
	}
	return time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute, nil
}

// Verdicts is how a host's fitness is judged over a window of its probe
// samples, and the one place that sets the fitness limits: a voter is
// unfit when its etcd's own WAL fsync or backend commit p99 over the
// window is over its limit; any host when most samples are bad (a read
// over its limit, unhealthy, or an error; for a standby, the probe's fsync
// p99 over its limit); no verdict on a partial window; silent after 3
// probe periods without one. The automatic decision swaps the worst unfit
// voter for the fittest eligible standby.
type Verdicts struct {
	// Window is the number of samples a verdict needs; fewer is a partial
	// window, with no verdict. The default is 25 minutes at a 60s period.
	Window int `toml:"window"`
	// FsyncLimit: a standby's sample whose probe fsync p99 (over its last
	// writes) is over it is bad. etcd's own disk guidance: WAL fsync p99
	// under 10 ms.
	FsyncLimit time.Duration `toml:"fsync_limit"`
	// WALFsyncP99Limit and BackendCommitP99Limit: a voter whose etcd's own
	// p99 of etcd_disk_wal_fsync_duration_seconds or
	// etcd_disk_backend_commit_duration_seconds over the window is over
	// it is unfit (etcd's guidance: under 10 ms and 25 ms). A window of
	// fewer than 100 writes is not judged on them.
	WALFsyncP99Limit      time.Duration `toml:"wal_fsync_p99_limit"`
	BackendCommitP99Limit time.Duration `toml:"backend_commit_p99_limit"`
	// ReadLimit: a sample whose linearizable read took longer is bad.
	ReadLimit time.Duration `toml:"read_limit"`
}

// LeaderElection is the controller replicas' election, on a Lease of its
// own in the namespace (not the regrade Lease): one replica acts, the
// others wait. client-go's leader election runs it, with retry_period <
// renew_deadline < lease_duration.
type LeaderElection struct {
	// Lease is the name of the election's Lease.
	Lease string `toml:"lease"`
	// LeaseDuration is how long the other replicas wait, from the
	// leader's last renewal, before they may take the Lease.
	LeaseDuration time.Duration `toml:"lease_duration"`
	// RenewDeadline is how long the leader tries to renew the Lease before
	// it gives up leadership.
	RenewDeadline time.Duration `toml:"renew_deadline"`
	// RetryPeriod is how long a replica waits between its tries to take or
	// renew the Lease.
	RetryPeriod time.Duration `toml:"retry_period"`
}

// Bounds are the swap steps' own bounds; a swap's whole wait is their sum
// (with runners_bound_action "drain"; "wait" may wait on runners longer).
// docs/swap.md has the steps and what happens past each bound.
type Bounds struct {
	// Snapshot: an etcd snapshot from a healthy voter other than the
	// outgoing one. Past it: abandon.
	Snapshot time.Duration `toml:"snapshot"`
	// Runners: runner pods finishing on the candidate (past it: abandon)
	// and on the outgoing voter (past it: runners_bound_action).
	Runners time.Duration `toml:"runners"`
	// Drain: evictions on the candidate (past it: abandon) and on the
	// outgoing voter (past it: go on).
	Drain time.Duration `toml:"drain"`
	// Promote: the candidate's agent answering the promotion. Past it:
	// roll back.
	Promote time.Duration `toml:"promote"`
	// Join: the candidate voting. Past it: roll back. k3s's etcd leader
	// tries to promote each learner every 15 s (manageTickerTime), which
	// etcd allows once the learner is in sync, and removes one whose
	// applied index has not grown for 5 minutes (learnerMaxStallTime; one
	// whose etcd never started has no index to grow): a join takes its
	// catch-up and up to 15 s more, and a learner that stalls is gone 5 to
	// 5.5 minutes after it was added. So join is at least 15 s; the
	// default gives a large datastore's catch-up its time, and past 5.5
	// minutes a stalled learner was removed before the rollback.
	Join time.Duration `toml:"join"`
	// Gates: the gates with one more voter. Past it the swap still holds,
	// and says so.
	Gates time.Duration `toml:"gates"`
	// StepDown: the outgoing voter's step-down. Past it: go on to the
	// removal.
	StepDown time.Duration `toml:"step_down"`
	// RemoveMember: the removal of the outgoing voter's member, held while
	// the remaining voters that vote are no majority of the members with
	// it (a voter only slow votes; one silent does not: Ready, but its
	// agent writes nothing, as one that cannot reach the API). Past it the
	// swap still holds, names them, and says it is past its bound.
	RemoveMember time.Duration `toml:"remove_member"`
	// MemberGone: a demoted host (the outgoing voter, or a rolled-back
	// candidate) finishing its demotion. Past it: clean up anyway and end,
	// the host's step-down and member-gone kept on its Node until its
	// agent reports the finish.
	MemberGone time.Duration `toml:"member_gone"`
	// Uncordon: the outgoing host Ready again. Past it: end pending.
	Uncordon time.Duration `toml:"uncordon"`
	// Rollback: the candidate's step-down in a rollback. Past it: go on.
	Rollback time.Duration `toml:"rollback"`
	// RemoveFallback: how long k3s is given to remove a rolled-back
	// candidate's member before a voter's agent is asked to. k3s's member
	// controller removes a member within seconds when its Node names it.
	// A learner that never started has no name: k3s's learner manager
	// removes it only 5 to 5.5 minutes after it was added, so the agent is
	// asked at once for it, with no wait for k3s.
	RemoveFallback time.Duration `toml:"remove_fallback"`
	// RemoveByVoter: how long that agent is given before the swap stops
	// stuck, for an operator.
	RemoveByVoter time.Duration `toml:"remove_by_voter"`
}

// k3sLearnerTick is how often k3s's etcd leader tries to promote each
// learner (k3s-io/k3s pkg/etcd/etcd.go: manageTickerTime, manageLearners).
const k3sLearnerTick = 15 * time.Second

// What a swap does past the runners bound on the outgoing voter
// (Controller.RunnersBoundAction).
const (
	RunnersBoundWait  = "wait"
	RunnersBoundDrain = "drain"
)

// DefaultController returns the controller configuration used where a file
// is silent.
func DefaultController() Controller {
	return Controller{
		Version:        Version,
		DryRun:         true,
		Namespace:      api.Namespace,
		Period:         10 * time.Second,
		LeaseDuration:  time.Minute,
		WriteGapBudget: 5 * time.Second,
		DeadAfter:      5 * time.Minute,
		// Note: the removal of a dead voter's member cannot be undone, and
		// a host rebooted by hand with no cordon looks dead; a person
		// opts in (docs/swap.md, "A dead voter").
		ReplaceDeadVoters: false,
		// Note: GitHub lets a job run 6 hours; a drain kills it. Waiting
		// costs no failure etcd survives: the outgoing voter still votes.
		RunnersBoundAction: RunnersBoundWait,
		Cooldown:           6 * time.Hour,
		ProbePeriod:        time.Minute,
		RunnerSelector:     "app.kubernetes.io/component=runner",
		MinPassInterval:    100 * time.Millisecond,
		DrainTimeout:       30 * time.Second,
		ListenAddress:      ":9090",
		// Kubernetes's well-known label of a Node's zone.
		FailureDomainLabel: "topology.kubernetes.io/zone",
		LeaderElection: LeaderElection{
			Lease:         api.LeaderElectionLease,
			LeaseDuration: 15 * time.Second,
			RenewDeadline: 10 * time.Second,
			RetryPeriod:   2 * time.Second,
		},
		Verdicts: Verdicts{Window: 25, FsyncLimit: 10 * time.Millisecond, ReadLimit: 100 * time.Millisecond,
			WALFsyncP99Limit: 10 * time.Millisecond, BackendCommitP99Limit: 25 * time.Millisecond},
		MaintenanceWindow: MaintenanceWindow{Days: []string{"mon", "tue", "wed", "thu", "fri", "sat", "sun"}, Start: "00:00", End: "00:00", TimeZone: "UTC"},
		Holds: Holds{KuredLockAnnotation: DefaultKuredLockAnnotation, KuredLockTTL: 30 * time.Minute, KuredConcurrency: 1,
			AlertIgnoreRegexp: DefaultAlertIgnoreRegexp, AlertIgnoreOutgoing: true},
		Notify:      Notify{URLs: []string{}, RetryBackoff: 5 * time.Second, MaxRetryBackoff: 5 * time.Minute, MaxQueued: 100},
		Remediation: Remediation{MaxRetries: 2, MinHealthyPeriod: 24 * time.Hour},
		Bounds: Bounds{
			Snapshot: 10 * time.Minute,
			Runners:  time.Hour,
			Drain:    15 * time.Minute,
			Promote:  10 * time.Minute,
			Join:     10 * time.Minute,
			Gates:    15 * time.Minute,
			StepDown: 5 * time.Minute,
			// Note: the outgoing voter is stopped meanwhile; the cluster
			// has no fault tolerance to spare until its member goes.
			RemoveMember: 10 * time.Minute,
			MemberGone:   15 * time.Minute,
			Uncordon:     15 * time.Minute,
			Rollback:     5 * time.Minute,
			// Note: k3s's member controller removes a member within seconds
			// when it can at all; its own leader removes a learner stalled
			// for 5 minutes (pkg/etcd/etcd.go, learnerMaxStallTime), so the
			// fallback comes before that.
			RemoveFallback: 2 * time.Minute,
			RemoveByVoter:  5 * time.Minute,
		},
	}
}

// LoadController reads, strictly decodes and validates a controller
// configuration file. Errors wrap ErrInvalid and name the key.
func LoadController(path string) (Controller, error) {
	data, err := ReadFile(path)
	if err != nil {
		return Controller{}, err
	}
	return ParseController(data)
}

// ParseController strictly decodes and validates a controller configuration.
func ParseController(data []byte) (Controller, error) {
	c := DefaultController()
	c.Version = 0
	if err := decodeStrict(data, &c); err != nil {
		return Controller{}, err
	}
	if err := c.Validate(); err != nil {
		return Controller{}, err
	}
	return c, nil
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// Validate reports every problem at once, each naming its key.
func (c Controller) Validate() error {
	var p problems
	if c.Version != Version {
		p.add("version", "must be %d, got %d", Version, c.Version)
	}
	if !dnsLabel.MatchString(c.Namespace) {
		p.add("namespace", "%q is not a valid namespace name", c.Namespace)
	}
	positive(&p, "period", c.Period)
	positive(&p, "lease_duration", c.LeaseDuration)
	positive(&p, "write_gap_budget", c.WriteGapBudget)
	positive(&p, "dead_after", c.DeadAfter)
	if c.RunnersBoundAction != RunnersBoundWait && c.RunnersBoundAction != RunnersBoundDrain {
		p.add("runners_bound_action", "must be %q or %q, got %q", RunnersBoundWait, RunnersBoundDrain, c.RunnersBoundAction)
	}
	positive(&p, "probe_period", c.ProbePeriod)
	if c.Cooldown < 0 {
		p.add("cooldown", "must not be negative, got %s", c.Cooldown)
	}
	if c.LeaseDuration > 0 && c.Period > 0 && c.LeaseDuration < 2*c.Period {
		p.add("lease_duration", "must be at least twice the period (%s), got %s", c.Period, c.LeaseDuration)
	}
	if c.MinPassInterval < 0 || c.MinPassInterval > c.Period {
		p.add("min_pass_interval", "must be between 0s and the period (%s), got %s", c.Period, c.MinPassInterval)
	}
	positive(&p, "drain_timeout", c.DrainTimeout)
	if _, _, err := net.SplitHostPort(c.ListenAddress); err != nil && c.ListenAddress != "" {
		p.add("listen_address", "%q is not host:port: %v", c.ListenAddress, err)
	}
	if l := c.FailureDomainLabel; l != "" {
		if errs := validation.IsQualifiedName(l); len(errs) > 0 {
			p.add("failure_domain_label", "%q is not a label key: %s", l, strings.Join(errs, "; "))
		}
	}
	le := c.LeaderElection
	if !dnsLabel.MatchString(le.Lease) {
		p.add("leader_election.lease", "%q is not a valid Lease name", le.Lease)
	} else if le.Lease == api.LeaseName {
		p.add("leader_election.lease", "must not be the regrade Lease %q", api.LeaseName)
	}
	positive(&p, "leader_election.retry_period", le.RetryPeriod)
	if !(le.RetryPeriod < le.RenewDeadline && le.RenewDeadline < le.LeaseDuration) {
		p.add("leader_election", "want retry_period < renew_deadline < lease_duration, got %s, %s, %s", le.RetryPeriod, le.RenewDeadline, le.LeaseDuration)
	}
	if c.Verdicts.Window < 1 {
		p.add("verdicts.window", "must be at least 1 sample, got %d", c.Verdicts.Window)
	}
	positive(&p, "verdicts.fsync_limit", c.Verdicts.FsyncLimit)
	positive(&p, "verdicts.wal_fsync_p99_limit", c.Verdicts.WALFsyncP99Limit)
	positive(&p, "verdicts.backend_commit_p99_limit", c.Verdicts.BackendCommitP99Limit)
	if _, _, _, _, err := c.MaintenanceWindow.Parse(); err != nil {
		p.add("maintenance_window", "%v", err)
	}
	positive(&p, "verdicts.read_limit", c.Verdicts.ReadLimit)
	c.Holds.validate(&p)
	if _, err := labels.Parse(c.RunnerSelector); err != nil || c.RunnerSelector == "" {
		p.add("runner_selector", "%q is not a label selector: %v", c.RunnerSelector, err)
	}
	if r := c.Remediation; r.MaxRetries < -1 {
		p.add("remediation.max_retries", "must be -1 (no limit) or more, got %d", r.MaxRetries)
	}
	if c.Remediation.RetryPeriod < 0 {
		p.add("remediation.retry_period", "must not be negative, got %s", c.Remediation.RetryPeriod)
	}
	positive(&p, "remediation.min_healthy_period", c.Remediation.MinHealthyPeriod)
	n := c.Notify
	positive(&p, "notify.retry_backoff", n.RetryBackoff)
	if n.MaxRetryBackoff < n.RetryBackoff {
		p.add("notify.max_retry_backoff", "must be at least retry_backoff (%s), got %s", n.RetryBackoff, n.MaxRetryBackoff)
	}
	if n.MaxQueued < 1 {
		p.add("notify.max_queued", "must be at least 1 message, got %d", n.MaxQueued)
	}
	b := c.Bounds
	if b.Join > 0 && b.Join < k3sLearnerTick {
		p.add("bounds.join", "must be at least k3s's learner tick, %s, at which alone it promotes a learner; got %s", k3sLearnerTick, b.Join)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{
		{"snapshot", b.Snapshot}, {"runners", b.Runners}, {"drain", b.Drain}, {"promote", b.Promote},
		{"join", b.Join}, {"gates", b.Gates}, {"step_down", b.StepDown}, {"remove_member", b.RemoveMember}, {"member_gone", b.MemberGone},
		{"uncordon", b.Uncordon}, {"rollback", b.Rollback}, {"remove_fallback", b.RemoveFallback},
		{"remove_by_voter", b.RemoveByVoter},
	} {
		positive(&p, "bounds."+d.key, d.v)
	}
	return p.err()
}

func (h Holds) validate(p *problems) {
	if h.KuredDaemonSet != HoldOff {
		if ns, name, ok := strings.Cut(h.KuredDaemonSet, "/"); h.KuredDaemonSet != "" && (!ok || !dnsLabel.MatchString(ns) || name == "") {
			p.add("holds.kured_daemonset", "%q is not \"namespace/name\", \"\" (found by itself) or %q", h.KuredDaemonSet, HoldOff)
		}
		if h.KuredLockAnnotation == "" {
			p.add("holds.kured_lock_annotation", "must name kured's lock annotation")
		}
		positive(p, "holds.kured_lock_ttl", h.KuredLockTTL)
		if h.KuredConcurrency < 1 {
			p.add("holds.kured_concurrency", "must be at least 1, got %d", h.KuredConcurrency)
		}
	}
	if n := h.UpgradePlansNamespace; n != "" && n != HoldOff && !dnsLabel.MatchString(n) {
		p.add("holds.upgrade_plans_namespace", "%q is not a valid namespace name, \"\" (every namespace) or %q", n, HoldOff)
	}
	if h.PrometheusURL != "" {
		if u, err := url.Parse(h.PrometheusURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			p.add("holds.prometheus_url", "%q is not an http(s) URL", h.PrometheusURL)
		}
	}
	if _, err := regexp.Compile(h.AlertFilterRegexp); err != nil {
		p.add("holds.alert_filter_regexp", "%v", err)
	}
	if _, err := regexp.Compile(h.AlertIgnoreRegexp); err != nil {
		p.add("holds.alert_ignore_regexp", "%v", err)
	}
}

// KuredDaemonSetName splits holds.kured_daemonset; both are empty when it
// is empty (found by itself) or "off".
func (h Holds) KuredDaemonSetName() (namespace, name string) {
	if h.KuredDaemonSet == HoldOff {
		return "", ""
	}
	ns, n, _ := strings.Cut(h.KuredDaemonSet, "/")
	return ns, n
}

// KuredOff says kured's lock is not watched (holds.kured_daemonset "off").
func (h Holds) KuredOff() bool { return h.KuredDaemonSet == HoldOff }

// UpgradesOff says the Plans are not watched
// (holds.upgrade_plans_namespace "off").
func (h Holds) UpgradesOff() bool { return h.UpgradePlansNamespace == HoldOff }

func positive(p *problems, key string, d time.Duration) {
	if d <= 0 {
		p.add(key, "must be a positive duration such as \"90s\", got %s", d)
	}
}

var controllerTemplate = template.Must(template.New("controller").Funcs(template.FuncMap{"d": FormatDuration}).Parse(
	`# fleet-role controller configuration.
# Every key but version is optional; the values below are the defaults.
# Durations are strings: "90s", "15m", "6h".

# The format of this file.
version = {{.Version}}

# Dry run: a manual request ("fleet-role swap OUT IN") is carried out, an
# automatic decision is only reported. A swap under way is always finished.
dry_run = {{.DryRun}}

# Namespace of the regrade Lease and the fleet-role-status ConfigMap.
namespace = "{{.Namespace}}"

# A pass runs on every relevant change, and at least this often.
period = "{{d .Period}}"

# Duration of the regrade Lease; every pass of a swap renews it.
lease_duration = "{{d .LeaseDuration}}"

# Least time from the end of a swap to the start of an automatic one.
# A manual request does not wait for it.
cooldown = "{{d .Cooldown}}"

# The longest gap between two of the controller's own writes a swap's
# leadership move and member removal may cost before the swap is counted
# over budget (fleet_role_swaps_over_write_gap_budget_total, and the alert
# FleetRoleSwapWriteGapOverBudget). k3s's etcd elects a new leader within
# its 5s election timeout.
write_gap_budget = "{{d .WriteGapBudget}}"

# A voter is dead when its agent is silent, its Node not Ready, its
# kubelet has not beaten for this long, and every other voter finds its
# etcd member unreachable: status names it, the alert FleetRoleVoterDead
# fires. The node lifecycle controller marks a Node Unknown after 50s
# (node-monitor-grace-period, Kubernetes's default since v1.32).
dead_after = "{{d .DeadAfter}}"

# A dead voter starts an automatic swap that removes its member for good,
# then promotes a standby. Off, it is only reported (status, the metric
# fleet_role_dead_voters, the alert FleetRoleVoterDead) and fleet-role swap
# replaces it by hand. A voter under maintenance is never dead: cordoned by
# someone other than fleet-role, annotated fleet-role.io/maintenance, or
# holding kured's reboot lock. With dry_run on, no automatic swap starts
# either way.
replace_dead_voters = {{.ReplaceDeadVoters}}

# What a swap does when the runners bound ([bounds] runners) ends with
# runner pods still running on the outgoing voter: "wait" keeps waiting
# (GitHub lets a job run 6 hours) and says it is past its bound; "drain"
# goes on to the drain, which kills their jobs.
runners_bound_action = "{{.RunnersBoundAction}}"

# The agents' probe period. A sample older than two periods is stale; a
# voter silent for three periods holds every step.
probe_period = "{{d .ProbePeriod}}"

# Label selector of the GitHub Actions runner pods, which a swap waits for
# before it drains a node.
runner_selector = "{{.RunnerSelector}}"

# Passes, however often the cluster changes, are one every interval on
# average, after a burst of a few at once.
min_pass_interval = "{{d .MinPassInterval}}"

# How long one drain action waits for its evictions; the drain step has
# its own bound below.
drain_timeout = "{{d .DrainTimeout}}"

# Serves /metrics (Prometheus), /healthz and /readyz.
listen_address = "{{.ListenAddress}}"

# The Node label naming a host's failure domain (zone, rack, room): the
# automatic choice keeps the voters spread across the domains, and a
# manual swap that would put a majority of them in one is refused unless
# swap --override domains. Empty: none. With a voter unlabelled, domains are not weighed.
failure_domain_label = "{{.FailureDomainLabel}}"

# Replicas elect one to act, on a Lease of their own in the namespace.
[leader_election]
lease = "{{.LeaderElection.Lease}}"
lease_duration = "{{d .LeaderElection.LeaseDuration}}"
renew_deadline = "{{d .LeaderElection.RenewDeadline}}"
retry_period = "{{d .LeaderElection.RetryPeriod}}"

# A host's verdict, over its last window of probe samples, and the one place
# the fitness limits are set: a voter is unfit when its etcd's own WAL fsync
# or backend commit p99 over the window (from its metrics; not judged on
# fewer than 100 writes) is over its limit; any host when most samples are
# bad (a read over read_limit, unhealthy, or an error; for a standby, the
# probe's fsync p99 over fsync_limit); no verdict on a partial window;
# silent after 3 probe periods without one.
# The automatic decision swaps the worst unfit voter for the fittest
# eligible standby. The default window is 25 minutes at a 60s period.
[verdicts]
window = {{.Verdicts.Window}}
fsync_limit = "{{d .Verdicts.FsyncLimit}}"
wal_fsync_p99_limit = "{{d .Verdicts.WALFsyncP99Limit}}"
backend_commit_p99_limit = "{{d .Verdicts.BackendCommitP99Limit}}"
read_limit = "{{d .Verdicts.ReadLimit}}"

# When an automatic swap may start, as kured's reboot window: on these days,
# from start to end on the clock of time_zone (an end before the start
# closes the next day; an end equal to the start is the whole day). A swap
# started inside goes on outside; a manual swap starts at any time.
[maintenance_window]
days = [{{range $i, $d := .MaintenanceWindow.Days}}{{if $i}}, {{end}}"{{$d}}"{{end}}]
start = "{{.MaintenanceWindow.Start}}"
end = "{{.MaintenanceWindow.End}}"
time_zone = "{{.MaintenanceWindow.TimeZone}}"

# One disruption at a time: what else holds a swap's start and its
# disruptive steps (the outgoing voter's step-down), read before each, so
# that one beginning mid-swap holds the next stop of a voter; never a
# member's removal nor a rollback. swap --override holds passes them at the start
# only; a hold that cannot be read holds. kured_daemonset: kured's
# DaemonSet, "namespace/name"; "" (the default) finds it by itself (labelled
# app.kubernetes.io/name=kured, or named kured), no hold while none is;
# "off" turns it off. While kured's reboot lock is held, it holds; and while
# a swap runs, the controller holds that lock itself, in kured's format,
# with kured_lock_ttl (renewed as the swap goes on) and, for kured's
# --concurrency above 1, kured_concurrency places.
# upgrade_plans_namespace: while a system-upgrade-controller Plan there
# is applying to a server or a standby; "" (the default) is every
# namespace, no hold while the CRD plans.upgrade.cattle.io is not
# installed; "off" turns it off. prometheus_url (off while empty): while an
# alert is active there, filtered as
# kured's --alert-filter-regexp, --alert-filter-match-only and
# --alert-firing-only filter; alert_ignore_regexp's alerts never hold
# (kube-prometheus's always-firing Watchdog and InfoInhibitor, fleet-role's
# own; "" for none), and with alert_ignore_outgoing an alert about the
# voter a swap would take out (its node, or its instance's host the Node's
# name or etcd address) does not hold that swap.
[holds]
kured_daemonset = "{{.Holds.KuredDaemonSet}}"
kured_lock_annotation = "{{.Holds.KuredLockAnnotation}}"
kured_lock_ttl = "{{d .Holds.KuredLockTTL}}"
kured_concurrency = {{.Holds.KuredConcurrency}}
upgrade_plans_namespace = "{{.Holds.UpgradePlansNamespace}}"
prometheus_url = "{{.Holds.PrometheusURL}}"
alert_filter_regexp = "{{.Holds.AlertFilterRegexp}}"
alert_filter_match_only = {{.Holds.AlertFilterMatchOnly}}
alert_firing_only = {{.Holds.AlertFiringOnly}}
alert_ignore_regexp = "{{.Holds.AlertIgnoreRegexp}}"
alert_ignore_outgoing = {{.Holds.AlertIgnoreOutgoing}}

# Where a swap's start, end, rollback, abandon and stuck, a dry run's
# decision, and a pause and its resume are told: shoutrrr URLs, as kured's
# --notify-url ("generic://host/path" posts to a webhook; "slack://…",
# "teams://…", "smtp://…"). A URL with a token in it belongs in urls_file,
# one URL a line, a mounted Secret, say. A send that fails is tried again
# after retry_backoff, doubled at each failure up to max_retry_backoff;
# the messages not sent yet, at most max_queued (the oldest dropped past
# it), are kept in the status ConfigMap, so that a restart sends them.
[notify]
urls = []
urls_file = "{{.Notify.URLsFile}}"
retry_backoff = "{{d .Notify.RetryBackoff}}"
max_retry_backoff = "{{d .Notify.MaxRetryBackoff}}"
max_queued = {{.Notify.MaxQueued}}

# Limits on remediating again, as Cluster API's KubeadmControlPlane limits
# its remediation: an automatic swap of a voter an automatic swap put in
# less than min_healthy_period before is a retry of that remediation, and
# waits retry_period from its start; past max_retries retries (-1: no
# limit), automatic swaps stop until min_healthy_period has passed, and
# fleet-role status says why. A manual swap is never limited.
[remediation]
max_retries = {{.Remediation.MaxRetries}}
retry_period = "{{d .Remediation.RetryPeriod}}"
min_healthy_period = "{{d .Remediation.MinHealthyPeriod}}"

# Each step's own bound. A swap's whole wait is their sum, but with
# runners_bound_action = "wait", which waits on the runners past theirs.
[bounds]
# An etcd snapshot from a healthy voter other than the outgoing one.
# Past it: abandon.
snapshot = "{{d .Bounds.Snapshot}}"
# Runner pods finishing on the candidate (past it: abandon) and on the
# outgoing voter (past it: runners_bound_action).
runners = "{{d .Bounds.Runners}}"
# Evictions on the candidate (abandon) and on the outgoing voter (go on).
drain = "{{d .Bounds.Drain}}"
# The candidate's agent answering the promotion. Past it: roll back.
promote = "{{d .Bounds.Promote}}"
# The candidate voting. Past it: roll back. k3s promotes a learner in sync
# at its 15 s tick and removes one stalled for 5 minutes: at least 15s.
join = "{{d .Bounds.Join}}"
# The gates with one more voter. Past it the swap still holds, and says so.
gates = "{{d .Bounds.Gates}}"
# The outgoing voter's step-down. Past it: go on to the removal.
step_down = "{{d .Bounds.StepDown}}"
# The removal of the outgoing voter's member, held while the remaining
# voters that vote are no majority of the members with it (a slow voter
# votes; a silent one does not). Past it the swap still holds, names them,
# and says so.
remove_member = "{{d .Bounds.RemoveMember}}"
# A demoted host (the outgoing voter, or a rolled-back candidate) finishing
# its demotion. Past it: clean up anyway and end, the host's step-down and
# member-gone kept on its Node until its agent reports the finish.
member_gone = "{{d .Bounds.MemberGone}}"
# The outgoing host Ready again. Past it: end pending.
uncordon = "{{d .Bounds.Uncordon}}"
# The candidate's step-down in a rollback. Past it: go on.
rollback = "{{d .Bounds.Rollback}}"
# k3s removing the rolled-back candidate's member (its member controller
# cannot when the candidate's server never came up). Past it: a healthy
# voter's agent is asked to remove the member with its etcd client; at
# once for a learner that never started, which no Node names.
remove_fallback = "{{d .Bounds.RemoveFallback}}"
# That voter's agent removing it. Past it, or when it fails: the swap stops
# "stuck", the Lease held, and "fleet-role status" gives the command that
# removes the member by hand; the rollback goes on once it is gone.
remove_by_voter = "{{d .Bounds.RemoveByVoter}}"
`))

// DefaultControllerTOML is the commented default controller configuration.
func DefaultControllerTOML() []byte {
	var b bytes.Buffer
	if err := controllerTemplate.Execute(&b, DefaultController()); err != nil {
		panic(fmt.Sprintf("render the default controller configuration: %v", err))
	}
	return b.Bytes()
}

// FormatDuration writes a duration the way a person would, and as the
// configuration's defaults are written: "90s", "15m", "6h".
func FormatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}
