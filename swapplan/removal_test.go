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
	"github.com/fleet-role/fleet-role/tests/fleetmodel"
)

// The rollback of a candidate whose server never came up: k3s cannot
// remove its member through the annotation (no etcd label, no node-name or
// node-address), so a voter's agent is asked, and past that the swap stops
// stuck for an operator.

// rollbackOfANeverReadyCandidate runs a swap of v1 for s1 whose server
// never comes up until k3s is asked to remove s1's member.
func rollbackOfANeverReadyCandidate(t *testing.T) *world {
	w := newWorld(t, 3, 1, 0)
	w.Hosts["s1"].NeverReady = true
	w.requestSwap("v1", "s1")
	w.runUntil(200, acting(api.ActionRemoveMember, "s1"))
	require.Empty(t, w.node("s1").MemberName, "k3s never named the member of a server whose apiserver never came up")
	return w
}

func s1Member(w *world) string {
	i := slices.IndexFunc(w.Members, func(m fleetmodel.Member) bool { return m.Node == "s1" })
	if i < 0 {
		return ""
	}
	return w.Members[i].Name
}

func TestTheRemovalOfACandidateK3sCannotRemove(t *testing.T) {
	for _, tc := range []struct {
		name string
		test func(t *testing.T, w *world)
	}{
		{"past remove_fallback a healthy voter that is neither in nor out is asked to remove the member, and the rollback ends with the original members", func(t *testing.T, w *world) {
			name := s1Member(w)
			require.NotEmpty(t, name)
			var plan swapplan.Plan
			for {
				plan = w.pass()
				if plan.Action.Type != api.ActionNone {
					break
				}
				assert.Equal(t, api.StepRemoveCandidate, plan.Step, plan.Reason)
				assert.Contains(t, plan.Reason, "waiting for k3s to remove the member "+name)
			}
			require.Equal(t, api.ActionRemoveByVoter, plan.Action.Type, plan.Reason)
			assert.Equal(t, "v2", plan.Action.Node, "the first voter by name that is not the outgoing v1")
			assert.Equal(t, api.StepRemoveByVoter, plan.Step)
			require.NotNil(t, plan.Action.Request)
			assert.Equal(t, api.RequestRemoveMember, plan.Action.Request.Action)
			assert.Equal(t, name, plan.Action.Request.Member)
			assert.Equal(t, fleetmodel.MemberID(name), plan.Action.Request.MemberID)
			assert.NoError(t, plan.Action.Request.Validate())
			since := w.plans[len(w.plans)-2].Since
			require.NotNil(t, since)
			assert.GreaterOrEqual(t, w.now.Sub(*since), w.cfg.Bounds.RemoveFallback, "not asked before the bound")

			res := w.run(100)
			assert.Equal(t, api.ResultRolledBack, res.Result)
			assert.Empty(t, s1Member(w))
			assert.Len(t, w.Members, 3)
			assert.Equal(t, api.RoleStandby, w.node("s1").Role)
			assert.Nil(t, w.node("v2").Request, "the request is cleared at the end")
		}},
		{"the voter's removal is held while a remaining voter is unhealthy", func(t *testing.T, w *world) {
			w.Hosts["v3"].UnhealthyUntil = w.now.Add(w.cfg.Bounds.RemoveFallback + 3*time.Minute)
			held := 0
			for w.now.Before(w.Hosts["v3"].UnhealthyUntil.Add(-w.tick)) {
				plan := w.pass()
				assert.NotEqual(t, api.ActionRemoveByVoter, plan.Action.Type, plan.Reason)
				if plan.Step == api.StepRemoveCandidate && containsAll(plan.Reason, "held while a voter is unhealthy", "v3") {
					held++
				}
			}
			assert.Greater(t, held, 10, "held past the bound while v3 is unhealthy")
			w.runUntil(5, acting(api.ActionRemoveByVoter, "v2"))
			assert.Equal(t, api.ResultRolledBack, w.run(100).Result)
			assert.Len(t, w.Members, 3)
		}},
		{"past remove_by_voter without an answer the swap stops stuck, holds the Lease, says the command, and goes on once an operator removed the member", func(t *testing.T, w *world) {
			w.Hosts["v2"].RemoveIgnored = true
			name := s1Member(w)
			asked := w.runUntil(50, acting(api.ActionRemoveByVoter, "v2"))
			plan := w.runUntil(50, func(p swapplan.Plan) bool { return p.Action.Type != api.ActionNone })
			require.Equal(t, api.ActionStuck, plan.Action.Type, plan.Reason)
			assert.Equal(t, "s1", plan.Action.Node, "its Event goes on the candidate's Node")
			assert.Equal(t, w.cfg.Bounds.RemoveByVoter+w.tick, w.now.Sub(asked.Action.Request.At), "stuck at the first pass past the bound, not at its last instant")
			assert.Equal(t, api.PhaseStuck, plan.Swap.Phase)
			require.NotNil(t, plan.Swap.Stuck)
			assert.Equal(t, api.Stuck{Node: "s1", Member: name, MemberID: fleetmodel.MemberID(name), Voter: "v2",
				Why: "the agent of v2 did not remove it within 3m0s"}, *plan.Swap.Stuck)
			assert.NoError(t, plan.Swap.Validate())
			command := "member remove " + fleetmodel.MemberID(name)
			assert.Contains(t, plan.Reason, command)

			for range 100 {
				before := w.now
				plan = w.pass()
				assert.Equal(t, api.ActionNone, plan.Action.Type)
				assert.Equal(t, api.StepStuck, plan.Step)
				assert.Contains(t, plan.Reason, command)
				assert.Contains(t, plan.Reason, "Lease stays held")
				assert.True(t, plan.RenewLease)
				assert.Equal(t, api.ControllerHolder, w.lease.Holder)
				assert.True(t, w.lease.RenewTime.After(before), "renewed")
				assert.Equal(t, api.PhaseStuck, w.lease.Swap.Phase)
			}
			// An operator runs the command.
			w.Members = slices.DeleteFunc(w.Members, func(m fleetmodel.Member) bool { return m.Name == name })
			plan = w.runUntil(5, acting(api.ActionMemberGone, "s1"))
			assert.Equal(t, api.PhaseRollback, plan.Swap.Phase, "the rollback goes on")
			assert.Nil(t, plan.Swap.Stuck)
			assert.Equal(t, api.ResultRolledBack, w.run(100).Result)
			assert.Len(t, w.Members, 3)
		}},
		{"a voter's agent that fails the removal stops the swap stuck at once, naming its failure", func(t *testing.T, w *world) {
			w.Hosts["v2"].RemoveFails = true
			w.runUntil(50, acting(api.ActionRemoveByVoter, "v2"))
			plan := w.pass()
			require.Equal(t, api.ActionStuck, plan.Action.Type, plan.Reason)
			assert.Contains(t, plan.Swap.Stuck.Why, "the agent of v2 failed the removal: etcd member remove: injected failure")
			assert.Contains(t, plan.Reason, "as root on v2: etcdctl --endpoints=https://127.0.0.1:2379 --cacert="+api.K3sEtcdCA)
		}},
		{"a controller that restarts while stuck, with the status lost, is still stuck", func(t *testing.T, w *world) {
			w.Hosts["v2"].RemoveFails = true
			w.runUntil(60, acting(api.ActionStuck, "s1"))
			w.status = api.Status{}
			for range 5 {
				plan := w.pass()
				assert.Equal(t, api.StepStuck, plan.Step, plan.Reason)
				assert.Equal(t, api.ActionNone, plan.Action.Type)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.test(t, rollbackOfANeverReadyCandidate(t)) })
	}
}

func TestACandidateWhoseMemberK3sRemovesWithinTheBoundIsNeverRemovedByAVoter(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	// Its member votes and its apiserver runs, so k3s writes the Node's
	// etcd annotations and can remove it; its kubelet's heartbeat stops.
	w.runUntil(100, acting(api.ActionPromote, "s1"))
	w.Hosts["s1"].HeartbeatStuck = true
	w.runUntil(200, acting(api.ActionRemoveMember, "s1"))
	assert.Equal(t, api.ResultRolledBack, w.run(100).Result)
	assert.NotContains(t, w.actions(), "remove-by-voter v2")
	assert.NotContains(t, w.actions(), "stuck s1")
}

func TestStuckSaysTheCommandByNameWhenTheVotersDoNotSayTheMemberID(t *testing.T) {
	st := api.Stuck{Node: "s1", Member: "s1-0a1b2c3d", Voter: "v2"}
	assert.Contains(t, st.Command(), `member list | awk -F', ' '$3 == "s1-0a1b2c3d" {print $1}'`)
	st.MemberID = "8e9e05c52164694d"
	assert.Contains(t, st.Command(), "--cert="+api.K3sEtcdCert+" --key="+api.K3sEtcdKey+" member remove 8e9e05c52164694d")
}

func TestARemoveMemberRequestNamesItsMember(t *testing.T) {
	at := epoch
	for _, tc := range []struct {
		name string
		req  api.Request
		err  string
	}{
		{"one naming the member by name and ID is valid", api.Request{Swap: "x", Action: api.RequestRemoveMember, At: at, Member: "s1-0a1b2c3d", MemberID: "8e9e05c52164694d"}, ""},
		{"one naming no member is refused", api.Request{Swap: "x", Action: api.RequestRemoveMember, At: at}, "names the member"},
		{"one whose ID is not hex is refused", api.Request{Swap: "x", Action: api.RequestRemoveMember, At: at, MemberID: "xyz"}, "not a member ID in hex"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.req.Validate()
			if tc.err == "" {
				assert.NoError(t, err)
				return
			}
			assert.ErrorContains(t, err, tc.err)
		})
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// The member-gone waits for every remaining voter to list, in a fresh
// sample, as many members as remain, the outgoing voter's not among them.
func TestTheMemberGoneWaitsForEachRemainingVotersFreshListOfAsManyMembersAsRemainWithoutTheOutgoingOne(t *testing.T) {
	for name, c := range map[string]struct {
		// hook is given v1's member's name.
		hook func(w *world, v1 string)
		wait string
	}{
		// v2's last sample lists the members that remain, but it is two
		// and a half periods old: not fresh, not yet silent.
		"a stale list": {func(w *world, _ string) {
			p := *w.node("v2").Probe
			p.At = w.now.Add(-25 * time.Second)
			w.node("v2").Probe = &p
		}, "waiting for the remaining voter v2 to report a fresh member list"},
		// v2 lists three members, as many as remain, but v1's among them
		// and not s1's.
		"v1's member among as many as remain": {func(w *world, v1 string) {
			p := *w.node("v2").Probe
			p.Members = nil
			for _, m := range []string{v1, w.Hosts["v2"].Member, w.Hosts["v3"].Member} {
				p.Members = append(p.Members, api.Member{Name: m, ID: fleetmodel.MemberID(m)})
			}
			w.node("v2").Probe = &p
		}, "waiting for the member of v1 to go: v2 lists 3 member(s), 3 voter(s) remain"},
	} {
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, 3, 1, 0)
			v1 := w.Hosts["v1"].Member
			w.requestSwap("v1", "s1")
			w.runUntil(100, acting(api.ActionRemoveMember, "v1"))
			w.hooks = append(w.hooks, func(w *world) { c.hook(w, v1) })
			for range 5 {
				plan := w.pass()
				require.Equal(t, api.ActionNone, plan.Action.Type, plan.Reason)
				assert.Equal(t, api.StepRemoveMember, plan.Step)
				assert.Equal(t, c.wait, plan.Reason)
			}
			w.hooks = nil
			w.runUntil(5, acting(api.ActionMemberGone, "v1"))
			assert.Equal(t, api.ResultCompleted, w.run(50).Result)
		})
	}
}

