package plan_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

var binary string

func TestMain(m *testing.M) {
	os.Exit(testhost.RunWithFleetRole(m, &binary))
}

// planOf runs `fleet-role plan` on the cluster's List and decodes its answer.
func planOf(t *testing.T, c *cluster, extra ...string) swapplan.Plan {
	t.Helper()
	out, stderr, code := run(t, c.list(), extra...)
	require.Equal(t, 0, code, "stderr: %s", stderr)
	var p swapplan.Plan
	require.NoError(t, json.Unmarshal(out, &p), "output: %s", out)
	return p
}

func run(t *testing.T, list []byte, extra ...string) (stdout, stderr []byte, code int) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.json")
	require.NoError(t, os.WriteFile(path, list, 0o644))
	args := append([]string{"plan", "-f", path, "--now", now.Format(time.RFC3339)}, extra...)
	cmd := exec.Command(binary, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run fleet-role: %v", err)
	}
	return o.Bytes(), e.Bytes(), code
}

func liveConfig(t *testing.T) []string {
	path := filepath.Join(t.TempDir(), "controller.toml")
	require.NoError(t, os.WriteFile(path, []byte("version = 1\ndry_run = false\n"), 0o644))
	return []string{"--config", path}
}

func assertAction(t *testing.T, p swapplan.Plan, typ, node, step, reason string) {
	t.Helper()
	assert.Equal(t, typ, p.Action.Type, p.Reason)
	assert.Equal(t, node, p.Action.Node, p.Reason)
	assert.Equal(t, step, p.Step, p.Reason)
	assert.Contains(t, p.Reason, reason)
}

func TestPlanTheGatesAreHeldWithFourVotersAndTheOutgoingVoterIsNotTouchedWhileOneFails(t *testing.T) {
	c := newCluster()
	rec := c.swap("v1", "s1", api.StepJoin, time.Minute)
	c.promoted(rec, "s1", 2*time.Minute)
	c.lists([]string{"v1", "v2", "v3", "s1"}, "v1", "v2", "v3", "s1")
	c.unhealthy("v2")
	p := planOf(t, c)
	assertAction(t, p, api.ActionNone, "", api.StepGates, "the outgoing voter v1 is not touched: v2's probe says unhealthy")
	assert.Equal(t, []string{"s1", "v1", "v2", "v3"}, p.Voters)

	c.probes["v2"].Healthy = true
	assertAction(t, planOf(t, c), api.ActionCordonOut, "v1", api.StepCordonOut, "the gates hold")
}

// atStepDown: the swap has promoted s1, cordoned and drained v1, and asked
// it to step down.
func atStepDown(c *cluster) *api.SwapRecord {
	rec := c.swap("v1", "s1", api.StepStepDown, time.Minute)
	c.promoted(rec, "s1", 10*time.Minute)
	c.lists([]string{"v1", "v2", "v3", "s1"}, "v1", "v2", "v3", "s1")
	c.cordon("v1", rec.ID)
	c.request(rec, "v1", api.RequestStepDown, time.Minute)
	return rec
}

func TestPlanTheRemovalIsHeldWhileARemainingVoterIsUnhealthy(t *testing.T) {
	c := newCluster()
	rec := atStepDown(c)
	c.report(rec, "v1", api.RequestStepDown, api.StateDone, nil)
	c.unhealthy("v3")
	assertAction(t, planOf(t, c), api.ActionNone, "", api.StepRemoveMember, "removal held while a remaining voter is unhealthy: v3")
	c.probes["v3"].Healthy = true
	assertAction(t, planOf(t, c), api.ActionRemoveMember, "v1", api.StepRemoveMember, "remove the member of v1")
}

func TestPlanTheSwapWaitsWhileTheSnapshotIsNotReadyEvenWhenTheAgentSaysDone(t *testing.T) {
	c := newCluster()
	rec := c.swap("v1", "s1", api.StepSnapshot, time.Minute)
	c.request(rec, "v2", api.RequestSnapshot, time.Minute)
	c.report(rec, "v2", api.RequestSnapshot, api.StateDone, nil)
	assertAction(t, planOf(t, c), api.ActionNone, "", api.StepSnapshot, "v2 says the snapshot is done but it is not ready")
	c.snapshotDone(rec, "v2")
	assertAction(t, planOf(t, c), api.ActionCordonIn, "s1", api.StepCordonIn, "cordoning the candidate s1")
}

