package adapt

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func voterNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: "v1",
			Labels: map[string]string{
				api.LabelRole: api.RoleVoter, api.LabelLevel: "etcd-only",
				api.LabelEtcd: "true", api.LabelControlPlane: "true", api.LabelMaster: "false",
			},
			Annotations: map[string]string{
				api.AnnotationEtcdNodeName:        "v1-0a1b2c3d",
				api.AnnotationEtcdNodeAddress:     "10.0.0.11",
				api.AnnotationEtcdRemovedNodeName: "v1-99999999",
				api.AnnotationEtcdRemove:          "true",
				api.AnnotationCordonedBy:          "swap-1",
				api.AnnotationMemberGone:          "swap-1",
				api.AnnotationRequest:             `{"swap":"swap-1","action":"step-down","at":"2026-11-30T11:59:00Z"}`,
				api.AnnotationReport:              `{"swap":"swap-1","action":"finish","state":"done","startedAt":"2026-11-30T11:59:30Z","at":"2026-11-30T11:59:31Z"}`,
				api.AnnotationProbe:               `{"at":"2026-11-30T11:59:50Z","period":"1m","healthy":true,"member":"v1-0a1b2c3d","members":[{"name":"v1-0a1b2c3d"},{"name":"s1-01234567","learner":true},{"name":"","learner":true,"peerURLs":["https://10.0.0.21:2380"]}],"fsyncP99Ms":3.5}`,
			},
		},
		Spec: corev1.NodeSpec{
			Unschedulable: true,
			Taints:        []corev1.Taint{{Key: api.TaintEtcdOnly, Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "10.0.0.11"}, {Type: corev1.NodeHostName, Address: "v1"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.11"},
		}, Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(t0.Add(-time.Minute))},
			{Type: api.ConditionEtcdIsVoter, Status: corev1.ConditionFalse, Reason: api.ReasonUnhealthy},
		}},
	}
}

func TestNodeReadsEveryNameOfTheContract(t *testing.T) {
	n, err := Node(voterNode())
	require.NoError(t, err)
	assert.Equal(t, api.RoleVoter, n.Role)
	assert.Equal(t, "etcd-only", n.Level)
	assert.Equal(t, []string{api.LabelEtcd, api.LabelControlPlane}, n.ServerLabels, "a label set to false is not carried")
	assert.True(t, n.EtcdTaint)
	assert.Equal(t, "v1-0a1b2c3d", n.MemberName)
	assert.Equal(t, "10.0.0.11", n.MemberAddress)
	assert.Equal(t, "v1-99999999", n.RemovedMember)
	assert.True(t, n.RemoveRequested)
	assert.False(t, n.MemberRemoved(), "k3s last removed an older member")
	assert.Equal(t, swapplan.Condition{Status: "False", Reason: api.ReasonUnhealthy}, n.EtcdIsVoter)
	assert.True(t, n.Ready)
	assert.Equal(t, t0.Add(-time.Minute), n.Heartbeat)
	assert.True(t, n.Unschedulable)
	assert.Equal(t, "swap-1", n.CordonedBy)
	assert.Equal(t, "swap-1", n.MemberGone)
	require.NotNil(t, n.Request)
	assert.Equal(t, api.RequestStepDown, n.Request.Action)
	require.NotNil(t, n.Report)
	assert.Equal(t, t0.Add(-30*time.Second), *n.Report.StartedAt)
	require.NotNil(t, n.Probe)
	assert.Equal(t, api.Duration(time.Minute), n.Probe.Period)
	assert.Equal(t, []api.Member{{Name: "v1-0a1b2c3d"}, {Name: "s1-01234567", Learner: true}, {Learner: true, PeerURLs: []string{"https://10.0.0.21:2380"}}}, n.Probe.Members)
	assert.Equal(t, []string{"10.0.0.11"}, n.Addresses, "its InternalIP, neither its ExternalIP nor its host name")
}

