package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"runtime"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-role/fleet-role/tests/kubelet"
)

// kubeletRole is the part of the double that a kubelet plays: the Node's
// heartbeat Lease, its Ready condition and the Pods it deletes. It runs
// only while the unit runs: a stopped unit beats no more.
type kubeletRole struct {
	c    kubernetes.Interface
	node string
	log  *slog.Logger
	beat time.Time
	// serves, on a server, says its own apiserver serves: the kubelet of
	// a k3s server reaches the API through it, and k3s starts it only
	// once its etcd member is ready (votes), and it answers only while
	// that member reaches a quorum. nil: always (an agent, whose load
	// balancer reaches any server; the test's API stands for them).
	serves func() bool
	// labels are k3s's node-labels (`node-label:`), put on the Node at
	// every start; registered says this start did.
	labels     []string
	registered bool
	// images is the image store of k3s's containerd, which runs on every
	// host k3s runs on; nil: none.
	images *imageStore
}

// leaseEvery is how often the Lease is renewed: a kubelet's 10s, shortened
// so that a test sees a heartbeat within a second.
const leaseEvery = time.Second

// loop runs until ctx ends.
func (k *kubeletRole) loop(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		k.tick(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (k *kubeletRole) tick(ctx context.Context) {
	if k.images != nil {
		k.images.sync()
	}
	if k.serves != nil && !k.serves() {
		return // no apiserver to post to: no heartbeat, no status
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if !k.registered {
		if err := k.register(cctx); err != nil {
			k.log.Warn("Unable to register node with API server", "err", err)
			return
		}
		k.registered = true
	}
	self, err := k.c.CoreV1().Nodes().Get(cctx, k.node, metav1.GetOptions{})
	if err != nil {
		k.log.Warn("node not read", "err", err)
		return
	}
	now := time.Now()
	if now.Sub(k.beat) >= leaseEvery {
		if err := kubelet.Heartbeat(cctx, k.c, k.node, now); err != nil {
			k.log.Warn("heartbeat not written", "err", err)
		} else {
			k.beat = now
		}
	}
	// The kubelet posts Ready=True when it runs; after the node lifecycle
	// controller set it Unknown, the next beat sets it back.
	if c := condition(self, corev1.NodeReady); c == nil || c.Status != corev1.ConditionTrue {
		mnow := metav1.Now()
		patchConditions(cctx, k.c, k.node, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", Message: "kubelet is posting ready status", LastHeartbeatTime: mnow, LastTransitionTime: mnow})
	}
	kubelet.DeleteTerminating(cctx, k.c, self)
}

// register does what a start of k3s's agent does to its Node: the
// kubelet creates it, with the kubelet's own labels and the node-labels
// it is given, or finds it registered already, its labels left as they
// are (kubernetes: pkg/kubelet/kubelet_node_status.go,
// registerWithAPIServer, tryRegisterWithAPIServer and initialNode, whose
// labels are the hostname, os and arch; the double does not reconcile
// them on a Node found registered, which fleet-role never reads); then
// k3s puts its node-labels on the Node, over what it has, at every start
// (k3s: pkg/agent/run.go,
// configureNode and updateMutableLabels). Nothing else makes a Node: a
// host whose k3s never ran has none.
func (k *kubeletRole) register(ctx context.Context) error {
	own := map[string]string{corev1.LabelHostname: k.node, corev1.LabelOSStable: runtime.GOOS, corev1.LabelArchStable: runtime.GOARCH}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: k.node, Labels: maps.Clone(own)}}
	maps.Copy(n.Labels, nodeLabels(k.labels))
	if _, err := k.c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err == nil {
		k.log.Info("Successfully registered node")
		return nil
	} else if !apierrors.IsAlreadyExists(err) {
		return err
	}
	if len(k.labels) == 0 {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": nodeLabels(k.labels)}})
	_, err := k.c.CoreV1().Nodes().Patch(ctx, k.node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// nodeLabels reads k3s's node-label entries, key=value or a bare key
// (an empty value). k3s: pkg/agent/run.go, updateMutableLabels.
func nodeLabels(entries []string) map[string]string {
	out := make(map[string]string, len(entries))
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		out[k] = v
	}
	return out
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
