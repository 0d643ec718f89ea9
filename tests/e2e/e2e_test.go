package e2e

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/swapplan"
)

// fleet starts the scenarios' fleet, by default three voters, the first
// the bootstrap host, a standby on the Docker platform and an agent, and
// its controller.
func fleet(t *testing.T, opts Options) *Fleet {
	if opts.Hosts == nil {
		opts.Hosts = append(slices.Clone(VotersAndStandby), HostSpec{Name: "a1", Role: swapplan.RoleAgent})
	}
	opts.Log = t.Logf
	f := Start(t, opts)
	f.StartController()
	return f
}

// swap asks for a manual swap and waits for its end.
func (f *Fleet) swap(t *testing.T, out, in string, timeout time.Duration) *swapplan.SwapResult {
	t.Helper()
	prev := f.Status().Last
	_, stderr, code := f.CLI("swap", out, in)
	require.Equal(t, 0, code, stderr)
	return f.waitEnd(t, prev, timeout)
}

// waitEnd waits for a swap to end after prev, the last one before.
func (f *Fleet) waitEnd(t *testing.T, prev *swapplan.SwapResult, timeout time.Duration) *swapplan.SwapResult {
	t.Helper()
	var st swapplan.Status
	f.Wait(timeout, "the swap ends", func() error {
		st = f.Status()
		if st.Last != nil && st.Swap == nil && (prev == nil || st.Last.ID != prev.ID) {
			return nil
		}
		return fmt.Errorf("step %s: %s", st.Step, st.Reason)
	})
	return st.Last
}

func TestASwapInAndOutWithWritesThroughoutThenTheBootstrapHostPromotedAgain(t *testing.T) {
	// The writes are counted at k3s's own etcd timing.
	f := fleet(t, Options{ElectionTimeout: K3sElectionTimeout})
	c := f.Etcd()

	w := f.StartWrites(c)
	res := f.swap(t, "v1", "s1", 4*time.Minute)
	count := w.Count()
	t.Logf("v1 out, s1 in: %s; writes: %s", res.Result, count)
	require.Equal(t, swapplan.ResultCompleted, res.Result, res.Reason)
	require.NoError(t, f.Check(swapplan.ResultCompleted))
	assert.Equal(t, 0, count.Failed, "no failed write with the leader moved")
	assert.False(t, count.Unanswered)

	// As an operator would: v1 is asked for once its agent samples it
	// again after its demotion (fleet-role swap refuses a host without a
	// fresh sample).
	f.waitFreshProbe("v1", time.Minute)
	w = f.StartWrites(c)
	res = f.swap(t, "v2", "v1", 4*time.Minute)
	count = w.Count()
	t.Logf("v2 out, v1 (the bootstrap host) in again: %s; writes: %s", res.Result, count)
	require.Equal(t, swapplan.ResultCompleted, res.Result, res.Reason)
	require.NoError(t, f.Check(swapplan.ResultCompleted))
	assert.Equal(t, 0, count.Failed)
}

// waitFreshProbe waits for a probe sample of the host taken after now.
func (f *Fleet) waitFreshProbe(name string, timeout time.Duration) {
	f.t.Helper()
	since := time.Now()
	f.Wait(timeout, name+" has a fresh probe sample", func() error {
		var p swapplan.Probe
		if err := json.Unmarshal([]byte(f.Node(name).Annotations[swapplan.AnnotationProbe]), &p); err != nil {
			return err
		}
		if !p.At.After(since) {
			return fmt.Errorf("its last sample is of %s", p.At.Format(time.RFC3339))
		}
		return nil
	})
}

// atStep waits for the swap under way to reach one of the steps.
func (f *Fleet) atStep(steps []string, timeout time.Duration) {
	f.Wait(timeout, "the swap reaches "+strings.Join(steps, " or "), func() error {
		st := f.Status()
		if st.Swap != nil && slices.Contains(steps, st.Step) {
			return nil
		}
		return fmt.Errorf("step %q: %s", st.Step, st.Reason)
	})
}

