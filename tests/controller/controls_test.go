package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
)

func TestPauseHoldsTheAutomaticSwapAndAManualOneUnlessItOverridesThePauseAndResumeLetsItGo(t *testing.T) {
	e := newEnv(t, 3, 2, 0)
	e.cfg.DryRun = false
	e.cfg.Verdicts.Window = 4
	out, stderr, code := e.cli("resume")
	require.Equal(t, 0, code, stderr)
	assert.Equal(t, "nothing was paused: swaps start as they did\n", out)
	_, err := e.api.Client.CoreV1().ConfigMaps(api.Namespace).Get(context.Background(), api.StatusConfigMap, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "a resume with nothing paused writes nothing: %v", err)
	out, stderr, code = e.cli("pause", "--reason", "kernel upgrades this week")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^paused by \S+: no swap starts until fleet-role resume; a swap under way goes on\n$`, out, "who paused, as the API server says")
	_, stderr, code = e.cli("pause")
	assert.Equal(t, 2, code, "a pause says why")
	assert.Contains(t, stderr, "--reason is required")

	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].FsyncMs = 35 })
	e.start()
	var st api.Status
	require.Eventually(t, func() bool {
		st, _ = e.status()
		return st.Decision != nil && st.Pause != nil
	}, 30*time.Second, 50*time.Millisecond, "the decision is made and held: %+v", st)
	assert.Contains(t, st.Reason, "the automatic decision to swap v2 for s1 waits: paused by")
	assert.Equal(t, "kernel upgrades this week", st.Pause.Reason)
	screen, _, code := e.cli("status")
	require.Equal(t, 0, code)
	assert.Regexp(t, `PAUSED +by \S+ at .*: kernel upgrades this week; fleet-role resume lifts it`, screen)

	_, stderr, code = e.cli("swap", "v1", "s2")
	assert.Equal(t, 1, code, "a manual swap is refused while paused")
	assert.Contains(t, stderr, "refused: the controller is paused by")
	assert.Contains(t, stderr, "swap --override pause")
	time.Sleep(3 * time.Second)
	_, err = e.api.Client.CoordinationV1().Leases(api.Namespace).Get(context.Background(), api.LeaseName, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no swap started while paused")

	out, stderr, code = e.cli("resume")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^resumed by \S+: swaps start again \(paused by \S+: kernel upgrades this week\)\n$`, out)
	res := e.waitEnd(3 * time.Minute)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, api.OriginAutomatic, res.Origin)
	assert.Equal(t, "v2", res.Out)

	// Paused again, a manual swap that overrides the pause is carried out,
	// and its result says so.
	_, stderr, code = e.cli("pause", "--reason", "change review")
	require.Equal(t, 0, code, stderr)
	out, stderr, code = e.cli("pause", "--reason", "change freeze")
	require.Equal(t, 0, code, stderr)
	assert.Regexp(t, `^paused by \S+: .* \(the pause by \S+, "change review", is replaced\)\n$`, out)
	_, stderr, code = e.cli("swap", "--force", "v1", "s2")
	assert.Equal(t, 2, code, "--force is a usage error now")
	assert.Contains(t, stderr, "--override pause")
	_, stderr, code = e.cli("swap", "--override", "pause", "v1", "s2")
	require.Equal(t, 0, code, stderr)
	require.Eventually(t, func() bool { st, _ = e.status(); return st.Swap != nil && st.Swap.Out == "v1" }, 30*time.Second, 50*time.Millisecond)
	res = e.waitEnd(3 * time.Minute)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, api.OriginManual, res.Origin)
	assert.Equal(t, []string{api.OverridePause}, res.Overrides)
	assertCompleted(t, e, "v1", "s2")
	st, _ = e.status()
	require.NotNil(t, st.Pause, "the pause outlives the swaps it let through")
	assert.Equal(t, "change freeze", st.Pause.Reason)
}