func TestPlanEveryPassRenewsTheLeaseTheSwapHoldsAndKeepsItsAnnotations(t *testing.T) {
	c := newCluster()
	rec := atStepDown(c)
	p := planOf(t, c)
	assert.True(t, p.RenewLease)
	require.NotNil(t, p.Swap)
	assert.Equal(t, rec.ID, p.Swap.ID)
	assert.Equal(t, rec.Out, p.Swap.Out)
	assert.Equal(t, rec.In, p.Swap.In)
	assert.True(t, rec.StartedAt.Equal(p.Swap.StartedAt))
	assert.Equal(t, rec.Origin, p.Swap.Origin)
}

func TestPlanPastTheRunnerWaitTheSwapIsAbandonedWithTheCandidateUncordonedTheLeaseReleasedAndNoCooldown(t *testing.T) {
	c := newCluster()
	rec := c.swap("v1", "s1", api.StepRunnersIn, 61*time.Minute)
	c.snapshotDone(rec, "v2")
	c.cordon("s1", rec.ID)
	c.runner("runner-7x2", "s1")
	p := planOf(t, c)
	assertAction(t, p, api.ActionAbandon, "", api.StepAbandon, "did not finish within the runner wait 1h0m0s")
	assert.Equal(t, api.PhaseAbandon, p.Swap.Phase)

	rec.Phase, rec.Reason = api.PhaseAbandon, p.Swap.Reason
	c.holdLease(api.ControllerHolder, rec)
	assertAction(t, planOf(t, c), api.ActionUncordon, "s1", api.StepAbandon, "uncordoning the candidate s1")

	c.nodes["s1"].Spec.Unschedulable = false
	delete(c.nodes["s1"].Annotations, api.AnnotationCordonedBy)
	p = planOf(t, c)
	assertAction(t, p, api.ActionEnd, "", api.StepEnd, "ends abandoned")
	assert.Equal(t, api.ResultAbandoned, p.Action.Result)
	assert.Nil(t, p.Action.CooldownUntil)
	assert.Equal(t, []string{"v2"}, p.Action.Clear)
}

// inRollback: s1 joined as a learner, never voted, and the swap is rolling back.
func inRollback(c *cluster) *api.SwapRecord {
	rec := c.swap("v1", "s1", api.StepRollback, time.Minute)
	c.promoted(rec, "s1", 12*time.Minute)
	c.condition("s1", api.ConditionEtcdIsVoter, corev1.ConditionFalse, api.ReasonMemberIsLearner)
	rec.Phase, rec.Reason = api.PhaseRollback, "the candidate s1 is not a voter within 10m0s"
	c.holdLease(api.ControllerHolder, rec)
	c.request(rec, "s1", api.RequestStepDown, time.Minute)
	c.report(rec, "s1", api.RequestStepDown, api.StateDone, nil)
	return rec
}

func TestPlanAFinishedRollbackWaitsUntilEveryVoterListsTheTargetMembersAndNoMore(t *testing.T) {
	c := newCluster()
	inRollback(c)
	c.annotate("s1", api.AnnotationEtcdRemove, "true")
	c.lists([]string{"v1", "v2", "v3"}, "v1", "v2", "v3", "learner:", "s1")
	assertAction(t, planOf(t, c), api.ActionNone, "", api.StepRemoveCandidate, "waiting for k3s to remove the member s1-0a1b2c3d of s1 (v2 lists it)")
	c.lists([]string{"v1", "v2"}, "v1", "v2", "v3")
	assertAction(t, planOf(t, c), api.ActionNone, "", api.StepRemoveCandidate, "waiting for k3s to remove the member s1-0a1b2c3d of s1 (v3 lists it)")
	c.lists([]string{"v3"}, "v1", "v2", "v3")
	assertAction(t, planOf(t, c), api.ActionMemberGone, "s1", api.StepRollback, "every voter lists the original members")
}

func TestPlanACandidateThatIsNotAVoterByTheDeadlineIsRolledBackAskingK3sToRemoveItsLearnerWhenItJoined(t *testing.T) {
	c := newCluster()
	rec := c.swap("v1", "s1", api.StepJoin, 11*time.Minute)
	c.promoted(rec, "s1", 12*time.Minute)
	c.condition("s1", api.ConditionEtcdIsVoter, corev1.ConditionFalse, api.ReasonMemberIsLearner)
	c.lists([]string{"v1", "v2", "v3"}, "v1", "v2", "v3", "learner:", "s1")
	p := planOf(t, c)
	assertAction(t, p, api.ActionRollback, "", api.StepRollback, "the candidate s1 is not a voter within 10m0s")

	c = newCluster()
	inRollback(c)
	c.lists([]string{"v1", "v2", "v3"}, "v1", "v2", "v3", "learner:", "s1")
	assertAction(t, planOf(t, c), api.ActionRemoveMember, "s1", api.StepRollback, "remove the member s1 joined with")
}