func TestNodeLeavesOutAMalformedAnnotationAndNamesIt(t *testing.T) {
	node := voterNode()
	node.Annotations[api.AnnotationReport] = `{"swap":"swap-1","action":"finish","state":"done","startedAt":"yesterday","at":"2026-11-30T11:59:31Z"}`
	node.Annotations[api.AnnotationProbe] = `{"at":"2026-11-30T11:59:50Z","period":60}`
	n, err := Node(node)
	require.Error(t, err)
	assert.Nil(t, n.Report)
	assert.Nil(t, n.Probe)
	assert.NotNil(t, n.Request, "the other annotations are read")
	assert.Contains(t, err.Error(), "node/v1: annotation fleet-role.io/report: invalid JSON")
	assert.Contains(t, err.Error(), `node/v1: annotation fleet-role.io/probe: invalid JSON: want a duration string such as "60s", got 60`)
}

func TestPodClassifiesRunnersDaemonSetsMirrorsAndFinishedPods(t *testing.T) {
	runners := labels.SelectorFromSet(labels.Set{"app.kubernetes.io/component": "runner"})
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "arc", Name: "r", Labels: map[string]string{"app.kubernetes.io/component": "runner"}}}
	assert.Equal(t, swapplan.Pod{Namespace: "arc", Name: "r", Runner: true}, Pod(p, runners))

	ds := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "d", OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Controller: ptr.To(true)}}}}
	assert.True(t, Pod(ds, runners).DaemonSet)
	mirror := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "m", Annotations: map[string]string{corev1.MirrorPodAnnotationKey: "x"}}}
	assert.True(t, Pod(mirror, runners).Mirror)
	done := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "f"}, Status: corev1.PodStatus{Phase: corev1.PodSucceeded}}
	assert.True(t, Pod(done, runners).Finished)
	going := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "g", DeletionTimestamp: ptr.To(metav1.NewTime(t0))}}
	assert.True(t, Pod(going, runners).Terminating)
}

func TestLeaseReadsHolderRenewDurationAndRecord(t *testing.T) {
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-role", Name: "regrade", Annotations: map[string]string{
			api.AnnotationSwap: `{"id":"s","out":"v1","in":"s1","origin":"automatic","startedAt":"2026-11-30T11:00:00Z"}`,
		}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(api.ControllerHolder), LeaseDurationSeconds: ptr.To[int32](60),
			AcquireTime: ptr.To(metav1.NewMicroTime(t0.Add(-time.Hour))), RenewTime: ptr.To(metav1.NewMicroTime(t0))},
	}
	got, err := Lease(l)
	require.NoError(t, err)
	assert.Equal(t, api.ControllerHolder, got.Holder)
	assert.Equal(t, t0, got.RenewTime)
	assert.Equal(t, time.Minute, got.Duration)
	require.NotNil(t, got.Swap)
	assert.Equal(t, api.OriginAutomatic, got.Swap.Origin)
}

func TestBuildJoinsHeartbeatsPodsAndVerdictsAndGoesOnPastBadAnnotations(t *testing.T) {
	good := voterNode()
	bad := voterNode()
	bad.Name = "v2"
	bad.Annotations[api.AnnotationRequest] = `[]`
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "fleet-role", Name: api.StatusConfigMap}, Data: map[string]string{
		api.StatusKey:  `{"swap":null,"verdicts":{"v1":{"state":"unfit","score":2}},"updatedAt":"2026-11-30T11:59:00Z"}`,
		api.RequestKey: `{"out":"v1","in":"s1","at":"2026-11-30T11:58:00Z","by":"alice"}`,
	}}
	in := Input{
		Nodes:      []*corev1.Node{bad, good},
		NodeLeases: []*coordinationv1.Lease{{ObjectMeta: metav1.ObjectMeta{Name: "v1"}, Spec: coordinationv1.LeaseSpec{RenewTime: ptr.To(metav1.NewMicroTime(t0.Add(-3 * time.Second)))}}},
		Status:     cm,
		Pods:       []*corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Namespace: "a", Name: "p"}, Spec: corev1.PodSpec{NodeName: "v1"}}, {ObjectMeta: metav1.ObjectMeta{Name: "unbound"}}},
	}
	s, err := Build(in, swapplan.Config{DryRun: true}, labels.Everything(), t0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "node/v2: annotation fleet-role.io/request: invalid JSON")
	require.Len(t, s.Nodes, 2)
	assert.Equal(t, "v1", s.Nodes[0].Name, "sorted by name")
	assert.Equal(t, t0.Add(-3*time.Second), s.Nodes[0].Heartbeat, "the kubelet Lease's renew time")
	assert.Equal(t, t0.Add(-time.Minute), s.Nodes[1].Heartbeat, "the Ready condition's, without a Lease")
	assert.Nil(t, s.Nodes[1].Request)
	assert.Equal(t, []swapplan.Pod{{Namespace: "a", Name: "p", Runner: true}}, s.Nodes[0].Pods)
	assert.Equal(t, api.VerdictUnfit, s.Nodes[0].Verdict.State)
	require.NotNil(t, s.Request)
	assert.Equal(t, "alice", s.Request.By)
	assert.Equal(t, t0, s.Now)
	assert.True(t, s.Config.DryRun)
}