func TestSwapCancelRollsASwapBackFromItsStepAndIsRefusedOnceTheOutgoingVoterSteppedDown(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.start()
	_, stderr, code := e.cli("swap", "--cancel")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "refused: no swap is under way")

	// Cancelled once the candidate was asked to promote: rolled back; the
	// request's --wait exits by that end.
	waited := e.cliAsync("swap", "--wait", "v1", "s1")
	var st api.Status
	require.Eventually(t, func() bool {
		st, _ = e.status()
		return st.Swap != nil && (st.Step == api.StepPromote || st.Step == api.StepJoin || st.Step == api.StepGates)
	}, time.Minute, 20*time.Millisecond, "the promotion: %+v", st)
	out, stderr, code := e.cli("swap", "--cancel")
	require.Equal(t, 0, code, stderr)
	assert.Contains(t, out, "cancel requested: swap "+st.Swap.ID+" (v1 out, s1 in)")
	res := e.waitEnd(2 * time.Minute)
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
	assert.Regexp(t, `^cancelled by \S+ at `, res.Reason)
	w := <-waited
	assert.Equal(t, 3, w.code, "swap --wait exits 3 on a rollback: %s", w.stderr)
	assert.Regexp(t, `(?m)^requested: swap v1 out for s1 in \(by \S+ at .*\); waiting for its end\n`, w.stdout)
	assert.Regexp(t, `(?m)^swap `+res.ID+`: [a-z-]+$`, w.stdout, "the steps it saw")
	assert.Regexp(t, `(?m)^rolled-back: swap `+res.ID+`, v1 out, s1 in, in \S+: cancelled by `, w.stdout)
	assert.Contains(t, w.stderr, "fleet-role: swap "+res.ID+" ended rolled-back, not completed")
	_, data := e.status()
	assert.NotContains(t, data, api.CancelKey, "the cancel goes with the swap it took back")
	v1, s1 := e.node("v1"), e.node("s1")
	assert.Equal(t, api.RoleVoter, v1.Labels[api.LabelRole])
	assert.Equal(t, api.RoleStandby, s1.Labels[api.LabelRole])
	assert.False(t, v1.Spec.Unschedulable)
	assert.False(t, s1.Spec.Unschedulable)
	assert.Equal(t, 3, e.d.MemberCount(), "no learner of the candidate left behind")

	// Once the outgoing voter stepped down it is refused; the swap goes
	// on. k3s is held from removing the member, so that the swap waits
	// there.
	e.d.With(func(d *fleetsim.Driver) { d.K3sPaused = true })
	waited = e.cliAsync("swap", "--wait", "v1", "s1")
	require.Eventually(t, func() bool {
		st, _ = e.status()
		return st.Swap != nil && st.Swap.ID != res.ID && st.Step == api.StepRemoveMember
	}, 2*time.Minute, 20*time.Millisecond, "the removal: %+v", st)
	_, stderr, code = e.cli("swap", "--cancel")
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr, "cannot be cancelled:")
	assert.Contains(t, stderr, "the way back is a new swap once this one ends")
	e.d.With(func(d *fleetsim.Driver) { d.K3sPaused = false })
	res = e.waitEnd(2 * time.Minute)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assertCompleted(t, e, "v1", "s1")
	w = <-waited
	assert.Equal(t, 0, w.code, "swap --wait exits 0 on a completed swap: %s", w.stderr)
	assert.Regexp(t, `(?m)^swap `+res.ID+`: [a-z-]+$`, w.stdout, "the steps it saw")
	assert.Regexp(t, `(?m)^completed: swap `+res.ID+`, v1 out, s1 in, in \S+`, w.stdout)
}

func TestOutsideTheMaintenanceWindowTheAutomaticSwapWaitsAndAManualOneGoes(t *testing.T) {
	e := newEnv(t, 3, 2, 0)
	e.cfg.DryRun = false
	e.cfg.Verdicts.Window = 4
	closed := time.Now().UTC().Add(2 * time.Hour)
	e.cfg.MaintenanceWindow = config.MaintenanceWindow{Start: closed.Format("15:00"), End: closed.Add(time.Hour).Format("15:00"), TimeZone: "UTC"}
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].FsyncMs = 35 })
	e.start()
	var st api.Status
	require.Eventually(t, func() bool { st, _ = e.status(); return st.Decision != nil }, 30*time.Second, 50*time.Millisecond)
	assert.Contains(t, st.Reason, "the automatic decision to swap v2 for s1 waits for the maintenance window (every day "+closed.Format("15:00"))
	time.Sleep(3 * time.Second)
	_, err := e.api.Client.CoordinationV1().Leases(api.Namespace).Get(context.Background(), api.LeaseName, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "no swap started outside the window")

	_, stderr, code := e.cli("swap", "v1", "s2")
	require.Equal(t, 0, code, stderr)
	res := e.waitEnd(3 * time.Minute)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, api.OriginManual, res.Origin, "a manual swap starts at any time")
	assertCompleted(t, e, "v1", "s2")
}
