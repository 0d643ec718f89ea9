// Package fleetsim plays a k3s fleet over the Kubernetes API for the
// controller's suites (tests/controller, tests/load) and make demo where
// no Docker engine answers. It is the I/O around tests/fleetmodel, which
// decides how the hosts answer: it creates the fleet's Nodes and Pods,
// and at every tick reads the Nodes it plays (and the Pods of the
// cordoned ones), has the model react as the hosts' agents, k3s and
// kubelets would, and writes what those parts write: reports, probes, the
// server labels and etcd annotations, the Ready and EtcdIsVoter
// conditions, the kubelets' Leases, and the deletion of the Pods they
// deleted.
package fleetsim

import (
	"context"
	"encoding/json"
	"fmt"
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
	"github.com/fleet-role/fleet-role/controller/adapt"
	"github.com/fleet-role/fleet-role/swapplan"
	"github.com/fleet-role/fleet-role/tests/fleetmodel"
	"github.com/fleet-role/fleet-role/tests/kubelet"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// Driver plays the fleet. The model it drives is embedded: its hosts'
// faults and its truth are changed under With.
type Driver struct {
	*fleetmodel.Fleet
	t    testhost.T
	c    kubernetes.Interface
	mu   sync.Mutex
	stop chan struct{}
	done chan struct{}
	// beats are the kubelets' Leases' renew times as last written, so
	// that they are not read back every tick.
	beats map[string]time.Time
	// reports are the reports written, in order.
	reports []Written
	// unwritten are the writes to each Node that failed, to be made again.
	unwritten map[string]*unwritten
}

// unwritten is what was not written on a Node: its annotations and
// labels, and the report among them.
type unwritten struct {
	ann, labels map[string]any
	report      *Written
	reportJSON  string
}

// Label marks the Nodes the driver plays; other Nodes (a load test's)
// it leaves alone.
const Label = "fleet-role-test/sim"

// Finalizer is the finalizer k3s's etcd member controller has wrangler
// put on every Node: the handler name "managed-etcd-controller" given to
// nodes.OnRemove (k3s-io/k3s pkg/etcd/member_controller.go,
// registerMemberHandlers), prefixed "wrangler.cattle.io/" (rancher/wrangler
// pkg/generic/remove.go). A Node deleted stays, with a deletionTimestamp,
// until the handler (fleetmodel Delete) lets it go.
const Finalizer = "wrangler.cattle.io/managed-etcd-controller"

// Written is a report the driver wrote on a Node, and when.
type Written struct {
	At     time.Time
	Node   string
	Action string
	State  string
	Swap   string
	// Request is when the request it answers was made (zero for a
	// finish, which answers none).
	Request time.Time
}

// The model's pace over the API: a kubelet renews its Lease every half
// second, and a learner votes a second after its server started; a Node
// whose kubelet stopped stays Ready for five missed renewals, as a
// kubelet's (10 s) in the node-monitor grace (50 s).
const (
	heartbeat = 500 * time.Millisecond
	catchUp   = time.Second
	nodeGrace = 5 * heartbeat
)

// New creates the fleet's Nodes (voters v1.., standbys s1.., agents
// a1..), a Pod of an app and of a DaemonSet on each, and starts playing
// it, its agents probing every period.
func New(tb testhost.T, c kubernetes.Interface, period time.Duration, voters, standbys, agents int) *Driver {
	d := &Driver{t: tb, c: c, Fleet: fleetmodel.New(fleetmodel.Timing{ProbePeriod: period, Heartbeat: heartbeat, CatchUp: catchUp, NodeGrace: nodeGrace}),
		beats: map[string]time.Time{}, unwritten: map[string]*unwritten{}, stop: make(chan struct{}), done: make(chan struct{})}
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
	since := time.Now().UTC().Add(-time.Hour)
	add := func(name, role string) {
		n := d.Add(name, role, since)
		labels := map[string]string{api.LabelRole: role, Label: "true"}
		for _, l := range n.ServerLabels {
			labels[l] = "true"
		}
		ann := map[string]string{}
		if n.MemberName != "" {
			ann[api.AnnotationEtcdNodeName] = n.MemberName
		}
		_, err := c.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: ann,
			Finalizers: []string{Finalizer}}}, metav1.CreateOptions{})
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

