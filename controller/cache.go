package controller

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/resourceversion"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/api/logkey"
	"github.com/fleet-role/fleet-role/controller/adapt"
	"github.com/fleet-role/fleet-role/swapplan"
)

// cache is what the controller knows of the cluster, kept by informers:
// every Node, the kubelets' Leases, the regrade Lease and the status
// ConfigMap, each object stripped to what the planner reads and converted
// to the planner's types once per change, not once per pass; and the Pods
// of the swap's two Nodes only, by informers started for those Nodes and
// stopped with the swap, so no cluster-wide Pod cache is ever held.
type cache struct {
	client  kubernetes.Interface
	ns      string
	runners labels.Selector
	log     *slog.Logger
	changed func()
	// domainLabel names the Nodes' failure domains; empty: none.
	domainLabel string

	factories []informers.SharedInformerFactory
	synced    []toolscache.InformerSynced

	mu    sync.Mutex
	nodes map[string]swapplan.Node
	// taints are each Node's taints and the resourceVersion they were read
	// at: the clean-up writes the whole list back (it is atomic) on
	// condition that the Node did not change meanwhile.
	taints map[string]nodeTaints
	names  []string // sorted names of nodes
	// swapping is each labelled Node's api.LabelSwapping.
	swapping map[string]string
	problems map[string]string
	beats    map[string]time.Time
	// beatSeen is when a kubelet's renewal was seen, on the controller's
	// clock; none for the renewal found at the start.
	beatSeen map[string]time.Time
	lease    *coordinationv1.Lease
	cm       *corev1.ConfigMap
	// watched are the Nodes whose kubelet heartbeats and Pods matter
	// now: the swap's IN and OUT.
	watched map[string]bool
	pods    map[string]*podWatch
	// sampled is told of each new probe sample of a Node, and of a Node gone.
	sampled func(n swapplan.Node)
	gone    func(name string)
	// now is the controller's clock, for when a probe or a report was
	// seen.
	now func() time.Time
	// unsettled are the Nodes a write to failed, to be read back before a
	// pass plans (settle).
	unsettled map[string]bool
}

// podWatch is an informer of one Node's Pods.
type podWatch struct {
	stop     chan struct{}
	informer toolscache.SharedIndexInformer
}

func newCache(client kubernetes.Interface, ns string, runners labels.Selector, log *slog.Logger, changed func()) *cache {
	c := &cache{
		client: client, ns: ns, runners: runners, log: log, changed: changed,
		nodes: map[string]swapplan.Node{}, taints: map[string]nodeTaints{}, problems: map[string]string{}, swapping: map[string]string{}, beats: map[string]time.Time{}, beatSeen: map[string]time.Time{},
		watched: map[string]bool{}, pods: map[string]*podWatch{}, unsettled: map[string]bool{},
		sampled: func(swapplan.Node) {}, gone: func(string) {}, now: time.Now,
	}
	all := informers.NewSharedInformerFactory(client, 0)
	leases := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(api.NodeLeaseNamespace))
	regrade := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", api.LeaseName).String()
		}))
	status := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(ns),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", api.StatusConfigMap).String()
		}))
	c.factories = []informers.SharedInformerFactory{all, leases, regrade, status}

	nodes := all.Core().V1().Nodes().Informer()
	_ = nodes.SetTransform(slimNode)
	c.handle(nodes, c.nodeChanged, c.nodeDeleted)
	beats := leases.Coordination().V1().Leases().Informer()
	_ = beats.SetTransform(slimLease)
	c.handle(beats, c.beatChanged, func(string) {})
	// Note: the controller's own writes (the Lease renewed every pass, the
	// status it publishes) are no reason for another pass; who holds the
	// Lease and what swap it carries, and the manual request, are.
	lease := regrade.Coordination().V1().Leases().Informer()
	c.handle(lease, func(obj any) { c.setLease(obj.(*coordinationv1.Lease)) },
		func(string) { c.mu.Lock(); c.lease = nil; c.mu.Unlock(); c.changed() })
	cm := status.Core().V1().ConfigMaps().Informer()
	c.handle(cm, func(obj any) { c.setStatus(obj.(*corev1.ConfigMap)) },
		func(string) { c.mu.Lock(); c.cm = nil; c.mu.Unlock(); c.changed() })
	c.synced = []toolscache.InformerSynced{nodes.HasSynced, beats.HasSynced, lease.HasSynced, cm.HasSynced}
	return c
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// nodeTaints is a Node's taint list at a resourceVersion.
type nodeTaints struct {
	resourceVersion string
	taints          []corev1.Taint
}

// nodeTaints returns the Node's taints as cached and the version they
// were read at.
func (c *cache) nodeTaints(name string) (nodeTaints, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.taints[name]
	if ok {
		t.taints = slices.Clone(t.taints)
	}
	return t, ok
}