func TestPlanALeaseThatRegradeTookMidSwapIsNeverActedUnderAndNeverRenewed(t *testing.T) {
	c := newCluster()
	rec := atStepDown(c)
	c.holdLease("regrade", nil)
	p := planOf(t, c)
	assertAction(t, p, api.ActionNone, "", api.StepStepDown, `held by "regrade"`)
	assert.False(t, p.RenewLease)
	assert.Equal(t, rec.ID, p.Swap.ID, "the swap is still reported")
}

func TestPlanAManualRequestIsCarriedOutInsideTheCooldownAndWhateverTheVerdictsSay(t *testing.T) {
	c := newCluster()
	c.status.CooldownUntil = ptr.To(now.Add(3 * time.Hour))
	c.status.Verdicts = map[string]api.Verdict{"v1": {State: api.VerdictFit}, "s1": {State: api.VerdictUnfit, Score: 9}}
	c.manual = &api.ManualRequest{Out: "v1", In: "s1", At: now.Add(-time.Minute), By: "alice"}
	p := planOf(t, c)
	assertAction(t, p, api.ActionStart, "", api.StepStart, "manual request of alice to swap v1 for s1")
	assert.Equal(t, api.OriginManual, p.Swap.Origin)
	assert.True(t, c.manual.At.Equal(*p.Swap.RequestAt))
}

func TestPlanDryRunCarriesOutAManualRequestAndOnlyReportsAnAutomaticDecision(t *testing.T) {
	c := newCluster()
	c.status.Verdicts = map[string]api.Verdict{
		"v2": {State: api.VerdictUnfit, Score: 3, Reason: "fsync p99 31 ms in 20 of 25 samples"},
		"s1": {State: api.VerdictFit, Score: 0.2},
	}
	p := planOf(t, c)
	assertAction(t, p, api.ActionNone, "", "", "dry run: would swap v2 for s1")
	require.NotNil(t, p.Decision)
	assert.Equal(t, "v2", p.Decision.Out)
	assert.Nil(t, p.Swap)

	p = planOf(t, c, liveConfig(t)...)
	assertAction(t, p, api.ActionStart, "", api.StepStart, "swapping v2 for s1")
	assert.Equal(t, api.OriginAutomatic, p.Swap.Origin)

	c.manual = &api.ManualRequest{Out: "v3", In: "s1", At: now.Add(-time.Minute), By: "bob"}
	p = planOf(t, c)
	assertAction(t, p, api.ActionStart, "", api.StepStart, "manual request of bob")
	assert.Equal(t, "v3", p.Swap.Out)
}

func TestPlanTheRemovedMemberIsNoVoterSoTheMembershipPublishedHasThreeVoters(t *testing.T) {
	c := newCluster()
	c.addNode("v4", api.RoleVoter)
	c.server("v4")
	c.annotate("v4", api.AnnotationEtcdRemovedNodeName, member("v4"))
	assert.Equal(t, []string{"v1", "v2", "v3"}, planOf(t, c).Voters)
}

func TestPlanThePromotionWaitsForAVoterThatIsReadyOnAHeartbeatAfterTheServerStarted(t *testing.T) {
	c := newCluster()
	rec := c.swap("v1", "s1", api.StepJoin, time.Minute)
	c.promoted(rec, "s1", time.Minute)
	c.lists([]string{"v1", "v2", "v3", "s1"}, "v1", "v2", "v3", "s1")
	c.beats["s1"] = now.Add(-2 * time.Minute)
	assertAction(t, planOf(t, c), api.ActionNone, "", api.StepJoin, "s1 is not Ready on a kubelet heartbeat after its server started at 2026-11-30T11:59:00Z")
	c.beats["s1"] = now.Add(-30 * time.Second)
	assertAction(t, planOf(t, c), api.ActionCordonOut, "v1", api.StepCordonOut, "")
}

