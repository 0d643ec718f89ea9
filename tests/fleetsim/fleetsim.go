// Package fleetsim plays a k3s fleet over the Kubernetes API for the
// controller's suites: each host's agent (reports, probes), k3s (learners
// promoted, members removed on request, the server labels, EtcdIsVoter)
// and the kubelets (heartbeat Leases, Ready, the Pods they delete). Its
// truth is etcd's member list and each host's units; what it writes is
// what the real parts would.
package fleetsim

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/kubelet"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// driver plays, over the API alone, what the controller sees of the
// fleet: each host's agent (it answers the requests and writes probes),
// k3s (learners promoted, members removed on request, the server labels
// and EtcdIsVoter kept) and the kubelets (their Leases, Ready, the Pods
// they finish and delete). Its truth is etcd's member list and each host's
// units; what it writes is what the real parts would.
type Driver struct {
	t       testhost.T
	c       kubernetes.Interface
	period  time.Duration // the probe period
	mu      sync.Mutex
	Hosts   map[string]*Host
	order   []string
	members []simMember
	// k3sPaused: k3s removes no member.
	K3sPaused bool
	stop      chan struct{}
	done      chan struct{}
	lastProbe time.Time
	lastBeat  time.Time
	// reports are the reports written, in order.
	reports []Written
}

// Label marks the Nodes the driver plays; other Nodes (a load test's)
// it leaves alone.
const Label = "fleet-role-test/sim"

// Written is a report the driver wrote on a Node, and when.
type Written struct {
	At     time.Time
	Node   string
	Action string
	State  string
	Swap   string
}

type simMember struct {
	name, node string
	learner    bool
}

type Host struct {
	// Staged: the host is staged to become a server.
	Staged        bool
	server, agent bool
	roleFile      string
	member        string
	incarnation   int
	serverStart   time.Time
	agentStart    time.Time
	learnerSince  time.Time
	handled       time.Time
	swap          string
	// faults
	NeverJoin     bool
	RefusePromote bool
	Unhealthy     bool
	FsyncMs       float64
}

func memberName(node string, incarnation int) string {
	h := fnv.New32a()
	fmt.Fprintf(h, "%s/%d", node, incarnation)
	return fmt.Sprintf("%s-%08x", node, h.Sum32())
}

// newDriver creates the fleet's Nodes (voters, standbys, agents), a pod
// of an app and of a DaemonSet on each, and starts playing.
func New(tb testhost.T, c kubernetes.Interface, period time.Duration, voters, standbys, agents int) *Driver {
	d := &Driver{t: tb, c: c, period: period, Hosts: map[string]*Host{}, stop: make(chan struct{}), done: make(chan struct{})}
	ctx := context.Background()
	for _, ns := range []string{api.Namespace, api.NodeLeaseNamespace, "apps", "arc-runners"} {
		_, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			tb.Fatal(err)
		}
	}
	ds, err := c.AppsV1().DaemonSets("kube-system").Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "svclb"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "svclb"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "svclb"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "lb", Image: "svclb"}}}},
		}}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	add := func(name, role string) {
		h := &Host{agent: true, roleFile: "agent", agentStart: time.Now().Add(-time.Hour), FsyncMs: 2}
		labels := map[string]string{api.LabelRole: role, Label: "true"}
		ann := map[string]string{}
		switch role {
		case api.RoleVoter:
			h.server, h.agent, h.roleFile, h.serverStart = true, false, "server", time.Now().Add(-time.Hour)
			h.member = memberName(name, 0)
			d.members = append(d.members, simMember{name: h.member, node: name})
			for _, l := range api.ServerLabels {
				labels[l] = "true"
			}
			ann[api.AnnotationEtcdNodeName] = h.member
		case api.RoleStandby:
			h.Staged = true
		}
		d.Hosts[name] = h
		d.order = append(d.order, name)
		_, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: ann}}, metav1.CreateOptions{})
		if err != nil {
			tb.Fatal(err)
		}
		d.pod("apps", "web-"+name, name, nil)
		d.pod("kube-system", "svclb-"+name, name, func(p *corev1.Pod) {
			p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "svclb", UID: ds.UID, Controller: ptr.To(true)}}
		})
	}
	for i := 1; i <= voters; i++ {
		add(fmt.Sprintf("v%d", i), api.RoleVoter)
	}
	for i := 1; i <= standbys; i++ {
		add(fmt.Sprintf("s%d", i), api.RoleStandby)
	}
	for i := 1; i <= agents; i++ {
		add(fmt.Sprintf("a%d", i), api.RoleAgent)
	}
	d.tick()
	go d.run()
	tb.Cleanup(d.Close)
	return d
}

