package controller_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
)

// A remaining voter whose disk turns slow after the outgoing voter was
// asked to step down never holds the removal of the outgoing voter's
// member: the removal is asked once the step-down is done, and until
// k3s has made it the controller's fleet_role_failures_tolerated reads 0
// (4 members, the outgoing one stopped); once made, 1 (3 of 3, the slow
// one voting).
func TestTheRemovalIsAskedWithARemainingVoterSlowAndFailuresToleratedReadsZeroUntilK3sMakesIt(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.cfg.DryRun = false
	// Note: the step-down is kept unanswered while v2 turns slow, at
	// most a few probe periods (2 s); a minute leaves it slack.
	e.cfg.Bounds.StepDown = time.Minute
	e.d.With(func(d *fleetsim.Driver) {
		d.Hosts["v1"].IgnoreStepDown = true
		d.K3sPaused = true // k3s makes no removal until let go
	})
	e.start()
	_, stderr, code := e.cli("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)

	// Note: the swap's steps before the step-down take about 20 s at
	// the test bounds; 2 minutes are the outer limit.
	var st api.Status
	require.Eventually(t, func() bool {
		st, _ = e.status()
		return st.Swap != nil && st.Step == api.StepStepDown && e.node("v1").Annotations[api.AnnotationRequest] != ""
	}, 2*time.Minute, 100*time.Millisecond, "the step-down asked; step %s: %s", st.Step, st.Reason)
	// Note: the pass after the one that asked counts it down.
	require.Eventually(t, func() bool {
		return e.metric("fleet_role_failures_tolerated") == "fleet_role_failures_tolerated 0"
	}, 10*time.Second, 100*time.Millisecond, "v1 asked to step down counts down")

	// v2's disk turns slow while v1 has not yet stepped down.
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].UnhealthyUntil = time.Now().Add(time.Hour) })
	// Note: its next probe (2 s) says so; 30 s is an outer limit.
	require.Eventually(t, func() bool {
		var p api.Probe
		return json.Unmarshal([]byte(e.node("v2").Annotations[api.AnnotationProbe]), &p) == nil && !p.Healthy && p.Error == ""
	}, 30*time.Second, 100*time.Millisecond, "v2's probe says its disk is slow")
	time.Sleep(2 * e.cfg.Period) // the controller's passes see it
	st, _ = e.status()
	require.Equal(t, api.StepStepDown, st.Step, st.Reason)

	// v1's agent carries out the step-down it was asked for.
	e.d.With(func(d *fleetsim.Driver) {
		d.Hosts["v1"].IgnoreStepDown = false
		d.Hosts["v1"].Handled = time.Time{}
	})
	// Note: its agent's next tick and the controller's next passes ask
	// the removal within seconds; 30 s is an outer limit.
	if !assert.Eventually(t, func() bool {
		st, _ = e.status()
		return e.node("v1").Annotations[api.AnnotationEtcdRemove] != ""
	}, 30*time.Second, 100*time.Millisecond, "the removal asked of k3s with v2 slow") {
		t.Fatalf("status: step %s: %s", st.Step, st.Reason)
	}
	t.Logf("removal asked: step %s: %s", st.Step, st.Reason)
	assert.Equal(t, 4, e.d.MemberCount(), "k3s has not removed it yet")
	// While k3s has not made it, no failure is spared; seen over several
	// passes.
	for range 5 {
		assert.Equal(t, "fleet_role_failures_tolerated 0", e.metric("fleet_role_failures_tolerated"), "4 members, v1's stopped")
		time.Sleep(e.cfg.Period)
	}

	e.d.With(func(d *fleetsim.Driver) { d.K3sPaused = false })
	// Note: k3s's next look removes it and the voters' next probes (2 s)
	// list the members without it; 30 s is an outer limit.
	require.Eventually(t, func() bool {
		return e.metric("fleet_role_failures_tolerated") == "fleet_role_failures_tolerated 1"
	}, 30*time.Second, 100*time.Millisecond, "3 of 3 once removed, v2 voting though slow")
	assert.Equal(t, 3, e.d.MemberCount())

	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].UnhealthyUntil = time.Now() })
	// Note: the steps after the removal take seconds at the test bounds.
	res := e.waitEnd(2 * time.Minute)
	require.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assertCompleted(t, e, "v1", "s1")
}
