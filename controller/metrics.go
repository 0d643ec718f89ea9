package controller

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// metrics are the controller's Prometheus metrics.
type metrics struct {
	step        *prometheus.GaugeVec
	stepSeconds prometheus.Gauge
	actions     *prometheus.CounterVec
	failures    *prometheus.CounterVec
	passes      prometheus.Histogram
	reaction    prometheus.Histogram
	voters      prometheus.Gauge
	tolerates   prometheus.Gauge
	leader      prometheus.Gauge
	verdicts    *prometheus.GaugeVec
	dryRun      *prometheus.CounterVec
	wouldSwap   prometheus.Gauge
	unfinished  prometheus.Gauge
	spent       prometheus.Gauge
	dead        prometheus.Gauge
	stepTook    *prometheus.HistogramVec
	writeGap    prometheus.Gauge
	overBudget  prometheus.Counter
	writeFailed prometheus.Counter
	pausedSince prometheus.Gauge
	// budget is write_gap_budget.
	budget time.Duration
	// stepsOf is the swap whose steps stepTook counted last.
	stepsOf string
}

func newMetrics(reg prometheus.Registerer, budget time.Duration) *metrics {
	m := &metrics{budget: budget,
		step: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_role_swap_step",
			Help: "1 for the step the swap under way is at; none when no swap is under way."}, []string{"step"}),
		stepSeconds: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_role_swap_step_seconds",
			Help: "How long the swap has been at its step."}),
		actions: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_role_actions_total",
			Help: "Actions carried out, by type."}, []string{"action"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_role_action_failures_total",
			Help: "Actions that failed (and are repeated next pass), by type and kind of failure."}, []string{"action", "kind"}),
		passes: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleet_role_pass_seconds",
			Help: "Duration of a pass: snapshot, plan, action and status.", Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10)}),
		reaction: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "fleet_role_reaction_seconds",
			Help:    "From the change that woke a pass (or its start, when the period did) to the start of the action it led to: the controller's own share of a swap.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)}),
		voters: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_role_voters", Help: "Nodes whose etcd members vote."}),
		tolerates: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_role_failures_tolerated",
			Help: "How many more member failures etcd survives now: the voting members up less a majority of them; a stopped member not yet removed counts down. Below 0: no quorum."}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_role_leader", Help: "1 while this replica leads."}),
		verdicts: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "fleet_role_verdict",
			Help: "1 for each host's verdict; role is voter when the host's member votes, else standby."}, []string{"node", "role", "state"}),
		dryRun: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "fleet_role_dry_run_decisions_total",
			Help: "Automatic decisions a dry run only reported, each counted once, by the voter out and the standby in."}, []string{"out", "in"}),
		wouldSwap: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_role_dry_run_would_swap",
			Help: "1 while a dry run reports an automatic decision it would carry out."}),
		unfinished: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_role_unfinished_demotions",
			Help: "Hosts a swap that ended left with their demotion unfinished: their Node keeps the swap's step-down and member-gone until their agent reports the finish."}),
		spent: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_role_remediation_retries_spent",
			Help: "1 while an automatic swap does not start: it would retry a remediation past [remediation] max_retries."}),
		stepTook: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "fleet_role_swap_step_duration_seconds",
			Help:    "How long each step of the swaps that ended lasted, counted at their end, by step.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 14)}, []string{"step"}),
		dead: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_role_dead_voters",
			Help: "Voters dead by every sign: agent silent, Node not Ready, no kubelet heartbeat for dead_after, member unreachable from every other voter."}),
		writeGap: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_role_swap_write_gap_seconds",
			Help: "The longest gap between two of the controller's own writes that succeeded during the leadership move and member removal of the last swap that ended and reached them."}),
		overBudget: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleet_role_swaps_over_write_gap_budget_total",
			Help: "Swaps that ended whose longest write gap passed write_gap_budget."}),
		writeFailed: prometheus.NewCounter(prometheus.CounterOpts{Name: "fleet_role_swap_write_failures_total",
			Help: "The controller's own writes that failed during swaps' leadership moves and member removals."}),
		pausedSince: prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_role_paused_since_timestamp_seconds",
			Help: "When the pause in force began (fleet-role pause), in seconds since the epoch; 0 while not paused."}),
	}
	budgetGauge := prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleet_role_swap_write_gap_budget_seconds",
		Help: "write_gap_budget: the longest write gap a swap may cost before fleet_role_swaps_over_write_gap_budget_total counts it."})
	budgetGauge.Set(budget.Seconds())
	reg.MustRegister(m.step, m.stepSeconds, m.actions, m.failures, m.passes, m.reaction, m.voters, m.tolerates, m.leader, m.verdicts, m.dryRun, m.wouldSwap, m.unfinished, m.spent,
		m.stepTook, m.dead, m.writeGap, m.overBudget, m.writeFailed, budgetGauge, m.pausedSince)
	return m
}

func (m *metrics) observe(plan swapplan.Plan, stepSeconds float64, verdicts map[string]api.Verdict) {
	m.step.Reset()
	step := plan.Step
	if step == "" {
		step = "none"
	}
	m.step.WithLabelValues(step).Set(1)
	m.stepSeconds.Set(stepSeconds)
	m.voters.Set(float64(len(plan.Voters)))
	m.tolerates.Set(float64(plan.Tolerates))
	// Note: a host whose Node is gone is not counted: nothing is kept on
	// it, and no finish can be reported to clear it.
	unfinished := 0
	for _, u := range plan.Pending {
		if !u.NodeGone {
			unfinished++
		}
	}
	m.unfinished.Set(float64(unfinished))
	spent := 0.0
	if plan.RetriesSpent {
		spent = 1
	}
	m.spent.Set(spent)
	m.dead.Set(float64(len(plan.Dead)))
	m.verdicts.Reset()
	for node, v := range verdicts {
		role := api.RoleStandby // the controller judges only voters and standbys
		if slices.Contains(plan.Voters, node) {
			role = api.RoleVoter
		}
		m.verdicts.WithLabelValues(node, role, v.State).Set(1)
	}
}

// ended counts the steps of a swap that ended, and its write gap, once.
func (m *metrics) ended(r api.SwapResult) {
	if r.ID == m.stepsOf {
		return
	}
	m.stepsOf = r.ID
	for _, s := range r.Steps {
		if !s.End.IsZero() {
			m.stepTook.WithLabelValues(s.Step).Observe(s.End.Sub(s.Start).Seconds())
		}
	}
	if w := r.Writes; w != nil {
		m.writeGap.Set(time.Duration(w.LongestGap).Seconds())
		if time.Duration(w.LongestGap) > m.budget {
			m.overBudget.Inc()
		}
	}
}

// paused says when the pause in force began: 0 when none is.
func (m *metrics) paused(p *api.Pause) {
	if p == nil {
		m.pausedSince.Set(0)
		return
	}
	m.pausedSince.Set(float64(p.At.UnixMilli()) / 1000)
}
