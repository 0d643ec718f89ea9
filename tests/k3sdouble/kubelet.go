package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/swapplan"
)

// kubelet is the part of the double that a kubelet plays: the Node's
// heartbeat Lease, its Ready condition and the Pods it deletes.
type kubelet struct {
	c    kubernetes.Interface
	node string
	log  *slog.Logger
	beat time.Time
}

// leaseEvery is how often the Lease is renewed: a kubelet's 10s, shortened
// so that a test sees a heartbeat within a second.
const leaseEvery = time.Second

// loop runs until ctx ends.
func (k *kubelet) loop(ctx context.Context, period time.Duration, s *server) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		k.tick(ctx, s)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (k *kubelet) tick(ctx context.Context, s *server) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	list, err := k.c.CoreV1().Nodes().List(cctx, metav1.ListOptions{})
	if err != nil {
		k.log.Warn("nodes not listed", "err", err)
		if s != nil {
			s.tick(ctx, nil)
		}
		return
	}
	var self *corev1.Node
	for i := range list.Items {
		if list.Items[i].Name == k.node {
			self = &list.Items[i]
		}
	}
	if s != nil {
		s.tick(ctx, list.Items)
	}
	if self == nil {
		return
	}
	if s != nil && !s.removed.Load() {
		k.serverMetadata(cctx, self, s)
	}
	if c := condition(self, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
		now := metav1.Now()
		patchConditions(cctx, k.c, k.node, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", Message: "the k3s double runs", LastHeartbeatTime: now, LastTransitionTime: now})
	}
	if time.Since(k.beat) >= leaseEvery {
		k.heartbeat(cctx)
	}
	k.deletePods(cctx, self)
}

// serverMetadata writes what k3s's server writes on its Node: the member's
// name and address, and the server role labels.
func (k *kubelet) serverMetadata(ctx context.Context, n *corev1.Node, s *server) {
	ann := map[string]any{}
	if n.Annotations[swapplan.AnnotationEtcdNodeName] != s.name {
		ann[swapplan.AnnotationEtcdNodeName] = s.name
	}
	if n.Annotations[AnnotationNodeAddress] != s.o.nodeIP {
		ann[AnnotationNodeAddress] = s.o.nodeIP
	}
	labels := map[string]any{}
	for _, l := range swapplan.ServerLabels {
		if n.Labels[l] != "true" {
			labels[l] = "true"
		}
	}
	if len(ann) == 0 && len(labels) == 0 {
		return
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann, "labels": labels}})
	if _, err := k.c.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		k.log.Warn("server metadata not written", "err", err)
	}
}

func (k *kubelet) heartbeat(ctx context.Context) {
	leases := k.c.CoordinationV1().Leases(swapplan.NodeLeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	l, err := leases.Get(ctx, k.node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: k.node},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(k.node), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &now}}, metav1.CreateOptions{})
	case err == nil:
		l.Spec.RenewTime = &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		k.log.Warn("heartbeat not written", "err", err)
		return
	}
	k.beat = now.Time
}

// deletePods deletes the Pods being deleted on a cordoned Node, as the
// kubelet does once their containers stopped.
func (k *kubelet) deletePods(ctx context.Context, n *corev1.Node) {
	if !n.Spec.Unschedulable {
		return
	}
	pods, err := k.c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			_ = k.c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	}
}

func condition(n *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == t {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// patchConditions sets conditions on the Node's status, merged by type.
func patchConditions(ctx context.Context, c kubernetes.Interface, node string, conds ...corev1.NodeCondition) {
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
	_, _ = c.CoreV1().Nodes().PatchStatus(ctx, node, patch)
}