// atTail: the demotion of v1 finished and both Nodes are cleaned up.
func atTail(c *cluster) *api.SwapRecord {
	rec := atStepDown(c)
	c.report(rec, "v1", api.ReportFinish, api.StateDone, func(r *api.Report) { r.StartedAt = ptr.To(now.Add(-3 * time.Minute)) })
	c.annotate("v1", api.AnnotationMemberGone, rec.ID)
	v1 := c.nodes["v1"]
	v1.Labels[api.LabelRole] = api.RoleStandby
	for _, l := range api.ServerLabels {
		delete(v1.Labels, l)
	}
	delete(v1.Annotations, api.AnnotationEtcdNodeName)
	c.nodes["s1"].Labels[api.LabelRole] = api.RoleVoter
	c.lists([]string{"v2", "v3", "s1"}, "v2", "v3", "s1")
	c.probes["v1"].Members, c.probes["v1"].Member = nil, ""
	c.status.Step = api.StepUncordon
	return rec
}

func TestPlanTheSwapEndsCompletedWithTheAnnotationsClearedAndTheLeaseReleased(t *testing.T) {
	c := newCluster()
	rec := atTail(c)
	c.nodes["s1"].Spec.Unschedulable = false
	c.nodes["v1"].Spec.Unschedulable = false
	p := planOf(t, c)
	assertAction(t, p, api.ActionEnd, "", api.StepEnd, "ends completed")
	assert.Equal(t, api.ResultCompleted, p.Action.Result)
	assert.Equal(t, []string{"s1", "v1", "v2"}, p.Action.Clear)
	assert.Empty(t, p.Action.Pending)
	require.NotNil(t, p.Action.CooldownUntil)
	assert.Equal(t, now.Add(6*time.Hour), *p.Action.CooldownUntil)
	assert.Equal(t, rec.ID, p.Swap.ID)
	assert.Equal(t, api.PhaseEnd, p.Swap.Phase)
}

func TestPlanAnAgentThatRefusesThePromotionAbandonsTheSwapSinceNothingChangedOnTheHost(t *testing.T) {
	c := newCluster()
	rec := c.swap("v1", "s1", api.StepPromote, time.Minute)
	c.snapshotDone(rec, "v2")
	c.cordon("s1", rec.ID)
	c.pods = c.pods[:0]
	c.request(rec, "s1", api.RequestPromote, time.Minute)
	c.report(rec, "s1", api.RequestPromote, api.StateRefused, func(r *api.Report) { r.Message = "not staged as a standby" })
	assertAction(t, planOf(t, c), api.ActionAbandon, "", api.StepAbandon, "refused the promotion (not staged as a standby): nothing changed on the host")
}

func TestPlanTheRemovalWaitsForTheStepDownWhileTheOutgoingVoterIsReadyAndHasNotReported(t *testing.T) {
	c := newCluster()
	atStepDown(c)
	assertAction(t, planOf(t, c), api.ActionNone, "", api.StepStepDown, "the removal waits for the step-down while v1 is Ready and has not reported")
	c.notReady("v1")
	assertAction(t, planOf(t, c), api.ActionRemoveMember, "v1", api.StepRemoveMember, "")
}

func TestPlanASwapThatEndedWithTheAnnotationsClearedBeforeTheLeaseWasReleasedIsEndedNotStartedAgain(t *testing.T) {
	c := newCluster()
	rec := atTail(c)
	for _, n := range c.nodes {
		n.Spec.Unschedulable = false
		for _, a := range api.SwapAnnotations {
			delete(n.Annotations, a)
		}
	}
	rec.Phase, rec.Result, rec.EndedAt = api.PhaseEnd, api.ResultCompleted, ptr.To(now.Add(-time.Minute))
	c.holdLease(api.ControllerHolder, rec)
	c.manual = &api.ManualRequest{Out: "v1", In: "s1", At: rec.StartedAt.Add(-time.Minute)}
	p := planOf(t, c)
	assertAction(t, p, api.ActionEnd, "", api.StepEnd, "ends completed")
	assert.Empty(t, p.Action.Clear)
	assert.Equal(t, now.Add(-time.Minute+6*time.Hour), *p.Action.CooldownUntil, "the cooldown counts from the end marked")
}

