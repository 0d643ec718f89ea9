package controller

import (
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/swapplan"
)

// PlanConfig is what the planner needs of the controller's configuration:
// what `fleet-role controller` and `fleet-role plan` plan with.
// The configuration must have been validated: a window that does not
// parse is open always.
func PlanConfig(c config.Controller) swapplan.Config {
	b := c.Bounds
	var w swapplan.Window
	if days, start, end, loc, err := c.MaintenanceWindow.Parse(); err == nil {
		w = swapplan.Window{Days: days, Start: start, End: end, Location: loc}
	}
	return swapplan.Config{
		DryRun:      c.DryRun,
		Cooldown:    c.Cooldown,
		ProbePeriod: c.ProbePeriod,
		Window:      w,
		Bounds: swapplan.Bounds{
			Snapshot: b.Snapshot, Runners: b.Runners, Drain: b.Drain, Promote: b.Promote, Join: b.Join,
			Gates: b.Gates, StepDown: b.StepDown, RemoveMember: b.RemoveMember, MemberGone: b.MemberGone, Uncordon: b.Uncordon, Rollback: b.Rollback,
			RemoveFallback: b.RemoveFallback, RemoveByVoter: b.RemoveByVoter,
		},
		DomainLabel: c.FailureDomainLabel,
		DeadAfter:   c.DeadAfter,
		ReplaceDead: c.ReplaceDeadVoters,
		RunnersWait: c.RunnersBoundAction != config.RunnersBoundDrain,
		Remediation: swapplan.Remediation{
			MaxRetries: c.Remediation.MaxRetries, RetryPeriod: c.Remediation.RetryPeriod, MinHealthyPeriod: c.Remediation.MinHealthyPeriod,
		},
	}
}

// VerdictConfig is how the controller's configuration judges the verdicts.
func VerdictConfig(c config.Controller) swapplan.VerdictConfig {
	return swapplan.VerdictConfig{Window: c.Verdicts.Window, FsyncLimit: c.Verdicts.FsyncLimit, ReadLimit: c.Verdicts.ReadLimit,
		WALFsyncLimit: c.Verdicts.WALFsyncP99Limit, BackendCommitLimit: c.Verdicts.BackendCommitP99Limit, Period: c.ProbePeriod}
}
