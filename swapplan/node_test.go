package swapplan_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

func TestANodeVotesAsAnEtcdServerWhoseMemberIsNeitherRemovedNorALearnerNorGone(t *testing.T) {
	server := func(f func(n *swapplan.Node)) swapplan.Node {
		n := swapplan.Node{Name: "v1", ServerLabels: []string{api.LabelEtcd}, MemberName: "v1-0123abcd",
			EtcdIsVoter: swapplan.Condition{Status: "True", Reason: api.ReasonMemberNotLearner}}
		if f != nil {
			f(&n)
		}
		return n
	}
	for _, tc := range []struct {
		name  string
		node  swapplan.Node
		voter bool
	}{
		{"an etcd server whose member votes", server(nil), true},
		{"no etcd label", server(func(n *swapplan.Node) { n.ServerLabels = nil }), false},
		{"its member removed", server(func(n *swapplan.Node) { n.RemovedMember = n.MemberName }), false},
		{"its member removed and its name gone", server(func(n *swapplan.Node) { n.RemovedMember, n.MemberName = n.MemberName, "" }), false},
		{"an earlier member removed, its current one voting", server(func(n *swapplan.Node) { n.RemovedMember = "v1-99999999" }), true},
		{"a learner", server(func(n *swapplan.Node) {
			n.EtcdIsVoter = swapplan.Condition{Status: "False", Reason: api.ReasonMemberIsLearner}
		}), false},
		{"not a member", server(func(n *swapplan.Node) {
			n.EtcdIsVoter = swapplan.Condition{Status: "False", Reason: api.ReasonNotAMember}
		}), false},
		{"a condition false for another reason", server(func(n *swapplan.Node) { n.EtcdIsVoter = swapplan.Condition{Status: "False", Reason: "Unhealthy"} }), true},
		{"a condition not false that says learner", server(func(n *swapplan.Node) {
			n.EtcdIsVoter = swapplan.Condition{Status: "Unknown", Reason: api.ReasonMemberIsLearner}
		}), true},
		{"no condition", server(func(n *swapplan.Node) { n.EtcdIsVoter = swapplan.Condition{} }), true},
	} {
		assert.Equal(t, tc.voter, tc.node.Voter(), tc.name)
	}
}

func TestTheBoundsSumIsEveryBoundTheRunnersAndTheDrainTwice(t *testing.T) {
	b := swapplan.Bounds{Snapshot: 1, Runners: 2, Drain: 4, Promote: 8, Join: 16, Gates: 32, StepDown: 64, RemoveMember: 128,
		MemberGone: 256, Uncordon: 512, Rollback: 1024, RemoveFallback: 2048, RemoveByVoter: 4096}
	assert.Equal(t, time.Duration(1+2*2+2*4+8+16+32+64+128+256+512+1024+2048+4096), b.Sum())
}