// k3s's EtcdIsVoter condition lags its member: the candidate whose Node
// still says learner is counted among the voters left once the outgoing
// voter's member is gone.
func TestTheMemberGoneCountsTheCandidateAmongTheRemainingVotersWhileItsNodeStillSaysLearner(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionRemoveMember, "v1"))
	w.hooks = append(w.hooks, func(w *world) {
		w.node("s1").EtcdIsVoter = swapplan.Condition{Status: "False", Reason: api.ReasonMemberIsLearner}
	})
	plan := w.runUntil(5, func(p swapplan.Plan) bool { return p.Action.Type != api.ActionNone })
	assert.Equal(t, "member-gone v1", plan.Action.Type+" "+plan.Action.Node, plan.Reason)
	assert.Equal(t, "every remaining voter lists 3 member(s): telling v1 its member is gone", plan.Reason)
}

// Once k3s says it removed the candidate's member, a voter whose etcd
// still lists it is waited for; no voter is asked to remove it.
func TestARollbackWaitsForAVoterThatStillListsTheCandidatesMemberK3sSaysItRemovedAskingNoVoter(t *testing.T) {
	w := cancelledOnceTheOutgoingVoterIsCordoned(t)
	member := w.Hosts["s1"].Member
	w.hooks = append(w.hooks, func(w *world) {
		if w.node("s1").MemberRemoved() {
			p := *w.node("v3").Probe
			if !slices.ContainsFunc(p.Members, func(m api.Member) bool { return m.Name == member }) {
				p.Members = append(slices.Clone(p.Members), api.Member{Name: member, ID: fleetmodel.MemberID(member)})
			}
			w.node("v3").Probe = &p
		}
	})
	w.runUntil(50, func(swapplan.Plan) bool { return w.node("s1").MemberRemoved() })
	waited, passes := 0, 3*int(w.cfg.Bounds.RemoveFallback/w.tick)
	for range passes {
		plan := w.pass()
		require.Equal(t, api.ActionNone, plan.Action.Type, plan.Reason)
		if plan.Reason == "rolling back: waiting until every voter lists the original members and no more: v3 lists members [s1 v1 v2 v3], expected [v1 v2 v3]" {
			waited++
		}
	}
	assert.GreaterOrEqual(t, waited, passes-2, "waited for v3, past the bound a removal by a voter would have")
}

