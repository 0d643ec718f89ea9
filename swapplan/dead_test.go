package swapplan_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// deadWorld is three voters and a standby, v2's host frozen for good at
// the start, a voter called dead after five minutes.
func deadWorld(t *testing.T) *world {
	w := newWorld(t, 3, 1, 0)
	w.cfg.DeadAfter = 5 * time.Minute
	w.cfg.DryRun = true // the judgement alone; the swaps of a dead voter are the tests below
	w.idleFor(time.Minute)
	w.Hosts["v2"].Paused = true
	return w
}

func TestAVoterIsCalledDeadOnlyOnceItsKubeletHasNotBeatenForDeadAfterWithEveryOtherSign(t *testing.T) {
	w := deadWorld(t)
	start := w.now
	var plan swapplan.Plan
	for plan = w.pass(); len(plan.Dead) == 0; plan = w.pass() {
		require.Less(t, w.now.Sub(start), 10*time.Minute, "called dead within twice dead_after")
	}
	took := w.now.Sub(start)
	assert.GreaterOrEqual(t, took, 5*time.Minute, "not before its kubelet's silence reaches dead_after")
	assert.Less(t, took, 5*time.Minute+2*w.tick, "at the first pass after")
	require.Len(t, plan.Dead, 1)
	d := plan.Dead[0]
	assert.Equal(t, "v2", d.Node)
	assert.Equal(t, w.node("v2").MemberName, d.Member)
	assert.Contains(t, d.Reason, "no probe sample since ")
	assert.Contains(t, d.Reason, "not Ready, its kubelet's last heartbeat at ")
	assert.Contains(t, d.Reason, "dead_after 5m0s")
	assert.Contains(t, d.Reason, "unreachable from v1, v3")
	t.Logf("dead: %s", d.Reason)
	assert.Contains(t, plan.Reason, "dry run: would swap v2 for s1 (v2 is dead: no probe sample since ")
}

func TestEachSignOfDeathAloneIsNotEnough(t *testing.T) {
	w := deadWorld(t)
	for plan := w.pass(); len(plan.Dead) == 0; plan = w.pass() {
		require.Less(t, w.now.Sub(epoch), time.Hour)
	}
	base := w.snapshot()
	require.Len(t, swapplan.Next(base).Dead, 1)
	node := func(s swapplan.Snapshot, name string) *swapplan.Node {
		for i := range s.Nodes {
			if s.Nodes[i].Name == name {
				return &s.Nodes[i]
			}
		}
		t.Fatalf("no node %s", name)
		return nil
	}
	for _, c := range []struct {
		name   string
		change func(s *swapplan.Snapshot)
	}{
		{"its agent sampled within three periods", func(s *swapplan.Snapshot) {
			p := *node(*s, "v2").Probe
			p.At = s.Now.Add(-20 * time.Second)
			node(*s, "v2").Probe = &p
		}},
		{"its Node Ready", func(s *swapplan.Snapshot) { node(*s, "v2").Ready = true }},
		{"its kubelet beat within dead_after", func(s *swapplan.Snapshot) { node(*s, "v2").Heartbeat = s.Now.Add(-4 * time.Minute) }},
		{"its kubelet's renewal seen within dead_after, whatever the host's stamp", func(s *swapplan.Snapshot) {
			node(*s, "v2").HeartbeatSeen = s.Now.Add(-time.Minute)
		}},
		{"no heartbeat known", func(s *swapplan.Snapshot) {
			node(*s, "v2").Heartbeat, node(*s, "v2").HeartbeatSeen = time.Time{}, time.Time{}
		}},
		{"another voter reaches its member", func(s *swapplan.Snapshot) {
			p := *node(*s, "v3").Probe
			p.Unreachable = nil
			node(*s, "v3").Probe = &p
		}},
		{"another voter's sample not fresh", func(s *swapplan.Snapshot) {
			p := *node(*s, "v3").Probe
			p.At = s.Now.Add(-time.Minute)
			node(*s, "v3").Probe = &p
		}},
		{"no member name known", func(s *swapplan.Snapshot) { node(*s, "v2").MemberName = "" }},
		{"no dead_after", func(s *swapplan.Snapshot) { s.Config.DeadAfter = 0 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := w.snapshot()
			c.change(&s)
			assert.Empty(t, swapplan.Next(s).Dead)
		})
	}
}