func (d *Driver) pod(ns, name, node string, edit func(*corev1.Pod)) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{}},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if edit != nil {
		edit(p)
	}
	if _, err := d.c.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		d.t.Fatal(err)
	}
}

func (d *Driver) Close() {
	select {
	case <-d.stop:
	default:
		close(d.stop)
		<-d.done
	}
}

func (d *Driver) run() {
	defer close(d.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			d.tick()
		}
	}
}

// with changes the driver's truth under its lock.
func (d *Driver) With(f func(d *Driver)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(d)
}

func (d *Driver) isMember(name string) bool {
	return slices.ContainsFunc(d.members, func(m simMember) bool { return m.name == name })
}

func (d *Driver) tick() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := d.c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: Label + "=true"})
	if err != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now := time.Now()
	probe := now.Sub(d.lastProbe) >= d.period
	beat := now.Sub(d.lastBeat) >= 500*time.Millisecond
	for i := range list.Items {
		n := &list.Items[i]
		h := d.Hosts[n.Name]
		if h == nil {
			continue
		}
		ann := map[string]any{}
		d.agent(n, h, ann, now)
		d.k3s(n, h, ann, now)
		if probe {
			ann[api.AnnotationProbe] = d.probe(h, now)
		}
		labels := map[string]any{}
		if h.server {
			for _, l := range api.ServerLabels {
				if n.Labels[l] != "true" {
					labels[l] = "true"
				}
			}
			if n.Annotations[api.AnnotationEtcdNodeName] != h.member {
				ann[api.AnnotationEtcdNodeName] = h.member
			}
		}
		if len(ann) > 0 || len(labels) > 0 {
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann, "labels": labels}})
			_, err := d.c.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{})
			if v, ok := ann[api.AnnotationReport].(string); ok && err == nil {
				var r api.Report
				_ = json.Unmarshal([]byte(v), &r)
				d.reports = append(d.reports, Written{At: time.Now(), Node: n.Name, Action: r.Action, State: r.State, Swap: r.Swap})
			}
		}
		d.conditions(ctx, n, h, now)
		if beat && (h.server || h.agent) {
			_ = kubelet.Heartbeat(ctx, d.c, n.Name, now)
		}
	}
	if probe {
		d.lastProbe = now
	}
	if beat {
		d.lastBeat = now
	}
	for i := range list.Items {
		kubelet.DeleteTerminating(ctx, d.c, &list.Items[i])
	}
}

func (d *Driver) report(ann map[string]any, r api.Report, now time.Time) {
	r.At = now.UTC()
	b, _ := json.Marshal(r)
	ann[api.AnnotationReport] = string(b)
}

// agent answers the request on the Node and finishes a demotion once the
// member is gone, as fleet-role agent does.
func (d *Driver) agent(n *corev1.Node, h *Host, ann map[string]any, now time.Time) {
	var q api.Request
	if v := n.Annotations[api.AnnotationRequest]; v != "" && json.Unmarshal([]byte(v), &q) == nil && !q.At.Equal(h.handled) {
		h.handled = q.At
		at := q.At
		switch q.Action {
		case api.RequestPromote:
			if !h.Staged || h.RefusePromote {
				d.report(ann, api.Report{Swap: q.Swap, Action: q.Action, State: api.StateRefused, RequestAt: &at, Message: "not staged"}, now)
				break
			}
			if !h.server {
				h.agent, h.server, h.serverStart = false, true, now
				h.incarnation++
				h.member = memberName(n.Name, h.incarnation)
				h.learnerSince = now
				d.members = append(d.members, simMember{name: h.member, node: n.Name, learner: true})
			}
			h.roleFile = "server"
			start := h.serverStart.UTC()
			d.report(ann, api.Report{Swap: q.Swap, Action: q.Action, State: api.StateDone, StartedAt: &start, RequestAt: &at}, now)
		case api.RequestStepDown:
			h.roleFile, h.server, h.swap = "agent", false, q.Swap
			d.report(ann, api.Report{Swap: q.Swap, Action: q.Action, State: api.StateDone, RequestAt: &at}, now)
		case api.RequestSnapshot:
			d.report(ann, api.Report{Swap: q.Swap, Action: q.Action, State: api.StateDone, RequestAt: &at,
				Snapshot: &api.SnapshotFile{Path: "/var/lib/rancher/k3s/server/db/snapshots/s.db", Size: 4096,
					SHA256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}}, now)
		}
	}
	if h.roleFile == "agent" && !h.agent && !h.server {
		gone := h.member == "" || !d.isMember(h.member) || (n.Annotations[api.AnnotationMemberGone] != "" && n.Annotations[api.AnnotationMemberGone] == h.swap)
		if gone && h.swap != "" {
			h.agent, h.agentStart, h.member = true, now, ""
			start := now.UTC()
			d.report(ann, api.Report{Swap: h.swap, Action: api.ReportFinish, State: api.StateDone, StartedAt: &start}, now)
		}
	}
}

