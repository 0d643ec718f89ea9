package plan_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/api"
)

// cluster builds the objects `kubectl get nodes,leases,configmaps,pods -A
// -o json` would print for a k3s fleet at one moment.
type cluster struct {
	now    time.Time
	order  []string
	nodes  map[string]*corev1.Node
	beats  map[string]time.Time
	probes map[string]*api.Probe
	lease  *coordinationv1.Lease
	status api.Status
	manual *api.ManualRequest
	pods   []*corev1.Pod
}

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func member(node string) string { return node + "-0a1b2c3d" }

// newCluster: voters v1, v2, v3, standby s1, agent a1; all Ready on fresh
// heartbeats, every probe fresh and healthy, the voters listing each other.
func newCluster() *cluster {
	c := &cluster{now: now, nodes: map[string]*corev1.Node{}, beats: map[string]time.Time{}, probes: map[string]*api.Probe{}}
	for _, v := range []string{"v1", "v2", "v3"} {
		c.addNode(v, api.RoleVoter)
		c.server(v)
	}
	c.addNode("s1", api.RoleStandby)
	c.probes["s1"].Staged = true
	c.addNode("a1", api.RoleAgent)
	c.lists([]string{"v1", "v2", "v3"}, "v1", "v2", "v3")
	for _, n := range c.order {
		c.pod("apps", "web-"+n, n, nil)
		c.pod("kube-system", "svclb-"+n, n, func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "svclb", UID: "u", Controller: ptr.To(true)}}
		})
	}
	return c
}

func (c *cluster) addNode(name, role string) {
	c.order = append(c.order, name)
	c.nodes[name] = &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{api.LabelRole: role}, Annotations: map[string]string{}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
			{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(c.now.Add(-10 * time.Second))},
		}},
	}
	c.beats[name] = c.now.Add(-5 * time.Second)
	c.probes[name] = &api.Probe{At: c.now.Add(-20 * time.Second), Period: api.Duration(time.Minute), Healthy: true, FsyncP99Ms: 2.5}
}

// server makes the node an etcd voter as k3s labels and annotates it.
func (c *cluster) server(name string) {
	n := c.nodes[name]
	for _, l := range api.ServerLabels {
		n.Labels[l] = "true"
	}
	n.Annotations[api.AnnotationEtcdNodeName] = member(name)
	c.condition(name, api.ConditionEtcdIsVoter, corev1.ConditionTrue, api.ReasonMemberNotLearner)
	c.probes[name].Member = member(name)
	c.probes[name].Staged = false
}

func (c *cluster) condition(name, typ string, status corev1.ConditionStatus, reason string) {
	n := c.nodes[name]
	n.Status.Conditions = slices.DeleteFunc(n.Status.Conditions, func(cd corev1.NodeCondition) bool { return string(cd.Type) == typ })
	if status != "" {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: corev1.NodeConditionType(typ), Status: status, Reason: reason})
	}
}

// lists sets the members each of the voters' etcd lists.
func (c *cluster) lists(voters []string, members ...string) {
	var ms []api.Member
	for _, m := range members {
		ms = append(ms, api.Member{Name: member(m)})
	}
	for _, v := range voters {
		c.probes[v].Members = slices.Clone(ms)
	}
}

func (c *cluster) unhealthy(name string) {
	c.probes[name].Healthy = false
	c.probes[name].FsyncP99Ms = 48
}

// unanswering: the host's etcd does not answer its agent's probe.
func (c *cluster) unanswering(name string) {
	c.probes[name].Healthy = false
	c.probes[name].Error = "etcd did not answer within 2s"
}

func (c *cluster) annotate(name, key string, v any) {
	switch v := v.(type) {
	case string:
		c.nodes[name].Annotations[key] = v
	default:
		b, err := json.Marshal(v)
		if err != nil {
			panic(err)
		}
		c.nodes[name].Annotations[key] = string(b)
	}
}

func (c *cluster) cordon(name, by string) {
	c.nodes[name].Spec.Unschedulable = true
	if by != "" {
		c.nodes[name].Annotations[api.AnnotationCordonedBy] = by
	}
}

func (c *cluster) pod(ns, name, node string, edit func(*corev1.Pod)) {
	p := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{}},
		Spec:       corev1.PodSpec{NodeName: node},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if edit != nil {
		edit(p)
	}
	c.pods = append(c.pods, p)
}

func (c *cluster) runner(name, node string) {
	c.pod("arc-runners", name, node, func(p *corev1.Pod) { p.Labels["app.kubernetes.io/component"] = "runner" })
}