func (c *cache) handle(inf toolscache.SharedIndexInformer, upsert func(any), del func(name string)) {
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    upsert,
		UpdateFunc: func(_, obj any) { upsert(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if m, ok := obj.(metav1.Object); ok {
				del(m.GetName())
			}
		},
	})
}

func (c *cache) start(ctx context.Context) {
	for _, f := range c.factories {
		f.Start(ctx.Done())
	}
}

func (c *cache) hasSynced() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}

func (c *cache) waitForSync(ctx context.Context) bool {
	return toolscache.WaitForCacheSync(ctx.Done(), c.synced...)
}

// slimNode keeps of a Node what the planner reads: its labels, annotations,
// cordon, taints and the two conditions.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels, Annotations: n.Annotations,
	}}
	out.Spec.Unschedulable, out.Spec.Taints = n.Spec.Unschedulable, n.Spec.Taints
	for _, cd := range n.Status.Conditions {
		if cd.Type == corev1.NodeReady || string(cd.Type) == api.ConditionEtcdIsVoter {
			out.Status.Conditions = append(out.Status.Conditions, cd)
		}
	}
	// Note: the InternalIPs name a learner that never started, which etcd
	// lists by its peer URL alone (swapplan.Node.Addresses); the real-k3s
	// tier found them dropped here, the rollback then waiting for k3s.
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out.Status.Addresses = append(out.Status.Addresses, a)
		}
	}
	return out, nil
}

// slimLease keeps of a kubelet's Lease its name and renew time.
func slimLease(obj any) (any, error) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok {
		return obj, nil
	}
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace, ResourceVersion: l.ResourceVersion},
		Spec:       coordinationv1.LeaseSpec{RenewTime: l.Spec.RenewTime},
	}, nil
}

// nodeChanged converts the Node once and asks for a pass when what the
// planner reads of it changed: for a Node that is no voter, standby or
// part of the swap, a new probe sample alone is no reason.
func (c *cache) nodeChanged(obj any) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	n, err := adapt.Node(node)
	n.Domain = adapt.Domain(node, c.domainLabel)
	now := c.now()
	c.mu.Lock()
	old, existed := c.nodes[n.Name]
	if existed && olderVersion(node.ResourceVersion, c.taints[n.Name].resourceVersion) {
		// The informer's copy of a Node the controller's own write
		// replaced already.
		c.mu.Unlock()
		return
	}
	n.ProbeSeen, n.ReportSeen = seen(existed, old.Probe, n.Probe, old.ProbeSeen, now), seen(existed, old.Report, n.Report, old.ReportSeen, now)
	c.nodes[n.Name] = n
	c.taints[n.Name] = nodeTaints{resourceVersion: node.ResourceVersion, taints: node.Spec.Taints}
	if v, ok := node.Labels[api.LabelSwapping]; ok {
		c.swapping[n.Name] = v
	} else {
		delete(c.swapping, n.Name)
	}
	if !existed {
		i, _ := slices.BinarySearch(c.names, n.Name)
		c.names = slices.Insert(c.names, i, n.Name)
	}
	was := c.problems[n.Name]
	if err != nil {
		c.problems[n.Name] = err.Error()
	} else {
		delete(c.problems, n.Name)
	}
	relevant := !existed || c.watched[n.Name] || n.Voter() || n.Role == api.RoleStandby || old.Voter() || old.Role == api.RoleStandby
	c.mu.Unlock()
	if err != nil && err.Error() != was {
		c.log.Warn("a Node carries a malformed annotation; it is read as absent", logkey.Node, n.Name, logkey.Err, err)
	}
	if n.Probe != nil && (old.Probe == nil || !n.Probe.At.Equal(old.Probe.At)) {
		c.sampled(n)
	}
	if relevant || differs(old, n) {
		c.changed()
	}
}

// seen is when the controller saw the value change: now when it changed
// since the Node was first seen, the time kept when it did not, and
// unknown (zero) for the value the Node held when first seen.
func seen[T any](existed bool, was, is *T, kept, now time.Time) time.Time {
	switch {
	case is == nil || !existed:
		return time.Time{}
	case was != nil && reflect.DeepEqual(*was, *is):
		return kept
	}
	return now
}

// differs compares two versions of a Node but for the probe and the
// Ready condition's heartbeat.
func differs(a, b swapplan.Node) bool {
	a.Probe, b.Probe = nil, nil
	a.ProbeSeen, b.ProbeSeen = time.Time{}, time.Time{}
	a.Heartbeat, b.Heartbeat = time.Time{}, time.Time{}
	return !reflect.DeepEqual(a, b)
}

