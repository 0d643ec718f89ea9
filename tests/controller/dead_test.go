package controller_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/fleetsim"
)

func TestAVoterFrozenPastDeadAfterIsNamedDeadInTheStatusAndTheMetricUntilItIsBack(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.cfg.DeadAfter = 8 * time.Second
	e.start()
	var st api.Status
	// Note: the first pass publishes within a period (1 s) of the
	// controller's start; 30 s is an outer limit for a busy machine.
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
	// Note: its next probe (2 s) makes it alive; a minute is an outer limit.
	require.Eventually(t, func() bool { st, _ = e.status(); return len(st.Dead) == 0 }, time.Minute, 100*time.Millisecond, "back")
	assert.Equal(t, "fleet_role_dead_voters 0", e.metric("fleet_role_dead_voters"))
}

func TestADeadVoterIsReplacedWithTheDryRunOffItsMemberRemovedBeforeTheCandidateIsPromoted(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.cfg.DeadAfter = 8 * time.Second
	e.cfg.DryRun, e.cfg.ReplaceDeadVoters = false, true
	e.start()
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].Paused = true })
	// Note: dead_after (8 s) and the node grace, then a swap at the test
	// bounds (each step well under 20 s; the run here took about 50 s):
	// 3 minutes is the outer limit.
	res := e.waitEnd(3 * time.Minute)
	require.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, "v2", res.Out)
	assert.Equal(t, "s1", res.In)
	assert.True(t, res.Dead)
	assert.Equal(t, api.OriginAutomatic, res.Origin)
	assert.Equal(t, []string{"v2"}, res.Pending, "its host never came back")
	var steps []string
	for _, s := range res.Steps {
		steps = append(steps, s.Step)
	}
	t.Logf("steps: %v; %s", steps, res.Reason)
	assert.Less(t, slices.Index(steps, api.StepRemoveMember), slices.Index(steps, api.StepPromote), "the dead member removed first: %v", steps)
	assert.NotContains(t, steps, api.StepDrainOut, "nothing waits on the dead host's pods")
	assert.Equal(t, 3, e.d.MemberCount())
	v2 := e.node("v2")
	assert.True(t, v2.Spec.Unschedulable, "left cordoned for its agent")
	assert.Equal(t, api.RoleStandby, v2.Labels[api.LabelRole])
	assert.Equal(t, api.RoleVoter, e.node("s1").Labels[api.LabelRole])

	// Its host comes back: its agent finishes its demotion by what stayed
	// on its Node, which the controller then clears.
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].Paused = false })
	// Note: its agent finishes within a probe period or two and the
	// controller's next pass clears it; a minute is an outer limit.
	require.Eventually(t, func() bool {
		n := e.node("v2")
		return !n.Spec.Unschedulable && n.Annotations[api.AnnotationMemberGone] == ""
	}, time.Minute, 100*time.Millisecond, "cleared and uncordoned once its agent finished")
}

func TestACordonedVoterFrozenPastDeadAfterIsNotCalledDeadNorRemovedWithTheDryRunOffAndIsReplacedOnceUncordoned(t *testing.T) {
	e := newEnv(t, 3, 1, 0)
	e.cfg.DeadAfter = 8 * time.Second
	e.cfg.DryRun, e.cfg.ReplaceDeadVoters = false, true
	e.start()
	ctx := context.Background()
	cordon := func(on bool) {
		t.Helper()
		_, err := e.client().CoreV1().Nodes().Patch(ctx, "v2", types.MergePatchType,
			[]byte(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)), metav1.PatchOptions{})
		require.NoError(t, err)
	}
	// An operator's maintenance: kubectl cordon v2, then its host goes
	// down for longer than dead_after.
	cordon(true)
	e.d.With(func(d *fleetsim.Driver) { d.Hosts["v2"].Paused = true })
	// Note: dead_after (8 s), the node grace and a few passes would have
	// started the dead voter's swap well within 40 s (the test above's
	// whole swap took about 50 s); 40 s more is how long it is watched.
	deadline := time.Now().Add(40 * time.Second)
	var st api.Status
	for time.Now().Before(deadline) {
		st, _ = e.status()
		require.Empty(t, st.Dead, "a cordoned voter is under maintenance, never dead: %s", st.Reason)
		require.Nil(t, st.Swap, "no swap starts for it: %s", st.Reason)
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("after 40 s: %s", st.Reason)
	assert.Contains(t, st.Reason, "v2 is under maintenance (cordoned, not by fleet-role)")
	assert.Equal(t, 3, e.d.MemberCount(), "its member is kept")
	assert.Equal(t, api.RoleVoter, e.node("v2").Labels[api.LabelRole])

	// Uncordoned while still down: dead, and replaced. Note: as the test
	// above, a swap of about 50 s; 3 minutes are the outer limit.
	cordon(false)
	res := e.waitEnd(3 * time.Minute)
	require.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, "v2", res.Out)
	assert.True(t, res.Dead)
}