func TestReadListKeepsWhatThePlannerReads(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docs", "examples", "mid-swap.json"))
	require.NoError(t, err)
	in, err := ReadList(strings.NewReader(string(data)), api.Namespace)
	require.NoError(t, err)
	assert.NotEmpty(t, in.Nodes)
	assert.NotEmpty(t, in.NodeLeases)
	assert.NotNil(t, in.Lease)
	assert.NotNil(t, in.Status)
	assert.NotEmpty(t, in.Pods)

	other, err := ReadList(strings.NewReader(string(data)), "elsewhere")
	require.NoError(t, err)
	assert.Nil(t, other.Lease, "the regrade Lease of another namespace is not ours")
	assert.Nil(t, other.Status)
}

func TestReadListErrorsAreErrInput(t *testing.T) {
	_, err := ReadList(strings.NewReader("nope"), api.Namespace)
	require.True(t, errors.Is(err, ErrInput))
	assert.Contains(t, err.Error(), "invalid JSON at line 1, column 2")
}

func TestNodeReadsAProbeListingALearnerThatHasNotStartedWithoutAName(t *testing.T) {
	node := voterNode()
	node.Annotations[api.AnnotationProbe] = `{"at":"2026-11-30T11:59:50Z","period":"1m0s","healthy":true,"members":[{"name":"v1-0a1b2c3d"},{"name":"","learner":true}]}`
	n, err := Node(node)
	require.NoError(t, err)
	require.NotNil(t, n.Probe)
	assert.Equal(t, []api.Member{{Name: "v1-0a1b2c3d"}, {Learner: true}}, n.Probe.Members)

	node.Annotations[api.AnnotationProbe] = `{"at":"2026-11-30T11:59:50Z","period":"1m0s","members":[{"name":""}]}`
	_, err = Node(node)
	assert.ErrorContains(t, err, `field "members[0].name": missing`, "a voter always has a name")
}

func TestANodeIsUnderMaintenanceWhenCordonedNotByFleetRoleOrAnnotatedAndNotWhenFleetRoleCordonedIt(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(n *corev1.Node)
		want   string
	}{
		{"cordoned by a swap", func(*corev1.Node) {}, ""},
		{"cordoned by someone else", func(n *corev1.Node) { delete(n.Annotations, api.AnnotationCordonedBy) }, "cordoned, not by fleet-role"},
		{"schedulable, no swap's cordon", func(n *corev1.Node) {
			delete(n.Annotations, api.AnnotationCordonedBy)
			n.Spec.Unschedulable = false
		}, ""},
		{"annotated for maintenance, whatever its cordon", func(n *corev1.Node) {
			n.Annotations[api.AnnotationMaintenance] = " firmware 2.4 "
		}, "annotated " + api.AnnotationMaintenance + ": firmware 2.4"},
		{"an empty annotation is no mark", func(n *corev1.Node) { n.Annotations[api.AnnotationMaintenance] = " " }, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := voterNode()
			c.change(n)
			got, err := Node(n)
			require.NoError(t, err)
			assert.Equal(t, c.want, got.Maintenance)
		})
	}
}

func TestKuredsLockHoldersAreMarkedUnderMaintenanceUnlessAlreadyForAnotherReason(t *testing.T) {
	s := swapplan.Snapshot{Nodes: []swapplan.Node{{Name: "v1"}, {Name: "v2", Maintenance: "cordoned, not by fleet-role"}, {Name: "v3"}}}
	MarkKuredHolders(&s, []string{"v2", "v3", "gone"})
	assert.Equal(t, "", s.Nodes[0].Maintenance)
	assert.Equal(t, "cordoned, not by fleet-role", s.Nodes[1].Maintenance)
	assert.Equal(t, "holding kured's reboot lock", s.Nodes[2].Maintenance)
}