// swap puts a swap under way: the Lease held with its record, the status
// mirroring it at the step since the time.
func (c *cluster) swap(out, in, step string, since time.Duration) *api.SwapRecord {
	rec := &api.SwapRecord{ID: "20261130-113000-" + out, Out: out, In: in, Origin: api.OriginManual, StartedAt: c.now.Add(-30 * time.Minute)}
	c.holdLease(api.ControllerHolder, rec)
	c.status.Swap, c.status.Step = rec, step
	c.status.Since = ptr.To(c.now.Add(-since))
	return rec
}

func (c *cluster) holdLease(holder string, rec *api.SwapRecord) {
	c.lease = &coordinationv1.Lease{
		TypeMeta:   metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
		ObjectMeta: metav1.ObjectMeta{Namespace: api.Namespace, Name: api.LeaseName, Annotations: map[string]string{}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity:       ptr.To(holder),
			LeaseDurationSeconds: ptr.To[int32](60),
			RenewTime:            ptr.To(metav1.NewMicroTime(c.now.Add(-10 * time.Second))),
		},
	}
	if rec != nil {
		b, _ := json.Marshal(rec)
		c.lease.Annotations[api.AnnotationSwap] = string(b)
	}
}

func (c *cluster) request(swap *api.SwapRecord, node, action string, ago time.Duration) {
	c.annotate(node, api.AnnotationRequest, api.Request{Swap: swap.ID, Action: action, At: c.now.Add(-ago)})
}

func (c *cluster) report(swap *api.SwapRecord, node, action, state string, edit func(*api.Report)) {
	r := api.Report{Swap: swap.ID, Action: action, State: state, At: c.now.Add(-time.Minute)}
	if edit != nil {
		edit(&r)
	}
	c.annotate(node, api.AnnotationReport, r)
}

func (c *cluster) snapshotDone(swap *api.SwapRecord, node string) {
	c.request(swap, node, api.RequestSnapshot, 25*time.Minute)
	c.report(swap, node, api.RequestSnapshot, api.StateDone, func(r *api.Report) {
		r.Snapshot = &api.SnapshotFile{Path: "/var/lib/rancher/k3s/server/db/snapshots/pre-swap.db", Size: 1 << 20,
			SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
	})
}

// promoted: IN asked to promote, reported done, and voting as k3s says.
func (c *cluster) promoted(swap *api.SwapRecord, in string, serverStart time.Duration) {
	c.snapshotDone(swap, "v2")
	c.cordon(in, swap.ID)
	c.pods = slices.DeleteFunc(c.pods, func(p *corev1.Pod) bool { return p.Spec.NodeName == in && p.Namespace == "apps" })
	c.request(swap, in, api.RequestPromote, 20*time.Minute)
	c.report(swap, in, api.RequestPromote, api.StateDone, func(r *api.Report) { r.StartedAt = ptr.To(c.now.Add(-serverStart)) })
	c.server(in)
}

func (c *cluster) list() []byte {
	var items []any
	for _, name := range c.order {
		n := c.nodes[name]
		if p := c.probes[name]; p != nil {
			b, _ := json.Marshal(p)
			n.Annotations[api.AnnotationProbe] = string(b)
		}
		items = append(items, n)
	}
	for _, name := range c.order {
		items = append(items, &coordinationv1.Lease{
			TypeMeta:   metav1.TypeMeta{APIVersion: "coordination.k8s.io/v1", Kind: "Lease"},
			ObjectMeta: metav1.ObjectMeta{Namespace: api.NodeLeaseNamespace, Name: name},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity: ptr.To(name), LeaseDurationSeconds: ptr.To[int32](40),
				RenewTime: ptr.To(metav1.NewMicroTime(c.beats[name])),
			},
		})
	}
	if c.lease != nil {
		items = append(items, c.lease)
	}
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: api.Namespace, Name: api.StatusConfigMap},
		Data:       map[string]string{},
	}
	b, _ := json.Marshal(c.status)
	cm.Data[api.StatusKey] = string(b)
	if c.manual != nil {
		b, _ := json.Marshal(c.manual)
		cm.Data[api.RequestKey] = string(b)
	}
	items = append(items, cm)
	for _, p := range c.pods {
		items = append(items, p)
	}
	out, err := json.MarshalIndent(map[string]any{"apiVersion": "v1", "kind": "List", "items": items, "metadata": map[string]any{}}, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("marshal the list: %v", err))
	}
	return append(out, '\n')
}
