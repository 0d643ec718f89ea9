package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-role/fleet-role/swapplan"
	"github.com/fleet-role/fleet-role/tests/kubelet"
)

// kubeletRole is the part of the double that a kubelet plays: the Node's
// heartbeat Lease, its Ready condition and the Pods it deletes.
type kubeletRole struct {
	c    kubernetes.Interface
	node string
	log  *slog.Logger
	beat time.Time
}

// leaseEvery is how often the Lease is renewed: a kubelet's 10s, shortened
// so that a test sees a heartbeat within a second.
const leaseEvery = time.Second

// loop runs until ctx ends.
func (k *kubeletRole) loop(ctx context.Context, period time.Duration, s *server) {
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

func (k *kubeletRole) tick(ctx context.Context, s *server) {
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
	if now := time.Now(); now.Sub(k.beat) >= leaseEvery {
		if err := kubelet.Heartbeat(cctx, k.c, k.node, now); err != nil {
			k.log.Warn("heartbeat not written", "err", err)
		} else {
			k.beat = now
		}
	}
	kubelet.DeleteTerminating(cctx, k.c, self)
}

// serverMetadata writes what k3s's server writes on its Node: the member's
// name and address, and the server role labels.
func (k *kubeletRole) serverMetadata(ctx context.Context, n *corev1.Node, s *server) {
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
