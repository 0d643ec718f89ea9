package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/fleet-role/fleet-role/api"
)

// AnnotationNodeAddress is k3s's: the address of the Node's member.
const AnnotationNodeAddress = "etcd.k3s.cattle.io/node-address"

// leaderElected runs do every --period while this server holds the Lease
// kube-system/<name>, until ctx ends; it releases the Lease on the way
// out. k3s: wrangler's pkg/leader, RunOrDie (identity: the host; here the
// Node's name, since the simulated hosts share one hostname).
func (s *server) leaderElected(ctx context.Context, name string, lease, renew, retry time.Duration, do func(context.Context)) {
	lock := &servingLock{Interface: &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: name},
		Client:     s.kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: s.o.nodeName},
	}, serves: s.serves}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: lease, RenewDeadline: renew, RetryPeriod: retry, ReleaseOnCancel: true, Name: name,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					s.log.Info("leading", "lease", name)
					t := time.NewTicker(s.o.period)
					defer t.Stop()
					for {
						if s.serves() {
							do(ctx) // through its own apiserver
						}
						select {
						case <-ctx.Done():
							return
						case <-t.C:
						}
					}
				},
				OnStoppedLeading: func() { s.log.Info("no longer leading", "lease", name) },
			},
		})
		if err != nil {
			s.log.Error("leader election not started", "lease", name, "err", err)
			return
		}
		le.Run(ctx) // returns when leadership is lost; stand again
	}
}

// servingLock is the election's Lease as a k3s server reaches it: through
// its own apiserver, which answers only while the server serves
// ((*server).serves), so that a server whose member lost its quorum loses
// its leadership at the renew deadline and another that serves takes
// over, as k3s's controllers do.
type servingLock struct {
	resourcelock.Interface
	serves func() bool
}

var errNotServing = errors.New("the server's apiserver does not answer: its etcd member does not reach a quorum")

func (l *servingLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	if !l.serves() {
		return nil, nil, errNotServing
	}
	return l.Interface.Get(ctx)
}

func (l *servingLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if !l.serves() {
		return errNotServing
	}
	return l.Interface.Create(ctx, r)
}

func (l *servingLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	if !l.serves() {
		return errNotServing
	}
	return l.Interface.Update(ctx, r)
}

// memberController is k3s's member removal controller, over every Node
// at each pass (k3s: on each Node change). k3s:
// pkg/etcd/member_controller.go, etcdMemberHandler.sync.
func (s *server) memberController(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nodes, err := s.kube.CoreV1().Nodes().List(cctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if s.onRemove(cctx, n) {
			continue
		}
		act := memberSync(n.Labels, n.Annotations)
		switch act.kind {
		case syncNothing:
			continue
		case syncError:
			s.log.Warn("member removal", "node", n.Name, "err", act.err)
			continue
		case syncRemove:
			err := s.removePeer(cctx, act.name, act.address)
			switch {
			case errors.Is(err, errNotEnoughStarted):
				// k3s clears the request: the requester asks again once
				// there are more members.
				s.log.Warn("etcd member removal rejected, clearing remove annotation", "node", n.Name, "member", act.name, "err", err)
				act.patch = map[string]any{api.AnnotationEtcdRemove: nil}
			case err != nil:
				s.log.Warn("member not removed", "node", n.Name, "member", act.name, "err", err)
				continue
			default:
				s.log.Info("etcd member removal successful", "node", n.Name, "member", act.name, "address", act.address)
			}
		}
		if _, err := s.kube.CoreV1().Nodes().Patch(cctx, n.Name, types.JSONPatchType, annotationOps(act.patch), metav1.PatchOptions{}); err != nil {
			s.log.Warn("node annotations not updated", "node", n.Name, "err", err)
		}
	}
}

// annotationOps is the JSON patch k3s sends for a Node's annotations: an
// add for each value, a remove for each nil, which fails the whole patch
// when the annotation is gone already (RFC 6902; the API server's
// json-patch: "Unable to remove nonexistent key"). k3s:
// pkg/util/patch.go, Patcher.Patch (types.JSONPatchType) and
// PatchList.Add/Remove, "/" escaped as "~1".
func annotationOps(patch map[string]any) []byte {
	keys := slices.Sorted(maps.Keys(patch))
	ops := make([]map[string]any, 0, len(keys))
	for _, k := range keys {
		path := "/metadata/annotations/" + strings.ReplaceAll(k, "/", "~1")
		if patch[k] == nil {
			ops = append(ops, map[string]any{"op": "remove", "path": path})
		} else {
			ops = append(ops, map[string]any{"op": "add", "path": path, "value": patch[k]})
		}
	}
	b, _ := json.Marshal(ops)
	return b
}