// Close stops playing; the fleet's objects stay.
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

// With changes the driver's truth under its lock.
func (d *Driver) With(f func(d *Driver)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f(d)
}

// tick reads the Nodes, has the model react, and writes what changed.
func (d *Driver) tick() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := d.c.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: Label + "=true"})
	if err != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	var objs []*corev1.Node
	var nodes []swapplan.Node
	for i := range list.Items {
		o := &list.Items[i]
		if d.Hosts[o.Name] == nil {
			continue
		}
		// A malformed annotation is read as none: the parts played skip
		// what they cannot read.
		n, _ := adapt.Node(o)
		// A Node being deleted: k3s's on-remove handler removes its
		// member and drops the finalizer; until it does, the Node stays
		// and its host goes on as it was.
		if o.DeletionTimestamp != nil && slices.Contains(o.Finalizers, Finalizer) && d.Delete(&n) {
			d.release(ctx, o)
			continue
		}
		n.Heartbeat = d.beats[o.Name]
		// Note: only a cordoned Node has Pods being deleted (a drain's),
		// so the others' Pods are not read.
		if o.Spec.Unschedulable {
			n.Pods = d.pods(ctx, o.Name)
		}
		objs, nodes = append(objs, o), append(nodes, n)
	}
	before := make([]swapplan.Node, len(nodes))
	for i, n := range nodes {
		before[i] = n
		before[i].ServerLabels, before[i].Pods = slices.Clone(n.ServerLabels), slices.Clone(n.Pods)
	}
	now := time.Now().UTC()
	d.React(now, nodes)
	for i := range nodes {
		d.write(ctx, objs[i], before[i], nodes[i], now)
	}
}

// release drops the finalizer from a Node being deleted, as wrangler does
// once the on-remove handler returned no error; the Node then goes. A
// failed write is made again at the next tick, as wrangler requeues.
func (d *Driver) release(ctx context.Context, o *corev1.Node) {
	o = o.DeepCopy()
	o.Finalizers = slices.DeleteFunc(o.Finalizers, func(f string) bool { return f == Finalizer })
	_, _ = d.c.CoreV1().Nodes().Update(ctx, o, metav1.UpdateOptions{})
}

// orNull is the value, or null (a merge patch's deletion) for "".
func orNull(v string) any {
	if v == "" {
		return nil
	}
	return v
}

func (d *Driver) pods(ctx context.Context, node string) []swapplan.Pod {
	list, err := d.c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil
	}
	var out []swapplan.Pod
	for i := range list.Items {
		out = append(out, adapt.Pod(&list.Items[i], nil))
	}
	return out
}

