package controller_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
)

func TestAVoterFrozenPastDeadAfterIsNamedDeadInTheStatusAndTheMetricUntilItIsBack(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.cfg.DeadAfter = 8 * time.Second
	e.start()
	var st api.Status
	require.Eventually(t, func() bool { st, _ = e.status(); return len(st.Voters) == 3 }, 30*time.Second, 100*time.Millisecond)
	assert.Empty(t, st.Dead)

	frozen := time.Now()
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].Paused = true })
	// Slack: dead_after from its last heartbeat, and a probe period for
	// the others' samples to name its member.
	require.Eventually(t, func() bool { st, _ = e.status(); return len(st.Dead) > 0 }, time.Minute, 100*time.Millisecond)
	assert.GreaterOrEqual(t, time.Since(frozen), e.cfg.DeadAfter-time.Second, "not before dead_after (less a heartbeat's half second in flight)")
	require.Len(t, st.Dead, 1)
	assert.Equal(t, "v2", st.Dead[0].Node)
	assert.Contains(t, st.Dead[0].Reason, "unreachable from v1, v3")
	assert.Equal(t, "fleet_role_dead_voters 1", e.metric("fleet_role_dead_voters"))
	out, _, code := e.cli("status")
	require.Equal(t, 0, code)
	assert.Contains(t, out, "DEAD ")
	assert.Contains(t, out, "v2: no probe sample since ")
	t.Logf("fleet-role status:\n%s", out)

	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].Paused = false })
	require.Eventually(t, func() bool { st, _ = e.status(); return len(st.Dead) == 0 }, time.Minute, 100*time.Millisecond, "back")
	assert.Equal(t, "fleet_role_dead_voters 0", e.metric("fleet_role_dead_voters"))
}