// Finalizer is the finalizer wrangler puts on every Node for k3s's
// on-remove handler "managed-etcd-controller" (k3s:
// pkg/etcd/member_controller.go, registerMemberHandlers; wrangler:
// pkg/generic/remove.go, "wrangler.cattle.io/" and the handler's name).
const Finalizer = "wrangler.cattle.io/managed-etcd-controller"

// onRemove does for one Node what wrangler and k3s's on-remove handler
// do, and says whether it dealt with the Node: a Node without the
// finalizer and not being deleted gets it; a Node being deleted has the
// member memberOnRemove names removed and then the finalizer dropped, so
// that it goes; a handler error keeps the finalizer and is tried again at
// the next pass (wrangler requeues). k3s: pkg/etcd/member_controller.go,
// (*etcdMemberHandler).onRemove; pkg/etcd/etcd.go, RemovePeer.
func (s *server) onRemove(ctx context.Context, n *corev1.Node) bool {
	has := slices.Contains(n.Finalizers, Finalizer)
	switch {
	case n.DeletionTimestamp == nil && !has:
		o := n.DeepCopy()
		o.Finalizers = append(o.Finalizers, Finalizer)
		if _, err := s.kube.CoreV1().Nodes().Update(ctx, o, metav1.UpdateOptions{}); err != nil {
			s.log.Warn("finalizer not added", "node", n.Name, "err", err)
		}
		return false
	case n.DeletionTimestamp == nil || !has:
		return n.DeletionTimestamp != nil
	}
	act := memberOnRemove(n.Labels, n.Annotations)
	switch act.kind {
	case syncError:
		s.log.Warn("etcd member not removed from the deleted node", "node", n.Name, "err", act.err)
		return true
	case syncRemove:
		if err := s.removePeer(ctx, act.name, act.address); err != nil {
			s.log.Warn("etcd member not removed from the deleted node", "node", n.Name, "member", act.name, "err", err)
			return true
		}
		s.log.Info("etcd member of the deleted node removed", "node", n.Name, "member", act.name, "address", act.address)
	}
	o := n.DeepCopy()
	o.Finalizers = slices.DeleteFunc(o.Finalizers, func(f string) bool { return f == Finalizer })
	if _, err := s.kube.CoreV1().Nodes().Update(ctx, o, metav1.UpdateOptions{}); err != nil {
		s.log.Warn("finalizer not dropped", "node", n.Name, "err", err)
	}
	return true
}

// memberOnRemove decides, from a deleted Node's labels and annotations,
// what k3s's on-remove handler does: nothing without the etcd role label
// (any value); nothing when removed-node-name is set and not empty
// (removed already, whatever remove says); else remove the member named
// by node-name at node-address, both needed (an error without either).
// k3s: pkg/etcd/member_controller.go, (*etcdMemberHandler).onRemove.
func memberOnRemove(labels, ann map[string]string) syncAction {
	if _, ok := labels[api.LabelEtcd]; !ok {
		return syncAction{}
	}
	if ann[api.AnnotationEtcdRemovedNodeName] != "" {
		return syncAction{}
	}
	name, ok := ann[api.AnnotationEtcdNodeName]
	if !ok {
		return syncAction{kind: syncError, err: errors.New("node name annotation not found")}
	}
	address, ok := ann[AnnotationNodeAddress]
	if !ok {
		return syncAction{kind: syncError, err: errors.New("node address annotation not found")}
	}
	return syncAction{kind: syncRemove, name: name, address: address}
}

type syncKind int

const (
	syncNothing syncKind = iota
	syncError
	syncRemove
	syncReset
)

// syncAction is what k3s's member controller does for one Node.
type syncAction struct {
	kind          syncKind
	err           error
	name, address string
	// patch is the annotations to write after it (nil deletes one).
	patch map[string]any
}