// write writes what the model changed on the Node: the agent's report and
// probe and k3s's labels and annotations in one patch, the conditions,
// the kubelet's Lease, and the Pods the kubelet deleted.
func (d *Driver) write(ctx context.Context, o *corev1.Node, was, n swapplan.Node, now time.Time) {
	ann, labels := map[string]any{}, map[string]any{}
	if n.Report != was.Report {
		b, _ := json.Marshal(n.Report)
		ann[api.AnnotationReport] = string(b)
	}
	if n.Probe != was.Probe {
		b, _ := json.Marshal(n.Probe)
		ann[api.AnnotationProbe] = string(b)
	}
	// Note: k3s drops node-name and remove once it removed the member
	// (pkg/etcd/member_controller.go, etcdMemberHandler.sync): a value
	// the model emptied is dropped, null in the merge patch.
	if n.MemberName != was.MemberName {
		ann[api.AnnotationEtcdNodeName] = orNull(n.MemberName)
	}
	if n.RemovedMember != was.RemovedMember {
		ann[api.AnnotationEtcdRemovedNodeName] = orNull(n.RemovedMember)
	}
	if was.RemoveRequested && !n.RemoveRequested {
		ann[api.AnnotationEtcdRemove] = nil
	}
	for _, l := range n.ServerLabels {
		if !slices.Contains(was.ServerLabels, l) {
			labels[l] = "true"
		}
	}
	// A write that failed (the API server down) is made again with the
	// next, as the agent and k3s retry theirs; a newer value of a key
	// goes over the one not written.
	if u := d.unwritten[o.Name]; u != nil {
		// A write that failed may have landed all the same (the API
		// server killed after it wrote): what the Node holds already is
		// not written again.
		for k, v := range u.ann {
			if s, ok := v.(string); ok && o.Annotations[k] == s {
				delete(u.ann, k)
			}
		}
		for k, v := range u.labels {
			if s, ok := v.(string); ok && o.Labels[k] == s {
				delete(u.labels, k)
			}
		}
		if u.report != nil && o.Annotations[api.AnnotationReport] == u.reportJSON {
			w := *u.report
			w.At = time.Now()
			d.reports = append(d.reports, w)
			u.report = nil
		}
		for k, v := range u.ann {
			if _, newer := ann[k]; !newer {
				ann[k] = v
			}
		}
		for k, v := range u.labels {
			if _, newer := labels[k]; !newer {
				labels[k] = v
			}
		}
	}
	if len(ann) > 0 || len(labels) > 0 {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann, "labels": labels}})
		_, err := d.c.CoreV1().Nodes().Patch(ctx, o.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case err != nil:
			u := d.unwritten[o.Name]
			if u == nil {
				u = &unwritten{}
				d.unwritten[o.Name] = u
			}
			u.ann, u.labels = ann, labels
			if r := n.Report; r != was.Report {
				u.report = &Written{Node: o.Name, Action: r.Action, State: r.State, Swap: r.Swap, Request: requestAt(r)}
				u.reportJSON, _ = ann[api.AnnotationReport].(string)
			}
		default:
			r := n.Report
			if u := d.unwritten[o.Name]; u != nil && u.report != nil && (r == was.Report) {
				w := *u.report
				w.At = time.Now()
				d.reports = append(d.reports, w)
			} else if r != was.Report {
				d.reports = append(d.reports, Written{At: time.Now(), Node: o.Name, Action: r.Action, State: r.State, Swap: r.Swap, Request: requestAt(r)})
			}
			delete(d.unwritten, o.Name)
		}
	}
	d.conditions(ctx, o, n, now)
	if !n.Heartbeat.Equal(was.Heartbeat) && kubelet.Heartbeat(ctx, d.c, o.Name, n.Heartbeat) == nil {
		d.beats[o.Name] = n.Heartbeat
	}
	for _, p := range was.Pods {
		if !slices.ContainsFunc(n.Pods, func(q swapplan.Pod) bool { return q.Namespace == p.Namespace && q.Name == p.Name }) {
			_ = d.c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	}
}

// requestAt is when the request the report answers was made.
func requestAt(r *api.Report) time.Time {
	if r.RequestAt == nil {
		return time.Time{}
	}
	return *r.RequestAt
}

// conditions writes Ready and EtcdIsVoter as the model has them, when
// they differ from the Node's.
func (d *Driver) conditions(ctx context.Context, o *corev1.Node, n swapplan.Node, now time.Time) {
	want := []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady"}}
	if n.Ready {
		want[0].Status, want[0].Reason = corev1.ConditionTrue, "KubeletReady"
	}
	if c := n.EtcdIsVoter; c != (swapplan.Condition{}) {
		want = append(want, corev1.NodeCondition{Type: api.ConditionEtcdIsVoter, Status: corev1.ConditionStatus(c.Status), Reason: c.Reason})
	}
	same := len(want) == len(o.Status.Conditions)
	for i := 0; same && i < len(want); i++ {
		c := o.Status.Conditions[i]
		same = c.Type == want[i].Type && c.Status == want[i].Status && c.Reason == want[i].Reason
	}
	if same {
		return
	}
	for i := range want {
		want[i].LastHeartbeatTime, want[i].LastTransitionTime = metav1.NewTime(now), metav1.NewTime(now)
	}
	o = o.DeepCopy()
	o.Status.Conditions = want
	_, _ = d.c.CoreV1().Nodes().UpdateStatus(ctx, o, metav1.UpdateOptions{})
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
	return len(d.Members)
}