func (c *cache) nodeDeleted(name string) {
	c.gone(name)
	c.mu.Lock()
	delete(c.nodes, name)
	delete(c.taints, name)
	delete(c.problems, name)
	delete(c.swapping, name)
	if i, ok := slices.BinarySearch(c.names, name); ok {
		c.names = slices.Delete(c.names, i, i+1)
	}
	c.mu.Unlock()
	c.changed()
}

// beatChanged keeps a kubelet's heartbeat; only those of the swap's Nodes
// are a reason for a pass.
func (c *cache) beatChanged(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Spec.RenewTime == nil {
		return
	}
	now := c.now()
	c.mu.Lock()
	if was, ok := c.beats[l.Name]; ok && !was.Equal(l.Spec.RenewTime.Time) {
		c.beatSeen[l.Name] = now
	}
	c.beats[l.Name] = l.Spec.RenewTime.Time
	watched := c.watched[l.Name]
	c.mu.Unlock()
	if watched {
		c.changed()
	}
}

// watch sets the Nodes whose Pods and heartbeats matter now, starting
// and stopping their Pod informers; it says whether all their Pods are
// synced, and whether the set changed.
func (c *cache) watch(ctx context.Context, names ...string) (synced, changed bool) {
	want := map[string]bool{}
	for _, n := range names {
		if n != "" {
			want[n] = true
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.watched = want
	for name, w := range c.pods {
		if !want[name] {
			close(w.stop)
			delete(c.pods, name)
			changed = true
		}
	}
	synced = true
	for name := range want {
		w, ok := c.pods[name]
		if !ok {
			w = c.watchPods(ctx, name)
			c.pods[name] = w
			changed = true
		}
		synced = synced && w.informer.HasSynced()
	}
	return synced, changed
}

func (c *cache) watchPods(ctx context.Context, node string) *podWatch {
	f := informers.NewSharedInformerFactoryWithOptions(c.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	inf := f.Core().V1().Pods().Informer()
	_ = inf.SetTransform(slimPod)
	_, _ = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { c.changed() },
		UpdateFunc: func(any, any) { c.changed() },
		DeleteFunc: func(any) { c.changed() },
	})
	w := &podWatch{stop: make(chan struct{}), informer: inf}
	done, stop := make(chan struct{}), w.stop
	go func() {
		select {
		case <-ctx.Done():
		case <-stop:
		}
		close(done)
	}()
	f.Start(done)
	c.log.Debug("watching pods", logkey.Node, node)
	return w
}

// podsNamed are the watched Nodes' Pods named namespace/name.
func (c *cache) podsNamed(names []string) []*corev1.Pod {
	if len(names) == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*corev1.Pod
	for _, w := range c.pods {
		for _, name := range names {
			if obj, ok, _ := w.informer.GetStore().GetByKey(name); ok {
				out = append(out, obj.(*corev1.Pod))
			}
		}
	}
	return out
}

// slimPod keeps of a Pod what a swap's runner wait and drain read.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion, Labels: p.Labels,
		OwnerReferences: p.OwnerReferences, DeletionTimestamp: p.DeletionTimestamp,
	}}
	if v, ok := p.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		out.Annotations = map[string]string{corev1.MirrorPodAnnotationKey: v}
	}
	out.Spec.NodeName = p.Spec.NodeName
	out.Status.Phase = p.Status.Phase
	return out, nil
}

// snapshot assembles the planner's snapshot from what is kept, with the
// verdicts given.
func (c *cache) snapshot(cfg swapplan.Config, verdicts map[string]api.Verdict, now time.Time) (swapplan.Snapshot, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := swapplan.Snapshot{Now: now, Config: cfg, Nodes: make([]swapplan.Node, len(c.names))}
	var problems []string
	if c.lease != nil {
		l, err := adapt.Lease(c.lease)
		if err != nil {
			problems = append(problems, err.Error())
		}
		s.Lease = l
	}
	if c.cm != nil {
		st, ctl, err := adapt.Status(c.cm)
		if err != nil {
			problems = append(problems, err.Error())
		}
		s.Status, s.Request, s.Pause, s.Cancel = st, ctl.Request, ctl.Pause, ctl.Cancel
	}
	for i, name := range c.names {
		n := c.nodes[name]
		if hb, ok := c.beats[name]; ok {
			n.Heartbeat, n.HeartbeatSeen = hb, c.beatSeen[name]
		}
		n.Verdict = verdicts[name]
		if w, ok := c.pods[name]; ok {
			for _, obj := range w.informer.GetStore().List() {
				n.Pods = append(n.Pods, adapt.Pod(obj.(*corev1.Pod), c.runners))
			}
			slices.SortFunc(n.Pods, func(a, b swapplan.Pod) int {
				return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
			})
		}
		s.Nodes[i] = n
	}
	for _, name := range slices.Sorted(maps.Keys(c.problems)) {
		problems = append(problems, c.problems[name])
	}
	return s, problems
}

