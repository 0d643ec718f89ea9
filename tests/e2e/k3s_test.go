package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/fleet-role/fleet-role/swapplan"
)

// The scenarios of k3s's own behaviour around a swap (docs/k3s-fidelity.md):
// reboots, a `server:` that names a demoted host, a server that never
// comes up, Nodes gone NotReady. Each fleet serves several scenarios, one
// after the other, each starting from where the one before left the
// fleet; a scenario that fails leaves the fleet in a state the next ones
// were not written for, so they are skipped.

// inSequence runs the scenarios as subtests, in order, until one fails;
// the one that fails logs the hosts' journals.
func inSequence(t *testing.T, f *Fleet, scenarios ...scenario) {
	t.Helper()
	for i, s := range scenarios {
		if !t.Run(s.name, func(t *testing.T) {
			t.Cleanup(func() {
				if t.Failed() {
					t.Logf("the hosts' journals:\n%s", f.Journals())
				}
			})
			f.During(t, func() { s.run(t) })
		}) {
			for _, rest := range scenarios[i+1:] {
				t.Run(rest.name, func(t *testing.T) { t.Skipf("skipped: %s failed", s.name) })
			}
			return
		}
	}
}

type scenario struct {
	name string
	run  func(t *testing.T)
}

// startedThisBoot says the unit left the inactive state since the host
// booted: systemd keeps no timestamp for a unit it has not started.
func (h *Host) startedThisBoot(unit string) bool {
	out, _ := h.exec("systemctl", "show", "-p", "InactiveExitTimestampMonotonic", "--value", unit)
	return out != "" && out != "0"
}