// A Node says it is an etcd server by k3s's label alone; with every
// label gone mid-swap (an operator's mistake) no voter is known, and the
// swap waits for the members to be listed again, asking nothing.
func TestASwapWhoseNodesAllLostTheirEtcdLabelsWaitsAskingNothing(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.requestSwap("v1", "s1")
	w.runUntil(100, acting(api.ActionRemoveMember, "v1"))
	w.hooks = append(w.hooks, func(w *world) {
		for i := range w.nodes {
			w.nodes[i].ServerLabels = nil
		}
	})
	for range 3 {
		plan := w.pass()
		assert.Equal(t, api.ActionNone, plan.Action.Type, plan.Reason)
	}
}

// A candidate whose member never started (its peer port dropped): etcd
// lists its learner with no name, by its peer URL alone, and k3s's member
// controller, which removes the member its Node names, cannot remove it;
// k3s's learner manager would only after 5 minutes, every other join
// meanwhile refused. The rollback knows it as the candidate's by its peer
// URL's host and asks a voter's agent to remove it by its ID as soon as
// the candidate stepped down, without remove_fallback's wait for k3s.
func TestARolledBackCandidatesLearnerThatNeverStartedIsKnownByItsPeerURLAndRemovedByAVoterAtOnceBeforeK3sLearnerStall(t *testing.T) {
	w := newWorld(t, 3, 1, 0)
	w.Timing.LearnerStall = 5 * time.Minute
	w.cfg.Bounds.Join = time.Minute
	w.Hosts["s1"].NeverStarts = true
	w.requestSwap("v1", "s1")
	joining := w.runUntil(200, func(p swapplan.Plan) bool {
		return p.Step == api.StepJoin && w.Hosts["s1"].Server && len(w.Members) == 4
	})
	t.Logf("joining: %s", joining.Reason)
	added := w.Hosts["s1"].LearnerSince
	name := s1Member(w)
	require.NotEmpty(t, name, "the model keeps the learner's own name; etcd lists it with none")
	var listed []api.Member
	for _, m := range w.node("v2").Probe.Members {
		if m.ID == fleetmodel.MemberID(name) {
			listed = append(listed, m)
		}
	}
	require.Len(t, listed, 1)
	assert.Empty(t, listed[0].Name, "etcd lists it with no name")

	asked := w.runUntil(200, acting(api.ActionRemoveByVoter, "v2"))
	assert.Contains(t, asked.Reason, "k3s cannot remove the member "+fleetmodel.MemberID(name)+" (a learner that never started) of s1")
	require.NotNil(t, asked.Action.Request)
	assert.Empty(t, asked.Action.Request.Member)
	assert.Equal(t, fleetmodel.MemberID(name), asked.Action.Request.MemberID)
	assert.NoError(t, asked.Action.Request.Validate())
	assert.Less(t, w.now.Sub(added), w.Timing.LearnerStall, "asked before k3s's learner manager would remove it")
	for _, p := range w.plans {
		assert.NotEqual(t, api.StepRemoveCandidate, p.Step, "no wait for k3s, which cannot: %s", p.Reason)
	}

	res := w.run(100)
	assert.Equal(t, api.ResultRolledBack, res.Result, res.Reason)
	assert.Empty(t, s1Member(w))
	assert.Len(t, w.Members, 3)
	assert.Less(t, w.now.Sub(added), w.Timing.LearnerStall, "the rollback ended before k3s's learner manager would have removed the learner")
}