// memberSync decides, from a Node's labels and annotations, what k3s's
// member controller does: nothing without the etcd role label (any
// value) or without the remove annotation; an error without node-name or
// node-address (checked first, whatever else is there); with
// removed-node-name set, reset the removal when it differs from
// node-name (both removed-node-name and remove dropped, the removal not
// made: it must be asked again), else nothing; with remove = "true" in
// any case, remove the member named by node-name at node-address, then
// record removed-node-name and drop remove, node-name and node-address.
// k3s (v1.34.2 on; v1.36.3 read): pkg/etcd/member_controller.go,
// etcdMemberHandler.sync.
func memberSync(labels, ann map[string]string) syncAction {
	if _, ok := labels[api.LabelEtcd]; !ok {
		return syncAction{}
	}
	requested, ok := ann[api.AnnotationEtcdRemove]
	if !ok {
		return syncAction{}
	}
	name, ok := ann[api.AnnotationEtcdNodeName]
	if !ok {
		return syncAction{kind: syncError, err: errors.New("node name annotation not found")}
	}
	address, ok := ann[AnnotationNodeAddress]
	if !ok {
		return syncAction{kind: syncError, err: errors.New("node address annotation not found")}
	}
	if removed, ok := ann[api.AnnotationEtcdRemovedNodeName]; ok {
		if removed != name {
			return syncAction{kind: syncReset, patch: map[string]any{api.AnnotationEtcdRemovedNodeName: nil, api.AnnotationEtcdRemove: nil}}
		}
		return syncAction{}
	}
	if strings.ToLower(requested) != "true" {
		return syncAction{}
	}
	return syncAction{kind: syncRemove, name: name, address: address, patch: map[string]any{
		api.AnnotationEtcdRemovedNodeName: name, api.AnnotationEtcdRemove: nil, api.AnnotationEtcdNodeName: nil, AnnotationNodeAddress: nil}}
}

// errNotEnoughStarted is etcd's answer to the removal of the leader when
// no other voter is there to take over (rpctypes.ErrMemberNotEnoughStarted).
var errNotEnoughStarted = rpctypes.ErrMemberNotEnoughStarted

// removePeer removes the member whose name is name and one of whose peer
// URLs has the host address; none such (or no name) is success. A member
// that leads hands leadership first to the first other voter, through
// its own client URL; with none, errNotEnoughStarted. k3s:
// pkg/etcd/etcd.go, RemovePeer (self-removal allowed, as the member
// controller asks) and moveLeader.
func (s *server) removePeer(ctx context.Context, name, address string) error {
	if name == "" {
		return nil
	}
	members, err := s.cli.MemberList(ctx)
	if err != nil {
		return err
	}
	var others []*etcdserverpb.Member
	for _, m := range members.Members {
		if !m.IsLearner && m.Name != name {
			others = append(others, m)
		}
	}
	for _, m := range members.Members {
		if m.Name != name {
			continue
		}
		for _, p := range m.PeerURLs {
			u, err := url.Parse(p)
			if err != nil {
				return err
			}
			if u.Hostname() != address {
				continue
			}
			st, err := s.cli.Status(ctx, clientURL(s.o.nodeIP))
			if err != nil {
				return err
			}
			if st.Leader == m.ID {
				if len(others) == 0 {
					return errNotEnoughStarted
				}
				if err := s.moveLeader(ctx, m, others[0]); err != nil {
					return err
				}
			}
			s.log.Info("Removing member from etcd", "name", m.Name, "id", m.ID, "address", address)
			_, err = s.cli.MemberRemove(ctx, m.ID)
			if err != nil && strings.Contains(err.Error(), "member not found") {
				return nil
			}
			return err
		}
	}
	return nil
}

// moveLeader asks the leader, through its own client URLs, to hand
// leadership to another member. k3s: pkg/etcd/etcd.go, moveLeader.
func (s *server) moveLeader(ctx context.Context, from, to *etcdserverpb.Member) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: from.ClientURLs, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	s.log.Info("Moving etcd cluster leader", "from", from.Name, "to", to.Name)
	_, err = cli.MoveLeader(ctx, to.ID)
	return err
}

// writeMetadata keeps this server's member name and address and the
// server role labels on its Node. k3s: pkg/etcd/metadata_controller.go,
// metadataHandler.handleSelf.
func (s *server) writeMetadata(ctx context.Context) {
	n, err := s.kube.CoreV1().Nodes().Get(ctx, s.o.nodeName, metav1.GetOptions{})
	if err != nil {
		return
	}
	if n.Annotations[api.AnnotationEtcdNodeName] == s.name && n.Annotations[AnnotationNodeAddress] == s.o.nodeIP &&
		n.Labels[api.LabelEtcd] == "true" && n.Labels[api.LabelControlPlane] == "true" {
		return
	}
	// Note: etcd and control-plane, not master, which api.ServerLabels
	// lists for older k3s: k3s v1.36.3 labels its servers with the two
	// (seen on the real binary, tests/e2e/testdata/after-bootstrap-swap.json).
	labels := map[string]any{api.LabelEtcd: "true", api.LabelControlPlane: "true"}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": map[string]any{api.AnnotationEtcdNodeName: s.name, AnnotationNodeAddress: s.o.nodeIP},
		"labels":      labels}})
	if _, err := s.kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		s.log.Warn("server metadata not written", "err", err)
	}
}

// conditionHeartbeat is how often an unchanged EtcdIsVoter has its
// heartbeat renewed. k3s: pkg/etcd/etcd.go, heartbeatInterval.
const conditionHeartbeat = 5 * time.Minute

