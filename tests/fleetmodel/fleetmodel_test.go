package fleetmodel

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// fleet is three voters and a standby, after a first reaction.
func fleet(t Timing) (*Fleet, []swapplan.Node) {
	f := New(t)
	var nodes []swapplan.Node
	for _, v := range []string{"v1", "v2", "v3"} {
		nodes = append(nodes, f.Add(v, api.RoleVoter, t0.Add(-time.Hour)))
	}
	nodes = append(nodes, f.Add("s1", api.RoleStandby, t0.Add(-time.Hour)))
	f.React(t0, nodes)
	return f, nodes
}

func TestAPromotedStandbyIsALearnerWithoutKubeletOrEtcdMetadataUntilItsMemberVotes(t *testing.T) {
	f, nodes := fleet(Timing{ProbePeriod: 10 * time.Second, CatchUp: 20 * time.Second})
	s1 := &nodes[3]
	require.True(t, s1.Ready)
	s1.Request = &api.Request{Swap: "x", Action: api.RequestPromote, At: t0}
	f.React(t0.Add(time.Second), nodes)
	require.NotNil(t, s1.Report)
	assert.Equal(t, api.StateDone, s1.Report.State)
	for _, at := range []time.Duration{time.Second, 10 * time.Second} {
		f.React(t0.Add(at), nodes)
		assert.False(t, s1.Ready, "a joining server runs no kubelet")
		assert.Empty(t, s1.ServerLabels)
		assert.Empty(t, s1.MemberName)
		assert.Equal(t, swapplan.Condition{Status: "False", Reason: api.ReasonMemberIsLearner}, s1.EtcdIsVoter)
	}
	f.React(t0.Add(30*time.Second), nodes)
	assert.True(t, s1.Ready)
	assert.Equal(t, api.ServerLabels, s1.ServerLabels)
	assert.Equal(t, f.Hosts["s1"].Member, s1.MemberName)
	assert.Equal(t, swapplan.Condition{Status: "True", Reason: api.ReasonMemberNotLearner}, s1.EtcdIsVoter)
}

func TestAVotersAgentRemovesTheMemberNamedButNeverItsOwnNorOneWhoseRemovalBreaksQuorum(t *testing.T) {
	f, nodes := fleet(Timing{})
	remove := func(member string, at time.Time) *api.Report {
		nodes[0].Request = &api.Request{Swap: "x", Action: api.RequestRemoveMember, At: at, Member: member, MemberID: MemberID(member)}
		f.React(at, nodes)
		return nodes[0].Report
	}
	v1, v3 := f.Hosts["v1"].Member, f.Hosts["v3"].Member
	r := remove(v1, t0.Add(time.Second))
	assert.Equal(t, api.StateFailed, r.State)
	assert.Contains(t, r.Message, "this host's own")

	f.Hosts["v2"].Paused = true
	r = remove(v3, t0.Add(2*time.Second))
	assert.Equal(t, api.StateFailed, r.State, "v1 alone of v1 and v2 is up")
	assert.True(t, f.IsMember(v3))

	f.Hosts["v2"].Paused = false
	r = remove(v3, t0.Add(3*time.Second))
	assert.Equal(t, api.StateDone, r.State)
	assert.False(t, f.IsMember(v3))
	r = remove(v3, t0.Add(4*time.Second))
	assert.Equal(t, api.StateDone, r.State, "one already gone is removed")
}

func TestAProbeIsWrittenOnceAPeriodAndAHeartbeatOnceItsOwn(t *testing.T) {
	f, nodes := fleet(Timing{ProbePeriod: 2 * time.Second, Heartbeat: 500 * time.Millisecond})
	v1 := &nodes[0]
	first, beat := v1.Probe, v1.Heartbeat
	require.NotNil(t, first)
	f.React(t0.Add(400*time.Millisecond), nodes)
	assert.Same(t, first, v1.Probe)
	assert.Equal(t, beat, v1.Heartbeat)
	f.React(t0.Add(time.Second), nodes)
	assert.Same(t, first, v1.Probe)
	assert.Equal(t, t0.Add(time.Second), v1.Heartbeat)
	f.React(t0.Add(2*time.Second), nodes)
	assert.Equal(t, t0.Add(2*time.Second), v1.Probe.At)
	var listed []string
	for _, m := range v1.Probe.Members {
		listed = append(listed, m.Name)
	}
	assert.Equal(t, []string{f.Hosts["v1"].Member, f.Hosts["v2"].Member, f.Hosts["v3"].Member}, listed)
	assert.Equal(t, MemberID(v1.Probe.Members[0].Name), v1.Probe.Members[0].ID, "with the IDs etcdctl prints")
}

func TestTheQuorumOracleCountsVotingMembersOnlyAndAPausedHostDownPastItsGrace(t *testing.T) {
	f, _ := fleet(Timing{ProbePeriod: 10 * time.Second})
	f.Members = append(f.Members, Member{Name: "s1-0", Node: "s1", Learner: true})
	f.Hosts["s1"].Server = true
	f.Hosts["v2"].UnhealthyUntil = t0.Add(time.Hour)
	// v1 v2 v3 vote, s1 is a learner, v2 is unhealthy: removing v1 leaves
	// v2 and v3 to vote, one of them unhealthy. Counting the learner as a
	// vote would see two of three up.
	err := f.QuorumKept(QuorumCheck{Now: t0, Removed: "v1", Healthy: true})
	require.EqualError(t, err, "1 of 2 voting members up, a quorum is 2; down: v2 (unhealthy)")
	require.NoError(t, f.QuorumKept(QuorumCheck{Now: t0, Removed: "v1"}), "unhealthy is up when health is not asked")

	// A paused host is up within its grace after its last sample, down
	// past it, and down at once with no grace.
	f.Hosts["v3"].Paused = true
	require.NoError(t, f.QuorumKept(QuorumCheck{Now: t0.Add(29 * time.Second), Stopped: "v1", Grace: 30 * time.Second}))
	require.EqualError(t, f.QuorumKept(QuorumCheck{Now: t0.Add(30 * time.Second), Stopped: "v1", Grace: 30 * time.Second}),
		"1 of 3 voting members up, a quorum is 2; down: v1 (stopped), v3 (paused)")
	require.Error(t, f.QuorumKept(QuorumCheck{Now: t0, Stopped: "v1"}))
}

func TestAPausedHostsNodeStaysReadyUntilTheGracePassedSinceItsLastHeartbeat(t *testing.T) {
	f, nodes := fleet(Timing{ProbePeriod: 10 * time.Second, NodeGrace: 50 * time.Second})
	v2 := &nodes[1]
	f.Hosts["v2"].Paused = true
	f.React(t0.Add(49*time.Second), nodes)
	assert.True(t, v2.Ready, "within the grace")
	assert.Equal(t, t0, v2.Heartbeat, "a paused kubelet renews nothing")
	f.React(t0.Add(50*time.Second), nodes)
	assert.False(t, v2.Ready, "past the grace")
	f.Hosts["v2"].Paused = false
	f.React(t0.Add(51*time.Second), nodes)
	assert.True(t, v2.Ready, "back")
}
