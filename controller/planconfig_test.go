package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/config"
)

func TestTheConfigurationReachesThePlanner(t *testing.T) {
	c, err := config.ParseController([]byte("version = 1\ndry_run = false\n[bounds]\njoin = \"4m\"\nremove_fallback = \"3m\"\nremove_by_voter = \"7m\"\n"))
	require.NoError(t, err)
	p := PlanConfig(c)
	assert.False(t, p.DryRun)
	assert.Equal(t, 4*time.Minute, p.Bounds.Join)
	assert.Equal(t, 3*time.Minute, p.Bounds.RemoveFallback)
	assert.Equal(t, 7*time.Minute, p.Bounds.RemoveByVoter)
	assert.Equal(t, c.Cooldown, p.Cooldown)
	assert.Equal(t, c.ProbePeriod, p.ProbePeriod)
	assert.False(t, p.ReplaceDead, "replace_dead_voters is off by default")
	assert.True(t, p.RunnersWait, "runners_bound_action is wait by default")
	c, err = config.ParseController([]byte("version = 1\nreplace_dead_voters = true\nrunners_bound_action = \"drain\"\n"))
	require.NoError(t, err)
	assert.True(t, PlanConfig(c).ReplaceDead)
	assert.False(t, PlanConfig(c).RunnersWait)
	v := VerdictConfig(c)
	assert.Equal(t, c.Verdicts.Window, v.Window)
	assert.Equal(t, c.Verdicts.FsyncLimit, v.FsyncLimit)
	assert.Equal(t, c.Verdicts.WALFsyncP99Limit, v.WALFsyncLimit)
	assert.Equal(t, c.Verdicts.BackendCommitP99Limit, v.BackendCommitLimit)
	assert.Equal(t, c.ProbePeriod, v.Period)
}