func TestRebootedHostsAndADemotedServerNameComeBackAsTheirRolesSay(t *testing.T) {
	f := fleet(t, Options{Hosts: []HostSpec{
		{Name: "v1", Role: swapplan.RoleVoter},
		{Name: "v2", Role: swapplan.RoleVoter},
		{Name: "v3", Role: swapplan.RoleVoter},
		{Name: "s1", Role: swapplan.RoleStandby, Docker: true},
		{Name: "s2", Role: swapplan.RoleStandby},
	}})
	v1, v2, s2 := f.Hosts["v1"], f.Hosts["v2"], f.Hosts["s2"]

	inSequence(t, f,
		scenario{"AHostRebootedJustAfterItsDemotionComesBackAsAnAgent", func(t *testing.T) {
			res := f.swap(t, "v1", "s1", 4*time.Minute)
			t.Logf("v1 out, s1 in: %s: %s", res.Result, res.Reason)
			require.Equal(t, swapplan.ResultCompleted, res.Result, res.Reason)
			require.NoError(t, f.Check(swapplan.ResultCompleted))
			before, err := f.Members()
			require.NoError(t, err)
			active, enabled := v1.Unit("k3s.service")
			t.Logf("before the reboot, v1's k3s.service is %s and %s", active, enabled)

			v1.Reboot()
			t.Log("v1 rebooted: fleet-role-agent is active")
			f.Wait(time.Minute, "v1's k3s-agent is active", func() error {
				if active, _ := v1.Unit("k3s-agent.service"); active != "active" {
					return fmt.Errorf("k3s-agent.service is %s", active)
				}
				return nil
			})
			// Note: a k3s server started at boot with its datastore moved
			// aside joins again as a new member (k3s-io/k3s pkg/etcd/etcd.go,
			// (*ETCD).Start and join), a learner first: it shows in the
			// member list within seconds.
			watched := time.Now().Add(30 * time.Second)
			for time.Now().Before(watched) {
				active, enabled := v1.Unit("k3s.service")
				require.Equal(t, "inactive", active, "v1's k3s.service stays stopped after the reboot")
				require.Equal(t, "disabled", enabled, "v1's k3s.service is not started at boot")
				require.False(t, v1.startedThisBoot("k3s.service"), "v1's k3s.service was not started at all since the reboot")
				if m, err := f.Members(); err == nil {
					require.Equal(t, before.Voters, m.Voters, "no new etcd member")
					require.Empty(t, m.Learners, "no new etcd member")
				}
				time.Sleep(time.Second)
			}
			f.WaitReady("v1", corev1.ConditionTrue, time.Minute)
			active, enabled = v1.Unit("k3s-agent.service")
			assert.Equal(t, "active", active, "v1's k3s-agent.service runs")
			assert.Equal(t, "enabled", enabled, "v1's k3s-agent.service starts at boot")
			require.NoError(t, f.Check(swapplan.ResultCompleted))
		}},
		scenario{"AStandbyWhoseServerWasDemotedBeforeItsPromotionJoinsThroughALiveVoter", func(t *testing.T) {
			require.Contains(t, s2.StagedConfig(), fmt.Sprintf("server: https://%s:6443", v1.IP), "s2's config.yaml names v1, as Ansible rendered it")
			require.Equal(t, swapplan.RoleStandby, f.Node("v1").Labels[swapplan.LabelRole], "v1 is demoted")
			m, err := f.Members()
			require.NoError(t, err)
			require.NotContains(t, m.Voters, f.Node("v1").Annotations[swapplan.AnnotationEtcdNodeName])
			live := map[string]bool{}
			for _, n := range []string{"s1", "v2", "v3"} {
				live[f.Hosts[n].IP] = true
			}

			res := f.swap(t, "v2", "s2", 4*time.Minute)
			t.Logf("v2 out, s2 in: %s: %s", res.Result, res.Reason)
			require.Equal(t, swapplan.ResultCompleted, res.Result, res.Reason)
			drop := s2.JoinDropIn()
			t.Logf("s2's drop-in: %q", drop)
			assert.NotContains(t, drop, v1.IP, "s2's k3s does not join through the demoted v1")
			named := ""
			for ip := range live {
				if strings.Contains(drop, fmt.Sprintf("server: https://%s:6443", ip)) {
					named = ip
				}
			}
			assert.NotEmpty(t, named, "s2's drop-in names a voter live when it was promoted (s1, v2 or v3)")
			require.NoError(t, f.Check(swapplan.ResultCompleted), "one cluster, the same ID")
		}},
		scenario{"AHostRebootedMidPromotionComesBackAsItsRoleSays", func(t *testing.T) {
			// v2, demoted above, is a native standby again; its
			// config.yaml names v1, no voter now.
			w := f.WatchMembers()
			prev := f.Status().Last
			_, stderr, code := f.CLI("swap", "v3", "v2")
			require.Equal(t, 0, code, stderr)
			f.atStep([]string{swapplan.StepPromote, swapplan.StepJoin}, 2*time.Minute)
			st := f.Status()
			t.Logf("rebooting v2 at step %s: %s", st.Step, st.Reason)
			v2.Reboot()
			t.Logf("v2 rebooted at step %s: %s", f.Status().Step, f.Status().Reason)

			res := f.waitEnd(t, prev, 6*time.Minute)
			w.Stop()
			t.Logf("result: %s: %s; members: %s", res.Result, res.Reason, w)
			require.Contains(t, []string{swapplan.ResultCompleted, swapplan.ResultRolledBack}, res.Result, res.Reason)
			assert.LessOrEqual(t, len(w.Most()), 4, "never a member beyond the three voters' and the candidate's: %s", w)
			server, agent := "k3s.service", "k3s-agent.service"
			if res.Result == swapplan.ResultRolledBack {
				server, agent = agent, server
			}
			f.Wait(time.Minute, "v2 runs as its role says", func() error {
				if active, enabled := v2.Unit(server); active != "active" || enabled != "enabled" {
					return fmt.Errorf("%s is %s and %s", server, active, enabled)
				}
				if active, enabled := v2.Unit(agent); active != "inactive" || enabled != "disabled" {
					return fmt.Errorf("%s is %s and %s", agent, active, enabled)
				}
				return nil
			})
			require.NoError(t, f.Check(res.Result))
		}},
	)
}