func TestTheOutgoingVoterPausedMidSwapHoldsTheSwapUntilItIsBack(t *testing.T) {
	f := fleet(t, Options{})
	prev := f.Status().Last
	_, stderr, code := f.CLI("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	f.atStep([]string{swapplan.StepJoin, swapplan.StepGates, swapplan.StepCordonOut}, 2*time.Minute)

	f.Hosts["v1"].Pause()
	t.Log("v1 paused")
	held := time.Now().Add(6 * f.opts.ProbePeriod)
	for time.Now().Before(held) {
		st := f.Status()
		require.NotNil(t, st.Swap, "the swap goes on: %s", st.Reason)
		require.NotContains(t, []string{swapplan.StepStepDown, swapplan.StepRemoveMember, swapplan.StepMemberGone}, st.Step,
			"nothing is asked of a paused voter: %s", st.Reason)
		time.Sleep(200 * time.Millisecond)
	}
	m, err := f.Members()
	require.NoError(t, err)
	assert.Contains(t, m.Voters, f.Node("v1").Annotations[swapplan.AnnotationEtcdNodeName], "v1's member stays while v1 is paused")
	t.Logf("while v1 was paused: step %s: %s", f.Status().Step, f.Status().Reason)
	f.Hosts["v1"].Unpause()
	t.Log("v1 back")

	res := f.waitEnd(t, prev, 4*time.Minute)
	t.Logf("result: %s: %s", res.Result, res.Reason)
	require.Equal(t, swapplan.ResultCompleted, res.Result, res.Reason)
	require.NoError(t, f.Check(swapplan.ResultCompleted))
}

func TestTheCandidatesPeerPortDroppedRollsTheSwapBackLeavingNothingBehind(t *testing.T) {
	f := fleet(t, Options{Bounds: map[string]string{"join": "25s"}, Hosts: []HostSpec{
		{Name: "v1", Role: swapplan.RoleVoter},
		{Name: "v2", Role: swapplan.RoleVoter},
		{Name: "v3", Role: swapplan.RoleVoter},
		{Name: "s1", Role: swapplan.RoleStandby},
	}})
	f.Hosts["s1"].DropPeerPort()
	t.Log("s1's etcd peer port dropped")

	res := f.swap(t, "v1", "s1", 4*time.Minute)
	t.Logf("result: %s: %s", res.Result, res.Reason)
	require.Equal(t, swapplan.ResultRolledBack, res.Result, res.Reason)
	require.NoError(t, f.Check(swapplan.ResultRolledBack))
	m, err := f.Members()
	require.NoError(t, err)
	assert.Len(t, m.Voters, 3)
	s1 := f.Node("s1")
	assert.Equal(t, swapplan.RoleStandby, s1.Labels[swapplan.LabelRole])
	assert.NotEqual(t, "true", s1.Labels[swapplan.LabelEtcd], "s1's server labels cleaned up")
	assert.Equal(t, swapplan.RoleVoter, f.Node("v1").Labels[swapplan.LabelRole], "v1 untouched")

	f.Hosts["s1"].RestorePeerPort()
	f.Wait(time.Minute, "s1's server stopped and its agent running", func() error {
		if active, enabled := f.Hosts["s1"].Unit("k3s.service"); active != "inactive" && active != "failed" || enabled != "disabled" {
			return fmt.Errorf("k3s.service is %s and %s", active, enabled)
		}
		if active, enabled := f.Hosts["s1"].Unit("k3s-agent.service"); active != "active" || enabled != "enabled" {
			return fmt.Errorf("k3s-agent.service is %s and %s", active, enabled)
		}
		return nil
	})
}

func TestASwapIsHeldWhileAVoterIsPausedAndGoesOnOnceItIsBack(t *testing.T) {
	f := fleet(t, Options{})
	f.Hosts["v2"].Pause()
	t.Log("v2 paused")
	f.Wait(time.Minute, "v2's probe is silent", func() error {
		if st := f.Status(); st.Verdicts["v2"].State != swapplan.VerdictSilent {
			return fmt.Errorf("v2's verdict %q", st.Verdicts["v2"].State)
		}
		return nil
	})
	prev := f.Status().Last
	_, stderr, code := f.CLI("swap", "v1", "s1")
	require.Equal(t, 0, code, stderr)
	held := time.Now().Add(5 * f.opts.ProbePeriod)
	for time.Now().Before(held) {
		st := f.Status()
		require.Nil(t, st.Swap, "no swap starts while a voter is paused")
		time.Sleep(200 * time.Millisecond)
	}
	st := f.Status()
	t.Logf("while v2 was paused: %s", st.Reason)
	assert.Contains(t, st.Reason, "v2")
	assert.Nil(t, f.Lease(), "no Lease taken")
	assert.False(t, f.Node("s1").Spec.Unschedulable, "s1 not cordoned")

	f.Hosts["v2"].Unpause()
	t.Log("v2 back: the request, kept, is carried out")
	res := f.waitEnd(t, prev, 4*time.Minute)
	require.Equal(t, swapplan.ResultCompleted, res.Result, res.Reason)
	require.NoError(t, f.Check(swapplan.ResultCompleted))
}

// everyStep runs a swap, calling at once each step the swap enters.
func (f *Fleet) everyStep(t *testing.T, out, in string, at func(step string)) *swapplan.SwapResult {
	t.Helper()
	prev := f.Status().Last
	_, stderr, code := f.CLI("swap", out, in)
	require.Equal(t, 0, code, stderr)
	seen := map[string]bool{}
	var res *swapplan.SwapResult
	f.Wait(6*time.Minute, "the swap ends", func() error {
		st := f.Status()
		if st.Last != nil && st.Swap == nil && (prev == nil || st.Last.ID != prev.ID) {
			res = st.Last
			return nil
		}
		if st.Swap != nil && st.Step != "" && !seen[st.Step] {
			seen[st.Step] = true
			at(st.Step)
		}
		return fmt.Errorf("step %s: %s", st.Step, st.Reason)
	})
	return res
}

func TestTheControllerKilledAtEveryStepAndRestartedFinishesTheSwap(t *testing.T) {
	f := fleet(t, Options{})
	var killed []string
	res := f.everyStep(t, "v1", "s1", func(step string) {
		f.KillController()
		killed = append(killed, step)
		f.StartController()
	})
	t.Logf("killed at %d steps: %v", len(killed), killed)
	require.Equal(t, swapplan.ResultCompleted, res.Result, res.Reason)
	require.NoError(t, f.Check(swapplan.ResultCompleted))
	assert.GreaterOrEqual(t, len(killed), 5, "killed at most steps")
}

func TestTheAgentsKilledAtEveryStepAndRestartedFinishTheSwap(t *testing.T) {
	f := fleet(t, Options{})
	var killed []string
	res := f.everyStep(t, "v2", "s1", func(step string) {
		f.Hosts["v2"].KillAgent()
		f.Hosts["s1"].KillAgent()
		killed = append(killed, step)
	})
	t.Logf("both agents killed at %d steps: %v", len(killed), killed)
	require.Equal(t, swapplan.ResultCompleted, res.Result, res.Reason)
	require.NoError(t, f.Check(swapplan.ResultCompleted))
}

func TestAVoterMadeSlowIsSwappedOutAutomaticallyWithDryRunOff(t *testing.T) {
	f := Start(t, Options{Controller: "\n[verdicts]\nwindow = 5\n", Log: t.Logf, Hosts: VotersAndStandby})
	// As deployed: dry run on until every host is fit, then off.
	f.StartDryRunController()
	f.WaitFit(2 * time.Minute)
	f.StopController()
	f.StartController()
	f.Hosts["v3"].SlowDisk(25)
	t.Log("v3's disk throttled to 25 writes a second")
	f.Wait(2*time.Minute, "a swap starts", func() error {
		if st := f.Status(); st.Swap == nil {
			return fmt.Errorf("v3: %+v; %s", st.Verdicts["v3"], st.Reason)
		}
		return nil
	})
	st := f.Status()
	t.Logf("v3's verdict: %+v", st.Verdicts["v3"])
	res := f.waitEnd(t, nil, 4*time.Minute)
	require.Equal(t, swapplan.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, swapplan.OriginAutomatic, res.Origin)
	assert.Equal(t, "v3", res.Out)
	assert.Equal(t, "s1", res.In)
	require.NoError(t, f.Check(swapplan.ResultCompleted))
}