func TestAVoterIsDeadOnceItsLastHeartbeatIsExactlyDeadAfterOld(t *testing.T) {
	w := deadWorld(t)
	for plan := w.pass(); len(plan.Dead) == 0; plan = w.pass() {
		require.Less(t, w.now.Sub(epoch), time.Hour)
	}
	at := func(age time.Duration) swapplan.Plan {
		s := w.snapshot()
		for i := range s.Nodes {
			if s.Nodes[i].Name == "v2" {
				s.Nodes[i].Heartbeat, s.Nodes[i].HeartbeatSeen = s.Now.Add(-age), s.Now.Add(-age)
			}
		}
		return swapplan.Next(s)
	}
	assert.Len(t, at(5*time.Minute).Dead, 1, "dead_after old: dead")
	assert.Empty(t, at(5*time.Minute-time.Nanosecond).Dead, "younger: not yet")
}

func TestAVoterThatComesBackIsNoLongerDead(t *testing.T) {
	w := deadWorld(t)
	for plan := w.pass(); len(plan.Dead) == 0; plan = w.pass() {
		require.Less(t, w.now.Sub(epoch), time.Hour)
	}
	w.Hosts["v2"].Paused = false
	for plan := w.pass(); len(plan.Dead) > 0; plan = w.pass() {
		require.Less(t, w.now.Sub(epoch), 2*time.Hour, "back within a probe period or so")
	}
}

// steps are the steps the swap's plans went through, in order, each once.
func (w *world) steps(id string) []string {
	var out []string
	for _, p := range w.plans {
		if p.Swap == nil || p.Swap.ID != id || p.Step == "" {
			continue
		}
		if len(out) == 0 || out[len(out)-1] != p.Step {
			out = append(out, p.Step)
		}
	}
	return out
}

// deadSwapped waits for v2 to be dead, the dry run off, and runs the
// automatic swap of it to its end, the quorum oracle checking every pass.
func deadSwapped(t *testing.T, w *world) *api.SwapResult {
	t.Helper()
	w.cfg.DryRun = false
	w.checks = append(w.checks, quorumKept(t))
	res := w.run(1000)
	require.Equal(t, "v2", res.Out)
	return res
}

func TestADeadVoterIsSwappedAutomaticallyItsMemberRemovedBeforeTheCandidateIsPromotedWithQuorumKept(t *testing.T) {
	w := deadWorld(t)
	res := deadSwapped(t, w)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, api.OriginAutomatic, res.Origin)
	assert.Equal(t, []string{"v2"}, res.Pending, "its host never reported the finish of its demotion")
	assert.Contains(t, res.Reason, "the dead voter v2 was replaced and did not come back")
	steps := w.steps(res.ID)
	t.Logf("steps: %v, %s", steps, res.EndedAt.Sub(res.StartedAt))
	assert.Equal(t, []string{api.StepStart, api.StepSnapshot, api.StepCordonIn, api.StepDrainIn, api.StepCordonOut, api.StepStepDown,
		api.StepRemoveMember, api.StepMemberGone, api.StepPromote, api.StepJoin, api.StepCleanUp, api.StepUncordon, api.StepEnd}, steps,
		"the dead voter's member goes first; nothing waits on its runners or its drain")
	var removals int
	for _, a := range w.actions() {
		if a == api.ActionRemoveMember+" v2" {
			removals++
		}
	}
	assert.Equal(t, 1, removals, "its removal is asked once and then waited for: %v", w.actions())
	assert.Equal(t, api.RoleStandby, w.node("v2").Role)
	assert.Equal(t, api.RoleVoter, w.node("s1").Role)
	assert.Equal(t, []string{"s1", "v1", "v3"}, w.voterNodes())
	v2 := w.node("v2")
	assert.True(t, v2.Unschedulable, "left cordoned for its agent")
	assert.Equal(t, res.ID, v2.MemberGone, "its member-gone and step-down stay for its agent")

	// Its host comes back: its agent finishes its demotion by what stayed
	// on its Node, which is then cleared and uncordoned.
	w.Hosts["v2"].Paused = false
	w.runUntil(200, func(swapplan.Plan) bool { n := w.node("v2"); return n.MemberGone == "" && !n.Unschedulable })
	assert.Equal(t, "agent", w.Hosts["v2"].RoleFile)
	assert.False(t, w.Hosts["v2"].Server)
}

