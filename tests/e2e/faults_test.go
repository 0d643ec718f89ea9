package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"

	"github.com/fleet-role/fleet-role/api"
)

// The scenarios of faults around a swap and of k3s's own behaviour
// (docs/k3s-fidelity.md): hosts that hang, reboot or lose their etcd
// link, the controller and the agents killed, Nodes gone NotReady, a
// server that never comes up. They share one fleet, deployed as a user
// deploys it: each starts from where the one before left the fleet, so
// a scenario that fails leaves the fleet in a state the next ones were
// not written for, and they are skipped.

// FaultHosts is the fleet of the fault scenarios: two native voters, the
// first the bootstrap host, a voter and a standby on Docker hosts, a
// native standby, and a native agent.
var FaultHosts = []HostSpec{
	{Name: "v1", Role: api.RoleVoter},
	{Name: "v2", Role: api.RoleVoter},
	{Name: "v3", Role: api.RoleVoter, Docker: true},
	{Name: "s1", Role: api.RoleStandby, Docker: true},
	{Name: "s2", Role: api.RoleStandby},
	{Name: "a1", Role: api.RoleAgent},
}

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
			f.During(t, func() { f.writeThroughout(t, func() { s.run(t) }) })
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

// writeThroughout writes to etcd while fn runs and then holds the
// writes to writesAcross's bounds, for as many swaps as ended (no write
// may fail in a scenario where none ended). A write commits only once a
// quorum of the voting members has it, so a stretch without one longer
// than the bound is quorum lost: the writes are this suite's quorum
// oracle.
func (f *Fleet) writeThroughout(t *testing.T, fn func()) {
	t.Helper()
	c := f.Etcd()
	f.writing = &scenarioWrites{c: c, w: f.StartWrites(c)}
	defer func() { f.writing = nil }()
	fn()
	if t.Failed() {
		return
	}
	count := f.writing.w.Count()
	t.Logf("writes across the scenario, %d swaps ended: %s", f.writing.swaps, count)
	writesAcross(t, f, count, f.writing.swaps)
}

// actionSteps are steps of a swap's happy path at which the controller
// acts, publishing the step with the action: a watch of the status sees
// each of them while the controller runs throughout.
var actionSteps = []string{api.StepPromote, api.StepStepDown, api.StepRemoveMember, api.StepMemberGone, api.StepCleanUp, api.StepUncordon}

// publishedSteps are the steps a swap's record says it went through,
// each once, in the order first entered.
func publishedSteps(res *api.SwapResult) []string {
	var out []string
	for _, s := range res.Steps {
		if !slices.Contains(out, s.Step) {
			out = append(out, s.Step)
		}
	}
	return out
}

// startedThisBoot says the unit left the inactive state since the host
// booted: systemd keeps no timestamp for a unit it has not started.
func (h *Host) startedThisBoot(unit string) bool {
	out, _ := h.exec("systemctl", "show", "-p", "InactiveExitTimestampMonotonic", "--value", unit)
	return out != "" && out != "0"
}

// standbyOf is the one standby Node among the hosts named.
func (f *Fleet) standbyOf(t *testing.T, names ...string) string {
	t.Helper()
	var out []string
	for _, n := range names {
		if f.Node(n).Labels[api.LabelRole] == api.RoleStandby {
			out = append(out, n)
		}
	}
	require.Len(t, out, 1, "one standby among %v", names)
	return out[0]
}

// holds asks for a manual swap and checks that none starts while the
// probe periods go by: no Lease taken, the standby not cordoned. It
// returns the last swap before the request.
func (f *Fleet) holds(t *testing.T, out, in string) *api.SwapResult {
	t.Helper()
	prev := f.Status().Last
	_, stderr, code := f.CLI("swap", out, in)
	require.Equal(t, 0, code, stderr)
	f.noSwapStarts(t)
	assert.False(t, f.Node(in).Spec.Unschedulable, "%s not cordoned", in)
	return prev
}

