package swapplan_test

import (
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
	assert.Equal(t, "no swap: no voter is unfit; v2 is dead, and a dead voter is not swapped automatically: fleet-role swap v2 STANDBY replaces it", plan.Reason)
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

func TestAManualSwapOfADeadVoterCompletesWithItsDemotionPendingAndQuorumKept(t *testing.T) {
	w := deadWorld(t)
	for plan := w.pass(); len(plan.Dead) == 0; plan = w.pass() {
		require.Less(t, w.now.Sub(epoch), time.Hour)
	}
	w.checks = append(w.checks, quorumKept(t))
	w.request = &api.ManualRequest{Out: "v2", In: "s1", At: w.now, By: "alice"}
	res := w.run(1000)
	t.Logf("%s after %s: %s", res.Result, res.EndedAt.Sub(res.StartedAt), res.Reason)
	assert.Equal(t, api.ResultCompleted, res.Result, res.Reason)
	assert.Equal(t, []string{"v2"}, res.Pending, "its host never reported the finish of its demotion")
	assert.Equal(t, api.RoleStandby, w.node("v2").Role)
	assert.Equal(t, api.RoleVoter, w.node("s1").Role)
}