func TestADeadVoterIsNotSwappedWhileAnotherVoterIsUnhealthyAndTheReasonSaysSo(t *testing.T) {
	w := deadWorld(t)
	for plan := w.pass(); len(plan.Dead) == 0; plan = w.pass() {
		require.Less(t, w.now.Sub(epoch), time.Hour)
	}
	w.cfg.DryRun = false
	w.Hosts["v3"].UnhealthyUntil = w.now.Add(10 * time.Minute)
	plan := w.runUntil(10, func(p swapplan.Plan) bool { return strings.Contains(p.Reason, "v3") })
	assert.Contains(t, plan.Reason, "the automatic decision to swap v2 for s1 waits: ")
	assert.Nil(t, plan.Swap)
	plan = w.idleFor(9 * time.Minute)
	assert.Nil(t, plan.Swap, "no swap starts while v3 is unhealthy")
	res := deadSwapped(t, w)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
}

func TestADeadVoterThatComesBackBeforeAnythingWasAskedOfItAbandonsItsSwap(t *testing.T) {
	w := deadWorld(t)
	w.cfg.DryRun = false
	w.node("s1").Pods = append(w.node("s1").Pods, swapplan.Pod{Namespace: "arc", Name: "runner-1", Runner: true})
	w.runUntil(100, func(p swapplan.Plan) bool { return p.Step == api.StepRunnersIn })
	w.Hosts["v2"].Paused = false
	w.node("s1").Pods = w.node("s1").Pods[:len(w.node("s1").Pods)-1] // the runner finished
	res := w.run(200)
	assert.Equal(t, api.ResultAbandoned, res.Result)
	assert.Contains(t, res.Reason, "the voter v2 is no longer dead by every sign")
	assert.False(t, w.node("s1").Unschedulable)
	assert.Empty(t, res.Pending)
	assert.Equal(t, []string{"v1", "v2", "v3"}, w.voterNodes())
}

func TestADeadVoterThatComesBackAfterItsMemberWasRemovedFinishesItsDemotionAndTheSwapCompletesWithNothingPending(t *testing.T) {
	w := deadWorld(t)
	w.cfg.DryRun = false
	w.checks = append(w.checks, quorumKept(t))
	w.runUntil(300, func(p swapplan.Plan) bool { return p.Step == api.StepPromote })
	w.Hosts["v2"].Paused = false
	res := w.run(300)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Empty(t, res.Pending)
	assert.False(t, w.node("v2").Unschedulable, "uncordoned once Ready after its agent started")
	assert.Equal(t, "agent", w.Hosts["v2"].RoleFile)
	assert.Equal(t, []string{"s1", "v1", "v3"}, w.voterNodes())
}

func TestADeadVoterSwapWhoseCandidateNeverVotesRollsBackLeavingTheDeadMemberRemovedAndItsHostPending(t *testing.T) {
	w := deadWorld(t)
	w.Hosts["s1"].NeverJoin = true
	res := deadSwapped(t, w)
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
	assert.Equal(t, []string{"v2"}, res.Pending, "the dead voter keeps its step-down and member-gone")
	assert.Equal(t, []string{"v1", "v3"}, w.voterNodes(), "a removal cannot be taken back: two voters, both up")
	assert.True(t, w.node("v2").Unschedulable, "the dead voter stays cordoned")
	assert.Equal(t, res.ID, w.node("v2").MemberGone)
	assert.False(t, w.node("s1").Unschedulable)
	assert.Equal(t, api.RoleStandby, w.node("s1").Role)
}

