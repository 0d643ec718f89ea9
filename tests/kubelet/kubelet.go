// Package kubelet does over the API the two things of a kubelet that the
// simulated fleets need: renewing the Node's heartbeat Lease (tests/fleetsim,
// tests/k3sdouble), and deleting the Pods being deleted on a cordoned
// Node, as a kubelet does once their containers stopped (tests/k3sdouble;
// tests/fleetsim has tests/fleetmodel say which).
package kubelet

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/api"
)

// Heartbeat renews the Node's Lease in kube-node-lease, creating it on
// the first beat.
func Heartbeat(ctx context.Context, c kubernetes.Interface, node string, now time.Time) error {
	leases := c.CoordinationV1().Leases(api.NodeLeaseNamespace)
	renew := metav1.NewMicroTime(now)
	l, err := leases.Get(ctx, node, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = leases.Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: node},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &renew}}, metav1.CreateOptions{})
	case err == nil:
		l.Spec.RenewTime = &renew
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	return err
}

// DeleteTerminating deletes the Pods being deleted on the Node, when it
// is cordoned: only a drained Node has them.
func DeleteTerminating(ctx context.Context, c kubernetes.Interface, n *corev1.Node) {
	if !n.Spec.Unschedulable {
		return
	}
	pods, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
	if err != nil {
		return
	}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			_ = c.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
		}
	}
}