func TestPlanAHostThatDoesNotComeBackWithinItsBoundIsLeftToNodeRecoveryWithTheSwapRecordedPending(t *testing.T) {
	c := newCluster()
	atTail(c)
	c.nodes["s1"].Spec.Unschedulable = false
	c.notReady("v1")
	c.status.Since = ptr.To(now.Add(-5 * time.Minute))
	assertAction(t, planOf(t, c), api.ActionNone, "", api.StepUncordon, "waiting for v1 to be Ready on a heartbeat after its agent started")
	c.status.Since = ptr.To(now.Add(-16 * time.Minute))
	p := planOf(t, c)
	assertAction(t, p, api.ActionEnd, "", api.StepEnd, "v1 did not come back within 15m0s")
	assert.Equal(t, api.ResultPending, p.Action.Result)
	assert.Equal(t, []string{"v1"}, p.Action.Pending)
}

func TestPlanADemotionTheAgentFinishedIsCleanedUpRoleLabelsEtcdAnnotationsLevelLabelAndTaint(t *testing.T) {
	c := newCluster()
	rec := atStepDown(c)
	c.nodes["v1"].Labels[api.LabelLevel] = "etcd-only"
	c.nodes["v1"].Spec.Taints = []corev1.Taint{{Key: api.TaintEtcdOnly, Effect: corev1.TaintEffectNoSchedule}}
	c.annotate("v1", api.AnnotationEtcdRemove, "true")
	c.annotate("v1", api.AnnotationMemberGone, rec.ID)
	c.report(rec, "v1", api.ReportFinish, api.StateDone, func(r *api.Report) { r.StartedAt = ptr.To(now.Add(-time.Minute)) })
	p := planOf(t, c)
	assertAction(t, p, api.ActionCleanUp, "v1", api.StepCleanUp, "v1 finished its demotion: cleaning up its server state")
	assert.Equal(t, api.RoleStandby, p.Action.Role)
}

func TestPlanAnActionThatFailsIsRepeatedAndLeavesTheSwapWhereItWas(t *testing.T) {
	c := newCluster()
	rec := c.swap("v1", "s1", api.StepCordonOut, time.Minute)
	c.promoted(rec, "s1", 10*time.Minute)
	c.lists([]string{"v1", "v2", "v3", "s1"}, "v1", "v2", "v3", "s1")
	c.status.LastAction = &api.LastAction{Type: api.ActionCordonOut, Node: "v1", At: now.Add(-10 * time.Second), Error: "cordon v1: the server is currently unable to handle the request"}
	for range 2 {
		p := planOf(t, c)
		assertAction(t, p, api.ActionCordonOut, "v1", api.StepCordonOut, "")
		assert.Equal(t, now.Add(-time.Minute), *p.Since, "the step's clock goes on")
	}
}

func TestPlanASnapshotIsNeverAskedOfTheOutgoingVoterEvenWhenItSortsFirst(t *testing.T) {
	c := newCluster()
	c.swap("v1", "s1", api.StepStart, 0)
	assertAction(t, planOf(t, c), api.ActionSnapshot, "v2", api.StepSnapshot, "asking the voter v2")
}

func TestPlanASteppedDownMemberWhoseNodeNoLongerSaysItVotesIsStillCountedAsAMemberAndRemoved(t *testing.T) {
	c := newCluster()
	rec := atStepDown(c)
	c.report(rec, "v1", api.RequestStepDown, api.StateDone, nil)
	c.condition("v1", api.ConditionEtcdIsVoter, "", "")
	delete(c.nodes["v1"].Labels, api.LabelEtcd)
	p := planOf(t, c)
	assertAction(t, p, api.ActionRemoveMember, "v1", api.StepRemoveMember, "")
	assert.Equal(t, []string{"s1", "v2", "v3"}, p.Voters)

	c.annotate("v1", api.AnnotationEtcdRemove, "true")
	assertAction(t, planOf(t, c), api.ActionNone, "", api.StepRemoveMember, "s1 lists 4 member(s), 3 voter(s) remain")
	c.lists([]string{"v2", "v3", "s1"}, "v2", "v3", "s1")
	assertAction(t, planOf(t, c), api.ActionMemberGone, "v1", api.StepMemberGone, "")
}

func TestPlanOnlyNodesThisSwapCordonedAreUncordoned(t *testing.T) {
	c := newCluster()
	atTail(c)
	c.cordon("v1", "")
	delete(c.nodes["v1"].Annotations, api.AnnotationCordonedBy)
	assertAction(t, planOf(t, c), api.ActionUncordon, "s1", api.StepUncordon, "")
	c.nodes["s1"].Spec.Unschedulable = false
	assertAction(t, planOf(t, c), api.ActionEnd, "", api.StepEnd, "ends completed")
}