func TestSwapsWhileNodesAreNotReadyOrACandidateNeverComesUp(t *testing.T) {
	f := fleet(t, Options{})
	a1, v2, v3 := f.Hosts["a1"], f.Hosts["v2"], f.Hosts["v3"]

	inSequence(t, f,
		scenario{"ASwapWhileAnAgentsNodeIsNotReadyCompletes", func(t *testing.T) {
			a1.Pause()
			t.Log("a1 paused: its kubelet beats no more")
			f.WaitReady("a1", corev1.ConditionUnknown, NodeMonitorGracePeriod+time.Minute)
			t.Logf("a1's Ready is Unknown")

			res := f.swap(t, "v1", "s1", 4*time.Minute)
			t.Logf("v1 out, s1 in, a1 NotReady: %s: %s", res.Result, res.Reason)
			require.Equal(t, swapplan.ResultCompleted, res.Result, res.Reason)
			assert.Equal(t, corev1.ConditionUnknown, f.Ready("a1"), "a1 was NotReady throughout")
			a1.Unpause()
			f.WaitReady("a1", corev1.ConditionTrue, time.Minute)
			require.NoError(t, f.Check(swapplan.ResultCompleted))
		}},
		scenario{"AVotersNodeNotReadyHoldsASwapNamingIt", func(t *testing.T) {
			// The voters are s1, v2 and v3; v1 is a standby again.
			v2.KeepServerDown()
			t.Log("v2's k3s server stopped and kept from starting")
			f.WaitReady("v2", corev1.ConditionUnknown, NodeMonitorGracePeriod+time.Minute)
			t.Logf("v2's Ready is Unknown")

			prev := f.Status().Last
			_, stderr, code := f.CLI("swap", "v3", "v1")
			require.Equal(t, 0, code, stderr)
			held := time.Now().Add(5 * f.opts.ProbePeriod)
			for time.Now().Before(held) {
				st := f.Status()
				require.Nil(t, st.Swap, "no swap starts while a voter is NotReady: %s", st.Reason)
				time.Sleep(200 * time.Millisecond)
			}
			st := f.Status()
			t.Logf("while v2 was NotReady: %s", st.Reason)
			assert.Contains(t, st.Reason, "the manual request to swap v3 for v1 waits: v2 is not Ready")
			if l := f.Lease(); l != nil && l.Spec.HolderIdentity != nil {
				assert.Empty(t, *l.Spec.HolderIdentity, "no Lease taken")
			}
			assert.False(t, f.Node("v1").Spec.Unschedulable, "v1 not cordoned")

			v2.LetServerUp()
			t.Log("v2's k3s server may start again: the request, kept, is carried out")
			res := f.waitEnd(t, prev, 5*time.Minute)
			t.Logf("v3 out, v1 in: %s: %s", res.Result, res.Reason)
			require.Equal(t, swapplan.ResultCompleted, res.Result, res.Reason)
			require.NoError(t, f.Check(swapplan.ResultCompleted))
		}},
		scenario{"ACandidateWhoseApiserverNeverComesUpIsRemovedAnotherWayAndRolledBack", func(t *testing.T) {
			// The voters are s1, v1 and v2; v3 is a native standby. The
			// bounds are shortened so that the rollback's fallback comes
			// within a minute.
			f.RestartController(map[string]string{"promote": "30s", "join": "30s", "rollback": "30s",
				"remove_fallback": "20s", "remove_by_voter": "40s"})
			before, err := f.Members()
			require.NoError(t, err)
			v3.NeverReady()
			t.Cleanup(v3.MayBeReady)
			t.Log("v3's k3s server will never be ready")

			w := f.WatchMembers()
			var steps []string
			res := f.everyStep(t, "v2", "v3", func(step string) {
				steps = append(steps, step)
				t.Logf("step %s: %s", step, f.Status().Reason)
			})
			w.Stop()
			t.Logf("result: %s: %s; steps %v; members: %s", res.Result, res.Reason, steps, w)
			require.Equal(t, swapplan.ResultRolledBack, res.Result, res.Reason)
			assert.NotEmpty(t, w.Named("v3"), "v3's member joined: %s", w)
			assert.Contains(t, steps, swapplan.StepRemoveByVoter, "a voter's agent removed v3's member")
			assert.NotContains(t, steps, swapplan.StepStuck)
			assert.LessOrEqual(t, len(w.Most()), 4, "never more than the voters' members and v3's")
			m, err := f.Members()
			require.NoError(t, err)
			assert.Equal(t, before.Voters, m.Voters, "the original members")
			n := f.Node("v3")
			assert.Empty(t, n.Annotations[swapplan.AnnotationEtcdNodeName], "v3's server never wrote its metadata")
			assert.Equal(t, swapplan.RoleStandby, n.Labels[swapplan.LabelRole])
			assert.Equal(t, swapplan.RoleVoter, f.Node("v2").Labels[swapplan.LabelRole], "v2 untouched")
			f.Wait(time.Minute, "v3's server stopped", func() error {
				if active, _ := v3.Unit("k3s.service"); active != "inactive" && active != "failed" {
					return fmt.Errorf("k3s.service is %s", active)
				}
				return nil
			})
			require.NoError(t, f.Check(swapplan.ResultRolledBack))
		}},
	)
}