func TestFaultsAroundSwapsOnADeployedFleet(t *testing.T) {
	f := Deploy(t, Options{Hosts: FaultHosts, Log: t.Logf})
	f.WaitFit(3 * time.Minute)
	v1, v2, v3, s1, s2, a1 := f.Hosts["v1"], f.Hosts["v2"], f.Hosts["v3"], f.Hosts["s1"], f.Hosts["s2"], f.Hosts["a1"]

	inSequence(t, f,
		scenario{"ASwapIsHeldWhileAVoterIsPausedAndGoesOnOnceItIsBack", func(t *testing.T) {
			f.offline(v2)
			v2.Pause()
			t.Log("v2 paused")
			f.Wait(time.Minute, "v2's probe is silent", func() error {
				if st := f.Status(); st.Verdicts["v2"].State != api.VerdictSilent {
					return fmt.Errorf("v2's verdict %q", st.Verdicts["v2"].State)
				}
				return nil
			})
			prev := f.holds(t, "v1", "s1")
			st := f.Status()
			t.Logf("while v2 was paused: %s", st.Reason)
			assert.Contains(t, st.Reason, "the manual request to swap v1 for s1 waits: voter v2's probe has been silent since")

			v2.Unpause()
			t.Log("v2 back: the request, kept, is carried out")
			res := f.waitEnd(t, prev, 4*time.Minute)
			f.ended(t, res, api.ResultCompleted)
		}},
		scenario{"AStandbyWhoseServerWasDemotedBeforeItsPromotionJoinsThroughALiveVoter", func(t *testing.T) {
			require.Contains(t, s2.StagedConfig(), fmt.Sprintf("server: https://%s:6443", v1.IP), "s2's config.yaml names v1, as the operator staged it")
			require.Equal(t, api.RoleStandby, f.Node("v1").Labels[api.LabelRole], "v1 is demoted")
			m, err := f.Members()
			require.NoError(t, err)
			require.NotContains(t, m.Voters, f.Node("v1").Annotations[api.AnnotationEtcdNodeName])
			live := []string{s1.IP, v2.IP, v3.IP}

			res := f.swap(t, "v2", "s2", 4*time.Minute)
			t.Logf("v2 out, s2 in: %s: %s", res.Result, res.Reason)
			require.Equal(t, api.ResultCompleted, res.Result, res.Reason)
			drop := s2.JoinDropIn()
			t.Logf("s2's drop-in: %q", drop)
			assert.NotContains(t, drop, v1.IP+":", "s2's k3s does not join through the demoted v1")
			assert.True(t, slices.ContainsFunc(live, func(ip string) bool {
				return strings.Contains(drop, fmt.Sprintf("server: https://%s:6443", ip))
			}), "s2's drop-in names a voter live when it was promoted (s1, v2 or v3)")
			require.NoError(t, f.Check(api.ResultCompleted), "one cluster, the same ID")
		}},
		scenario{"ASwapWhileAnAgentsNodeIsNotReadyCompletes", func(t *testing.T) {
			// The voters are s1, s2 and v3; v1 and v2 are native standbys.
			a1.Pause()
			t.Log("a1 paused: its kubelet beats no more")
			f.WaitReady("a1", corev1.ConditionUnknown, NodeMonitorGracePeriod+time.Minute)
			t.Logf("a1's Ready is Unknown")

			f.waitFreshProbe("v1", time.Minute)
			res := f.swap(t, "v3", "v1", 4*time.Minute)
			t.Logf("v3 out, v1 in, a1 NotReady: %s: %s", res.Result, res.Reason)
			require.Equal(t, api.ResultCompleted, res.Result, res.Reason)
			assert.Equal(t, corev1.ConditionUnknown, f.Ready("a1"), "a1 was NotReady throughout")
			a1.Unpause()
			f.WaitReady("a1", corev1.ConditionTrue, time.Minute)
			require.NoError(t, f.Check(api.ResultCompleted))
		}},
		scenario{"TheOutgoingVoterPausedMidSwapHoldsTheSwapUntilItIsBack", func(t *testing.T) {
			// The voters are s1, s2 and v1; s1, a Docker host, goes out.
			f.waitFreshProbe("v2", time.Minute)
			prev := f.Status().Last
			_, stderr, code := f.CLI("swap", "s1", "v2")
			require.Equal(t, 0, code, stderr)
			// Paused as soon as the swap is under way: the controller can
			// tell a paused voter only once its last sample is no longer
			// fresh (two probe periods), which the candidate's promotion
			// and join outlast.
			f.Wait(time.Minute, "the swap starts", func() error {
				if st := f.Status(); st.Swap == nil {
					return fmt.Errorf("no swap: %s", st.Reason)
				}
				return nil
			})
			f.offline(s1)
			s1.Pause()
			t.Logf("s1 paused at step %s, its engine's containers with it", f.Status().Step)
			held := time.Now().Add(6 * f.opts.ProbePeriod)
			for time.Now().Before(held) {
				st := f.Status()
				require.NotNil(t, st.Swap, "the swap goes on: %s", st.Reason)
				require.NotContains(t, []string{api.StepStepDown, api.StepRemoveMember, api.StepMemberGone}, st.Step,
					"nothing is asked of a paused voter: %s", st.Reason)
				time.Sleep(200 * time.Millisecond)
			}
			m, err := f.Members()
			require.NoError(t, err)
			assert.Contains(t, m.Voters, f.Node("s1").Annotations[api.AnnotationEtcdNodeName], "s1's member stays while s1 is paused")
			t.Logf("while s1 was paused: step %s: %s", f.Status().Step, f.Status().Reason)
			s1.Unpause()
			t.Log("s1 back")

			res := f.waitEnd(t, prev, 4*time.Minute)
			t.Logf("result: %s: %s", res.Result, res.Reason)
			f.ended(t, res, api.ResultCompleted)
		}},
		scenario{"TheControllerKilledAtEveryStepFinishesTheSwap", func(t *testing.T) {
			// The voters are v1, v2 and s2; v3, a Docker host, comes in.
			f.waitFreshProbe("v3", time.Minute)
			var killed []string
			res := f.everyStep(t, "v1", "v3", func(step string) {
				f.KillController()
				killed = append(killed, step)
			})
			t.Logf("both replicas killed at %d steps: %v", len(killed), killed)
			f.ended(t, res, api.ResultCompleted)
			// Note: a replica killed after an action and before the status
			// write that publishes its step leaves the step to its
			// successor, which may find it done and publish the next: the
			// steps killed at are those the swap published, as its record
			// has them.
			assert.Equal(t, publishedSteps(res), killed, "killed at every step the swap published")
			assert.GreaterOrEqual(t, len(killed), 5, "killed at most steps")
			f.WaitRolledOut(time.Minute)
		}},
		scenario{"TheAgentsKilledAtEveryStepFinishTheSwap", func(t *testing.T) {
			// The voters are v2, v3 and s2; s1 comes in.
			f.waitFreshProbe("s1", time.Minute)
			var killed []string
			res := f.everyStep(t, "s2", "s1", func(step string) {
				s2.KillAgent()
				s1.KillAgent()
				killed = append(killed, step)
			})
			t.Logf("both agents killed at %d steps: %v", len(killed), killed)
			f.ended(t, res, api.ResultCompleted)
			assert.Equal(t, publishedSteps(res), killed, "killed at every step the swap published")
			assert.Subset(t, killed, actionSteps, "killed at every step the controller acts at")
		}},
		scenario{"AVotersNodeNotReadyHoldsASwapNamingIt", func(t *testing.T) {
			// The voters are v2, v3 and s1; v1 is a native standby again.
			f.offline(v2)
			v2.KeepServerDown()
			t.Log("v2's k3s server stopped and kept from starting")
			f.WaitReady("v2", corev1.ConditionUnknown, NodeMonitorGracePeriod+time.Minute)
			t.Logf("v2's Ready is Unknown")

			f.waitFreshProbe("v1", time.Minute)
			prev := f.holds(t, "v3", "v1")
			f.heldNaming(t, "the manual request to swap v3 for v1 waits: v2 is not Ready", 2*time.Minute)

			v2.LetServerUp()
			t.Log("v2's k3s server may start again: the request, kept, is carried out")
			res := f.waitEnd(t, prev, 5*time.Minute)
			t.Logf("v3 out, v1 in: %s: %s", res.Result, res.Reason)
			f.ended(t, res, api.ResultCompleted)
		}},
		scenario{"ACandidateWhoseApiserverNeverComesUpIsRemovedAnotherWayAndRolledBack", func(t *testing.T) {
			// The voters are v1, v2 and s1, as the swap above ended (of
			// one of v1 and s2 when run alone); the native standby of
			// the two comes in. The
			// bounds are shortened, by the playbook, so that the
			// rollback's fallback comes within a minute.
			in := f.standbyOf(t, "v1", "s2")
			cand := f.Hosts[in]
			f.Reconfigure(map[string]string{"promote": "30s", "join": "30s", "rollback": "30s",
				"remove_fallback": "20s", "remove_by_voter": "40s"})
			before, err := f.Members()
			require.NoError(t, err)
			cand.NeverReady()
			t.Cleanup(cand.MayBeReady)
			t.Logf("%s's k3s server will never be ready", in)

			f.waitFreshProbe(in, time.Minute)
			w := f.WatchMembers()
			var steps []string
			res := f.everyStep(t, "v2", in, func(step string) {
				steps = append(steps, step)
				t.Logf("step %s: %s", step, f.Status().Reason)
			})
			w.Stop()
			t.Logf("result: %s: %s; steps %v; members: %s", res.Result, res.Reason, steps, w)
			require.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
			if !assert.NotEmpty(t, w.Named(in), "%s's member joined and started: %s", in, w) {
				out, _ := cand.exec("journalctl", "--no-pager", "-o", "short-precise", "-n", "60", "-u", "k3s")
				t.Logf("%s's k3s server, its last lines: %s", in, out)
			}
			assert.Contains(t, steps, api.StepRemoveByVoter, "a voter's agent removed %s's member", in)
			assert.NotContains(t, steps, api.StepStuck)
			assert.LessOrEqual(t, len(w.Most()), 4, "never more than the voters' members and %s's", in)
			m, err := f.Members()
			require.NoError(t, err)
			assert.Equal(t, before.Voters, m.Voters, "the original members")
			n := f.Node(in)
			assert.Empty(t, n.Annotations[api.AnnotationEtcdNodeName], "%s's server never wrote its metadata", in)
			assert.Equal(t, api.RoleStandby, n.Labels[api.LabelRole])
			assert.Equal(t, api.RoleVoter, f.Node("v2").Labels[api.LabelRole], "v2 untouched")
			f.Wait(time.Minute, in+"'s server stopped", func() error {
				if active, _ := cand.Unit("k3s.service"); active != "inactive" && active != "failed" {
					return fmt.Errorf("k3s.service is %s", active)
				}
				return nil
			})
			require.NoError(t, f.Check(api.ResultRolledBack))
		}},
	)
}
