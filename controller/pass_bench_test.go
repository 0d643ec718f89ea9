package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
)

// fleet builds n Nodes as the controller sees them: three voters, two
// standbys, the rest agents, each with its probe, its kubelet's Lease.
func fleet(n int, now time.Time) []runtime.Object {
	var objs []runtime.Object
	voters := []api.Member{{Name: "v1-0a1b2c3d"}, {Name: "v2-0a1b2c3d"}, {Name: "v3-0a1b2c3d"}}
	for i := range n {
		name, role := fmt.Sprintf("a%05d", i), api.RoleAgent
		switch {
		case i < 3:
			name, role = fmt.Sprintf("v%d", i+1), api.RoleVoter
		case i < 5:
			name, role = fmt.Sprintf("s%d", i-2), api.RoleStandby
		}
		p := api.Probe{At: now.Add(-10 * time.Second), Period: api.Duration(time.Minute), Healthy: true, Staged: role == api.RoleStandby, FsyncP99Ms: 2.5, RTTMs: 1.2}
		labels := map[string]string{api.LabelRole: role, "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
		ann := map[string]string{"node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"}
		if role == api.RoleVoter {
			p.Member, p.Members = name+"-0a1b2c3d", voters
			for _, l := range api.ServerLabels {
				labels[l] = "true"
			}
			ann[api.AnnotationEtcdNodeName] = name + "-0a1b2c3d"
		}
		b, _ := json.Marshal(p)
		ann[api.AnnotationProbe] = string(b)
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: ann},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.NewTime(now)},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse},
			}}}
		if role == api.RoleVoter {
			node.Status.Conditions = append(node.Status.Conditions, corev1.NodeCondition{Type: api.ConditionEtcdIsVoter, Status: corev1.ConditionTrue, Reason: api.ReasonMemberNotLearner})
		}
		objs = append(objs, node, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: api.NodeLeaseNamespace, Name: name},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name), RenewTime: ptr.To(metav1.NewMicroTime(now))},
		})
	}
	return objs
}

// BenchmarkPass is one pass over fleets of 1,000 and 5,000 Nodes, from
// the informers' caches: the snapshot assembled, the plan made, the status
// compared. Idle: no swap under way (the pass makes no request). Mid-swap:
// at the gates, every voter's membership read (the pass renews the Lease,
// a request to the fake API, counted in).
func BenchmarkPass(b *testing.B) {
	for _, n := range []int{1000, 5000} {
		for _, mode := range []string{"idle", "mid-swap"} {
			b.Run(fmt.Sprintf("nodes=%d/%s", n, mode), func(b *testing.B) {
				// A fixed clock: the Lease, the probes and the heartbeats
				// stay as fresh as they were built however long the run.
				now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
				objs := fleet(n, now)
				if mode == "mid-swap" {
					rec := api.SwapRecord{ID: "s", Out: "v1", In: "s1", Origin: api.OriginManual, StartedAt: now.Add(-time.Minute)}
					r, _ := json.Marshal(rec)
					objs = append(objs, &coordinationv1.Lease{
						ObjectMeta: metav1.ObjectMeta{Namespace: api.Namespace, Name: api.LeaseName, Annotations: map[string]string{api.AnnotationSwap: string(r)}},
						Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(api.ControllerHolder), RenewTime: ptr.To(metav1.NewMicroTime(now)),
							LeaseDurationSeconds: ptr.To[int32](60)},
					})
				}
				client := k8sfake.NewClientset(objs...)
				cfg := config.DefaultController()
				cfg.ListenAddress = ""
				c, err := New(Options{Config: cfg, Client: client, Now: func() time.Time { return now }})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				c.cache.start(ctx)
				if !c.cache.waitForSync(ctx) {
					b.Fatal("caches not synced")
				}
				for c.Last() == nil { // the first writes the status, once the swap's Pods are watched
					c.pass(ctx)
					time.Sleep(10 * time.Millisecond)
				}
				b.ReportAllocs()
				b.ResetTimer()
				var decide time.Duration
				for b.Loop() {
					c.pass(ctx)
					decide += c.Last().Decide
				}
				b.StopTimer()
				b.ReportMetric(float64(decide.Microseconds())/float64(b.N)/1000, "decide-ms/op")
				if p := c.Last(); p.Err != nil {
					b.Fatalf("pass: %v", p.Err)
				} else if mode == "mid-swap" && p.Plan.Step == "" {
					b.Fatalf("not mid-swap: %+v", p.Plan)
				}
			})
		}
	}
}