// manageTickerTime is how often k3s's etcd leader promotes learners and
// writes EtcdIsVoter (--learner-tick).
// k3s: pkg/etcd/etcd.go, manageTickerTime (15s), manageLearners.
const manageTickerTime = 15 * time.Second

// voterConditions writes EtcdIsVoter on the Nodes labelled etcd=true,
// once each manageTickerTime. k3s: pkg/etcd/etcd.go, manageLearners and
// setEtcdStatusCondition.
func (s *server) voterConditions(ctx context.Context, members []*etcdMember) {
	nodes, err := s.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: api.LabelEtcd + "=true"})
	if err != nil {
		return
	}
	matched := map[string]bool{}
	for _, m := range members {
		var node *corev1.Node
		for i := range nodes.Items {
			if m.Name == nodes.Items[i].Annotations[api.AnnotationEtcdNodeName] {
				node = &nodes.Items[i]
				matched[node.Name] = true
				break
			}
		}
		if node == nil {
			continue
		}
		status, reason, message := corev1.ConditionTrue, api.ReasonMemberNotLearner, "Node is a voting member of the etcd cluster"
		if m.IsLearner {
			status, reason, message = corev1.ConditionFalse, api.ReasonMemberIsLearner, "Node has not been promoted to voting member of the etcd cluster"
		}
		if err := s.healthy(ctx, m); err != nil {
			status, reason, message = corev1.ConditionFalse, api.ReasonUnhealthy, err.Error()
		}
		s.setCondition(ctx, node, status, reason, message)
	}
	for i := range nodes.Items {
		if n := &nodes.Items[i]; !matched[n.Name] {
			s.setCondition(ctx, n, corev1.ConditionFalse, api.ReasonNotAMember, "Node is not a member of the etcd cluster")
		}
	}
}

func (s *server) setCondition(ctx context.Context, n *corev1.Node, status corev1.ConditionStatus, reason, message string) {
	now := metav1.Now()
	c := corev1.NodeCondition{Type: api.ConditionEtcdIsVoter, Status: status, Reason: reason, Message: message,
		LastHeartbeatTime: now, LastTransitionTime: now}
	if old := condition(n, api.ConditionEtcdIsVoter); old != nil && old.Status == status && old.Reason == reason && old.Message == message {
		if now.Sub(old.LastHeartbeatTime.Time) < conditionHeartbeat {
			return
		}
		c.LastTransitionTime = old.LastTransitionTime
	}
	patchConditions(ctx, s.kube, n.Name, c)
}

// healthy asks the member for its status. k3s: getETCDStatus.
func (s *server) healthy(ctx context.Context, m *etcdMember) error {
	if len(m.ClientURLs) == 0 {
		return errors.New("failed to check etcd member status: the member has not started")
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := s.cli.Status(cctx, m.ClientURLs[0])
	if err != nil {
		return fmt.Errorf("failed to check etcd member status: %w", err)
	}
	if len(st.Errors) > 0 {
		return errors.New("etcd member has status errors: " + strings.Join(st.Errors, ","))
	}
	return nil
}

// nodeMonitorPeriod is how often the node lifecycle stand-in looks
// (kube-controller-manager's --node-monitor-period default).
const nodeMonitorPeriod = 5 * time.Second

// nodeLifecycle turns Ready to Unknown on the Nodes whose heartbeat Lease
// is older than the grace period. kubernetes: pkg/controller/
// nodelifecycle, (*Controller).tryUpdateNodeHealth.
func (s *server) nodeLifecycle(ctx context.Context) {
	if time.Since(s.lastMonitor) < nodeMonitorPeriod {
		return
	}
	s.lastMonitor = time.Now()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nodes, err := s.kube.CoreV1().Nodes().List(cctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		ready := condition(n, corev1.NodeReady)
		if ready == nil || ready.Status == corev1.ConditionUnknown {
			continue
		}
		lease, err := s.kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Get(cctx, n.Name, metav1.GetOptions{})
		var beat time.Time
		if err == nil && lease.Spec.RenewTime != nil {
			beat = lease.Spec.RenewTime.Time
		}
		if beat.Before(ready.LastHeartbeatTime.Time) {
			beat = ready.LastHeartbeatTime.Time
		}
		if time.Since(beat) <= s.o.monitorGrace {
			continue
		}
		now := metav1.Now()
		patchConditions(cctx, s.kube, n.Name, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionUnknown,
			Reason: "NodeStatusUnknown", Message: "Kubelet stopped posting node status.",
			LastHeartbeatTime: ready.LastHeartbeatTime, LastTransitionTime: now})
		s.log.Info("node heartbeat stale: Ready is Unknown", "node", n.Name, "since", beat)
	}
}