// k3s promotes learners that caught up and removes a member on request.
func (d *Driver) k3s(n *corev1.Node, h *Host, ann map[string]any, now time.Time) {
	for i := range d.members {
		m := &d.members[i]
		if m.node == n.Name && m.learner && h.server && !h.NeverJoin && now.Sub(h.learnerSince) >= time.Second {
			m.learner = false
		}
	}
	if !d.K3sPaused && n.Annotations[api.AnnotationEtcdRemove] == "true" {
		name := n.Annotations[api.AnnotationEtcdNodeName]
		if name != "" && d.isMember(name) {
			d.members = slices.DeleteFunc(d.members, func(m simMember) bool { return m.name == name })
			ann[api.AnnotationEtcdRemovedNodeName] = name
		}
	}
}

func (d *Driver) probe(h *Host, now time.Time) string {
	p := api.Probe{At: now.UTC(), Period: api.Duration(d.period), Healthy: !h.Unhealthy, Staged: h.Staged && !h.server, FsyncP99Ms: h.FsyncMs, RTTMs: 1}
	if h.server {
		p.Member = h.member
		for _, m := range d.members {
			p.Members = append(p.Members, api.Member{Name: m.name, Learner: m.learner})
		}
	}
	b, _ := json.Marshal(p)
	return string(b)
}

// conditions writes Ready and EtcdIsVoter, as the kubelet and k3s's etcd
// leader do, when they change.
func (d *Driver) conditions(ctx context.Context, n *corev1.Node, h *Host, now time.Time) {
	want := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady"}}
	if h.server || h.agent {
		want[0].Status, want[0].Reason = corev1.ConditionTrue, "KubeletReady"
	}
	idx := slices.IndexFunc(d.members, func(m simMember) bool { return m.node == n.Name })
	switch {
	case idx < 0 && n.Labels[api.LabelEtcd] == "true":
		want = append(want, corev1.NodeCondition{Type: api.ConditionEtcdIsVoter, Status: corev1.ConditionFalse, Reason: api.ReasonNotAMember})
	case idx < 0:
	case d.members[idx].learner:
		want = append(want, corev1.NodeCondition{Type: api.ConditionEtcdIsVoter, Status: corev1.ConditionFalse, Reason: api.ReasonMemberIsLearner})
	case !h.server:
		want = append(want, corev1.NodeCondition{Type: api.ConditionEtcdIsVoter, Status: corev1.ConditionFalse, Reason: api.ReasonUnhealthy})
	default:
		want = append(want, corev1.NodeCondition{Type: api.ConditionEtcdIsVoter, Status: corev1.ConditionTrue, Reason: api.ReasonMemberNotLearner})
	}
	same := len(want) == len(n.Status.Conditions)
	for i := 0; same && i < len(want); i++ {
		c := n.Status.Conditions[i]
		same = c.Type == want[i].Type && c.Status == want[i].Status && c.Reason == want[i].Reason
	}
	if same {
		return
	}
	for i := range want {
		want[i].LastHeartbeatTime, want[i].LastTransitionTime = metav1.NewTime(now), metav1.NewTime(now)
	}
	n = n.DeepCopy()
	n.Status.Conditions = want
	_, _ = d.c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
}

// Written returns the reports written so far.
func (d *Driver) Written() []Written {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]Written(nil), d.reports...)
}

// MemberCount is etcd's member count.
func (d *Driver) MemberCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.members)
}