func TestPlanTextOutputReadsAtAGlance(t *testing.T) {
	c := newCluster()
	atStepDown(c)
	out, _, code := run(t, c.list(), "-o", "text")
	require.Equal(t, 0, code)
	text := string(out)
	for _, want := range []string{
		"step:    step-down  since 2026-11-30T11:59:00Z (1m0s ago, bound 5m0s)",
		"action:  none  (renewing the Lease)",
		"reason:  the removal waits for the step-down while v1 is Ready",
		"swap:    20261130-113000-v1: v1 out, s1 in (manual, started 2026-11-30T11:30:00Z)",
		"voters:  s1 v1 v2 v3",
	} {
		assert.Contains(t, text, want)
	}
}

func TestPlanRefusesBadInputWithExitCode2(t *testing.T) {
	bad := func(edit func(c *cluster)) []byte {
		c := newCluster()
		edit(c)
		return c.list()
	}
	for _, tc := range []struct {
		name string
		list []byte
		want string
	}{
		{"bad JSON says where", []byte("{\"kind\": \"List\",\n \"items\": [\n {\"kind\": }]}"), "invalid JSON at line 3, column 11"},
		{"not a List", []byte(`{"kind":"Node"}`), `missing field "items"`},
		{"an item without a kind", []byte(`{"items":[{"apiVersion":"v1","metadata":{"name":"x"}}]}`), `items[0]: missing field "kind"`},
		{"a Node without a name", []byte(`{"items":[{"apiVersion":"v1","kind":"Node","metadata":{}}]}`), `items[0] (Node): missing field "metadata.name"`},
		{"a Pod without a namespace", []byte(`{"items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}]}`), `items[0] (pod/p): missing field "metadata.namespace"`},
		{"a field of the wrong type", []byte(`{"items":[{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"},"spec":{"unschedulable":"yes"}}]}`),
			`node/n: field "spec.unschedulable": want bool, got a JSON string`},
		{"a malformed report", bad(func(c *cluster) {
			c.annotate("v2", api.AnnotationReport, `{"swap":"x","action":"promote","state":"maybe","at":"2026-11-30T11:00:00Z"}`)
		}),
			`node/v2: annotation fleet-role.io/report: field "state": "maybe" is not one of done, refused, failed`},
		{"a probe that is not JSON", bad(func(c *cluster) { c.probes["v3"] = nil; c.annotate("v3", api.AnnotationProbe, "fast") }),
			"node/v3: annotation fleet-role.io/probe: invalid JSON"},
		{"a request without its swap", bad(func(c *cluster) {
			c.annotate("s1", api.AnnotationRequest, `{"action":"promote","at":"2026-11-30T11:00:00Z"}`)
		}),
			`node/s1: annotation fleet-role.io/request: field "swap": missing`},
		{"a swap record with a bad origin", bad(func(c *cluster) {
			c.holdLease(api.ControllerHolder, &api.SwapRecord{ID: "x", Out: "v1", In: "s1", Origin: "robot", StartedAt: now})
		}), `lease/fleet-role/regrade: annotation fleet-role.io/swap: field "origin": "robot" is not one of manual, automatic`},
		{"a manual request naming one node twice", bad(func(c *cluster) { c.manual = &api.ManualRequest{Out: "v1", In: "v1", At: now} }),
			`configmap/fleet-role/fleet-role-status: key request.json: fields "out" and "in": name the same node "v1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, stderr, code := run(t, tc.list)
			assert.Equal(t, 2, code, "stdout: %s", out)
			assert.Empty(t, out)
			assert.Contains(t, string(stderr), tc.want)
		})
	}
}

func TestPlanRefusesBadUsageWithExitCode2(t *testing.T) {
	c := newCluster()
	_, stderr, code := run(t, c.list(), "--now", "yesterday")
	assert.Equal(t, 2, code)
	assert.Contains(t, string(stderr), `--now "yesterday": want an RFC 3339 time`)

	cfg := filepath.Join(t.TempDir(), "bad.toml")
	require.NoError(t, os.WriteFile(cfg, []byte("version = 1\n[bounds]\njion = \"1m\"\n"), 0o644))
	_, stderr, code = run(t, c.list(), "--config", cfg)
	assert.Equal(t, 2, code)
	assert.Contains(t, string(stderr), `line 3: unknown key "bounds.jion"`)

	_, stderr, code = run(t, c.list(), "-o", "yaml")
	assert.Equal(t, 2, code)
	assert.True(t, strings.Contains(string(stderr), "want json or text"))
}