func TestAManualSwapOfADeadVoterGoesTheDeadVotersWay(t *testing.T) {
	w := deadWorld(t)
	for plan := w.pass(); len(plan.Dead) == 0; plan = w.pass() {
		require.Less(t, w.now.Sub(epoch), time.Hour)
	}
	w.checks = append(w.checks, quorumKept(t))
	w.request = &api.ManualRequest{Out: "v2", In: "s1", At: w.now, By: "alice"}
	res := w.run(1000)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, api.OriginManual, res.Origin)
	steps := w.steps(res.ID)
	assert.Less(t, slices.Index(steps, api.StepRemoveMember), slices.Index(steps, api.StepPromote), "removal first: %v", steps)
}

func TestADeadVoterSwapHoldsAtItsGatesBeforeTouchingTheDeadVoterWhileAnotherVoterTurnsUnhealthy(t *testing.T) {
	w := deadWorld(t)
	w.cfg.DryRun = false
	w.runUntil(100, func(p swapplan.Plan) bool { return p.Step == api.StepCordonIn })
	w.Hosts["v3"].UnhealthyUntil = w.now.Add(5 * time.Minute)
	plan := w.runUntil(20, func(p swapplan.Plan) bool { return p.Step == api.StepGates })
	assert.Contains(t, plan.Reason, "gates held, the dead voter v2 is not touched: ")
	assert.Contains(t, plan.Reason, "v3")
	for w.now.Add(w.tick).Before(w.Hosts["v3"].UnhealthyUntil) { // the next pass samples v3 unhealthy still
		p := w.pass()
		require.NotContains(t, []string{api.ActionCordonOut, api.ActionStepDown, api.ActionRemoveMember}, p.Action.Type, "nothing asked of the dead voter while v3 is unhealthy: %s", p.Reason)
	}
	w.checks = append(w.checks, quorumKept(t))
	res := w.run(300)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
}

func TestADeadVoterIsSwappedWithinTheCooldownOfTheSwapBefore(t *testing.T) {
	w := deadWorld(t)
	until := w.now.Add(6 * time.Hour)
	w.status.CooldownUntil = &until
	res := deadSwapped(t, w)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.True(t, w.now.Before(until))
}

func TestADeadVoterSwapWhoseCandidatesNodeIsDeletedOnceTheDeadVoterIsCordonedRollsBackAndUncordonsIt(t *testing.T) {
	w := deadWorld(t)
	w.cfg.DryRun = false
	w.checks = append(w.checks, quorumKept(t))
	w.runUntil(300, acting(api.ActionCordonOut, "v2"))
	w.deleteNode("s1")
	res := w.run(300)
	assert.Equal(t, api.ResultRolledBack, res.Result, "the dead voter was cordoned: not nothing changed (%s)", res.Reason)
	assert.Contains(t, res.Reason, "the candidate's Node s1 was deleted before the outgoing voter was asked to step down")
	assert.False(t, w.node("v2").Unschedulable, "the rollback uncordons it")
	assert.Empty(t, w.node("v2").CordonedBy)
	assert.Equal(t, []string{"v1", "v2", "v3"}, w.membersOf(), "nothing was asked of its member")
}

// A dead voter's member is removed only once the other voters that vote
// are a majority of the members with it: etcd could not commit the
// removal otherwise. The removal waits while one of the two others does
// not answer its agent, and goes on once it does.
func TestADeadVotersRemovalWaitsWhileTheOtherVotersThatVoteAreNoMajorityOfTheMembersWithIt(t *testing.T) {
	w := deadWorld(t)
	w.cfg.DryRun = false
	w.runUntil(300, acting(api.ActionStepDown, "v2"))
	answers := w.unanswering("v3")
	var last swapplan.Plan
	for range 20 {
		last = w.pass()
		require.NotEqual(t, api.ActionRemoveMember, last.Action.Type, last.Reason)
		require.Equal(t, api.StepRemoveMember, last.Step, last.Reason)
	}
	assert.Contains(t, last.Reason, "removal held: 1 remaining voter(s) vote, not a majority (2) of the 3 members with v2's, which is down: "+
		"v3's probe says unhealthy: etcd did not answer within 2s")
	answers()
	w.runUntil(20, acting(api.ActionRemoveMember, "v2"))
	res := w.run(300)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
}