// setLease keeps the regrade Lease, from the watch or from the
// controller's own write, unless the copy kept is newer: a pass that runs
// before the watch has caught up with the last pass's write plans and
// writes on top of that write, not on the copy it replaced (whose update
// the API server would refuse as a conflict), and the watch's echo of it
// changes nothing.
func (c *cache) setLease(l *coordinationv1.Lease) {
	old, kept := keepNewer(&c.mu, &c.lease, l)
	if kept && (old == nil || holder(old) != holder(l) || old.Annotations[api.AnnotationSwap] != l.Annotations[api.AnnotationSwap]) {
		c.changed()
	}
}

// setStatus keeps the status ConfigMap as setLease keeps the Lease. A
// status.json that does not read keeps the one the copy before it held:
// the cooldown and the last swap's result live there, and the next status
// the controller writes would otherwise start from nothing, forgetting
// them. Its next write of the status puts the kept one back.
func (c *cache) setStatus(m *corev1.ConfigMap) {
	c.mu.Lock()
	prev := c.cm
	c.mu.Unlock()
	if err := statusError(m.Data[api.StatusKey]); err != nil && prev != nil &&
		strings.TrimSpace(prev.Data[api.StatusKey]) != "" && statusError(prev.Data[api.StatusKey]) == nil {
		c.log.Warn("the status ConfigMap's status does not read; the last one read is kept", logkey.Err, err)
		m = m.DeepCopy()
		m.Data[api.StatusKey] = prev.Data[api.StatusKey]
	}
	old, kept := keepNewer(&c.mu, &c.cm, m)
	if kept && (old == nil || controlsChanged(old.Data, m.Data)) {
		c.changed()
	}
}

// statusError says why a status.json does not read; blank reads as
// absent.
func statusError(v string) error {
	_, _, err := adapt.Status(&corev1.ConfigMap{Data: map[string]string{api.StatusKey: v}})
	return err
}

// controlsChanged says a key people write for the controller changed: the
// manual request, the pause or the cancel. The controller's own status
// changing wakes no pass.
func controlsChanged(old, new map[string]string) bool {
	for _, k := range []string{api.RequestKey, api.PauseKey, api.CancelKey} {
		if old[k] != new[k] {
			return true
		}
	}
	return false
}

// keepNewer stores obj in *at unless the object there is newer, and
// returns the object it replaced and whether it did.
func keepNewer[T interface {
	comparable
	metav1.Object
}](mu *sync.Mutex, at *T, obj T) (old T, kept bool) {
	mu.Lock()
	defer mu.Unlock()
	var none T
	old = *at
	if old != none && older(obj, old) {
		return old, false
	}
	*at = obj
	return old, true
}

// older says whether a's resourceVersion is below b's; versions that do
// not compare (a fake API's) are never older.
func older(a, b metav1.Object) bool {
	return olderVersion(a.GetResourceVersion(), b.GetResourceVersion())
}

// swappingLabels are the Nodes labelled api.LabelSwapping, and the values.
func (c *cache) swappingLabels() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.swapping)
}

// forgetSwapping forgets the label of a Node gone.
func (c *cache) forgetSwapping(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.swapping, name)
}

func olderVersion(a, b string) bool {
	n, err := resourceversion.CompareResourceVersion(a, b)
	return err == nil && n < 0
}

// wrote keeps the Node the API server returned for the controller's own
// write, unless the cache holds a newer one.
func (c *cache) wrote(n *corev1.Node) {
	c.mu.Lock()
	delete(c.unsettled, n.Name)
	c.mu.Unlock()
	slim, _ := slimNode(n)
	c.nodeChanged(slim)
}

// unsure marks a Node whose write failed: it may have landed.
func (c *cache) unsure(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unsettled[name] = true
}

// settle reads back each Node a write to failed, from the API server
// itself, and keeps it, so that the pass plans on what the write left;
// it says whether every such Node is settled (one gone is). A Node that
// cannot be read stays unsettled, and no pass plans until it is.
func (c *cache) settle(ctx context.Context) bool {
	c.mu.Lock()
	names := slices.Sorted(maps.Keys(c.unsettled))
	c.mu.Unlock()
	for _, name := range names {
		n, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			c.mu.Lock()
			delete(c.unsettled, name)
			c.mu.Unlock()
		case err != nil:
			c.log.Debug("a Node whose write failed is not read back yet", logkey.Node, name, logkey.Err, err)
			return false
		default:
			c.wrote(n)
		}
	}
	return true
}

// leaseObject and statusObject are the cached objects, for the executor's
// optimistic updates.
func (c *cache) leaseObject() *coordinationv1.Lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lease == nil {
		return nil
	}
	return c.lease.DeepCopy()
}

func (c *cache) statusObject() *corev1.ConfigMap {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cm == nil {
		return nil
	}
	return c.cm.DeepCopy()
}
