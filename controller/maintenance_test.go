package controller

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sfake "k8s.io/client-go/kubernetes/fake"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
)

// deadV2 is fleet(5) with v2 dead by every sign for ten minutes: its
// probe, its Ready and its kubelet's Lease ten minutes old, its member
// unreachable from v1 and v3.
func deadV2(t *testing.T, now time.Time) []runtime.Object {
	objs := fleet(5, now)
	then := now.Add(-10 * time.Minute)
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Node:
			var p api.Probe
			require.NoError(t, json.Unmarshal([]byte(o.Annotations[api.AnnotationProbe]), &p))
			switch o.Name {
			case "v2":
				p.At = then
				o.Status.Conditions[0].Status, o.Status.Conditions[0].LastHeartbeatTime = corev1.ConditionUnknown, metav1.NewTime(then)
			case "v1", "v3":
				p.Unreachable = []string{"v2-0a1b2c3d"}
			}
			b, err := json.Marshal(p)
			require.NoError(t, err)
			o.Annotations[api.AnnotationProbe] = string(b)
		case *coordinationv1.Lease:
			if o.Name == "v2" {
				o.Spec.RenewTime = &metav1.MicroTime{Time: then}
			}
		}
	}
	return objs
}

func TestThroughAPassAVoterDeadByEverySignIsNotDeadWhileCordonedNotByFleetRoleAnnotatedOrHoldingKuredsLock(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	created := now.Add(-20 * time.Minute).Format(time.RFC3339)
	for _, c := range []struct {
		name   string
		change func(v2 *corev1.Node, kured *appsv1.DaemonSet)
		dead   bool
	}{
		{"no maintenance: dead", func(*corev1.Node, *appsv1.DaemonSet) {}, true},
		{"cordoned by someone", func(v2 *corev1.Node, _ *appsv1.DaemonSet) { v2.Spec.Unschedulable = true }, false},
		{"annotated", func(v2 *corev1.Node, _ *appsv1.DaemonSet) { v2.Annotations[api.AnnotationMaintenance] = "firmware" }, false},
		{"holding kured's lock", func(_ *corev1.Node, ds *appsv1.DaemonSet) {
			ds.Annotations = map[string]string{config.DefaultKuredLockAnnotation: `{"nodeID":"v2","created":"` + created + `","TTL":0}`}
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs := deadV2(t, now)
			ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kured"}}
			for _, o := range objs {
				if n, ok := o.(*corev1.Node); ok && n.Name == "v2" {
					c.change(n, ds)
				}
			}
			cfg := config.DefaultController()
			cfg.ListenAddress, cfg.DryRun, cfg.ReplaceDeadVoters = "", false, true
			cfg.Holds.KuredDaemonSet = "kube-system/kured"
			ctrl, err := New(Options{Config: cfg, Client: k8sfake.NewClientset(append(objs, ds)...), Now: func() time.Time { return now }})
			require.NoError(t, err)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ctrl.cache.start(ctx)
			require.True(t, ctrl.cache.waitForSync(ctx))
			for ctrl.Last() == nil {
				ctrl.pass(ctx)
				time.Sleep(10 * time.Millisecond)
			}
			p := ctrl.Last().Plan
			if c.dead {
				require.Len(t, p.Dead, 1, p.Reason)
				assert.Contains(t, p.Reason, "no swap: the voter v2 is dead: ")
				return
			}
			assert.Empty(t, p.Dead, p.Reason)
			assert.Nil(t, p.Swap, p.Reason)
			assert.Contains(t, p.Reason, "no swap: no voter is unfit; the voter v2 is under maintenance (")
		})
	}
}
