package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// masterLeasePrefix is where each apiserver keeps its lease, by its
// address, in its etcd (kubernetes: pkg/controlplane, the lease
// reconciler's storage under /registry/masterleases/).
const masterLeasePrefix = "/registry/masterleases/"

// apiPort is the port every k3s apiserver advertises (k3s's supervisor,
// in front of it; k3s: pkg/daemons/control, advertise-port).
const apiPort = 6443

// errNoMasterLeases: the reconciler refuses to empty the Service.
var errNoMasterLeases = errors.New("no master IPs were listed in storage, refusing to erase all endpoints for the kubernetes service")

// endpointReconciler keeps the kubernetes Service's Endpoints and
// EndpointSlice (default namespace) listing the apiservers that serve, as
// kube-apiserver's lease endpoint reconciler does on every server: every
// interval (kubernetes: DefaultEndpointReconcilerInterval, 10 s) a
// serving server refreshes its own lease (TTL 15 s,
// DefaultEndpointReconcilerTTL) in the fleet's etcd, lists every lease
// there and writes the addresses found. A server that stops serving
// renews no lease, and its address drops out once its lease expired, at
// the next reconcile of any server that serves. kubernetes:
// pkg/controlplane/reconcilers/lease.go, (*leaseEndpointReconciler).
// ReconcileEndpoints and doReconcile, storageLeases; the objects as
// pkg/controlplane/reconcilers/endpointsadapter.go writes them.
// Note: on a clean stop kube-apiserver removes its own lease
// (RemoveEndpoints, from a pre-shutdown hook); the double never does, so
// a stopped server's address stays listed until its lease expires, as
// when k3s is killed.
func (s *server) endpointReconciler(ctx context.Context) {
	t := time.NewTicker(s.o.endpointInterval)
	defer t.Stop()
	for {
		if s.serves() {
			if err := s.reconcileEndpoints(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("kubernetes endpoints not reconciled", "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reconcileEndpoints refreshes this server's lease, then makes the
// Endpoints and the EndpointSlice list every address with a lease.
func (s *server) reconcileEndpoints(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// UpdateLease: refreshed whatever happens below.
	ttl := max(int64(s.o.endpointTTL/time.Second), 1)
	l, err := s.cli.Grant(cctx, ttl)
	if err != nil {
		return fmt.Errorf("grant the master lease: %w", err)
	}
	if _, err := s.cli.Put(cctx, masterLeasePrefix+s.o.nodeIP, s.o.nodeIP, clientv3.WithLease(l.ID)); err != nil {
		return fmt.Errorf("refresh the master lease: %w", err)
	}
	// ListLeases.
	resp, err := s.cli.Get(cctx, masterLeasePrefix, clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("list the master leases: %w", err)
	}
	var ips []string
	for _, kv := range resp.Kvs {
		ips = append(ips, strings.TrimPrefix(string(kv.Key), masterLeasePrefix))
	}
	if len(ips) == 0 {
		return errNoMasterLeases
	}
	slices.Sort(ips)
	return s.writeEndpoints(cctx, ips)
}

// writeEndpoints makes the kubernetes Endpoints and EndpointSlice list ips
// at apiPort, rewriting only what differs. kubernetes:
// endpointsadapter.go, Sync, updateEndpoints and updateEndpointSlice.
func (s *server) writeEndpoints(ctx context.Context, ips []string) error {
	ports := []corev1.EndpointPort{{Name: "https", Port: apiPort, Protocol: corev1.ProtocolTCP}}
	eps := s.kube.CoreV1().Endpoints(metav1.NamespaceDefault)
	err := retry.OnError(retry.DefaultBackoff, retriable, func() error {
		cur, err := eps.Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		//lint:ignore SA1019 kube-apiserver's reconciler still writes the Endpoints beside the slice
		want := &corev1.Endpoints{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: metav1.NamespaceDefault}}
		if err == nil {
			want = cur.DeepCopy()
		}
		want.Labels = map[string]string{discoveryv1.LabelSkipMirror: "true"}
		addrs := make([]corev1.EndpointAddress, len(ips))
		for i, ip := range ips {
			addrs[i].IP = ip
		}
		//lint:ignore SA1019 as above
		want.Subsets = []corev1.EndpointSubset{{Addresses: addrs, Ports: ports}}
		switch {
		case apierrors.IsNotFound(err):
			_, err = eps.Create(ctx, want, metav1.CreateOptions{})
		case !apiequality.Semantic.DeepEqual(cur.Subsets, want.Subsets) || !apiequality.Semantic.DeepEqual(cur.Labels, want.Labels):
			s.log.Info("Resetting endpoints for master service", "service", "kubernetes", "ips", ips)
			_, err = eps.Update(ctx, want, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("write the kubernetes Endpoints: %w", err)
	}
	slicePorts := []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](apiPort), Protocol: ptr.To(corev1.ProtocolTCP)}}
	esc := s.kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault)
	err = retry.OnError(retry.DefaultBackoff, retriable, func() error {
		cur, err := esc.Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		want := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", Namespace: metav1.NamespaceDefault}}
		if err == nil {
			want = cur.DeepCopy()
		}
		want.Labels = map[string]string{discoveryv1.LabelServiceName: "kubernetes"}
		want.AddressType = discoveryv1.AddressTypeIPv4
		want.Endpoints = make([]discoveryv1.Endpoint, len(ips))
		for i, ip := range ips {
			want.Endpoints[i] = discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}
		}
		want.Ports = slicePorts
		switch {
		case apierrors.IsNotFound(err):
			_, err = esc.Create(ctx, want, metav1.CreateOptions{})
		case !apiequality.Semantic.DeepEqual(cur.Endpoints, want.Endpoints) || !apiequality.Semantic.DeepEqual(cur.Ports, want.Ports) ||
			!apiequality.Semantic.DeepEqual(cur.Labels, want.Labels):
			_, err = esc.Update(ctx, want, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("write the kubernetes EndpointSlice: %w", err)
	}
	return nil
}

// retriable: another apiserver wrote first. kubernetes:
// endpointsadapter.go, isRetriableError.
func retriable(err error) bool {
	return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)
}
