package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
)

// sliceAddresses are the kubernetes EndpointSlice's addresses, each
// checked ready at 6443; nil when there is none.
func sliceAddresses(t *testing.T, c kubernetes.Interface) []string {
	t.Helper()
	sl, err := c.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Get(context.Background(), "kubernetes", metav1.GetOptions{})
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range sl.Endpoints {
		require.Equal(t, ptr.To(true), e.Conditions.Ready)
		out = append(out, e.Addresses...)
	}
	return out
}

func TestTheKubernetesEndpointsListExactlyTheServersThatServeAndAStoppedOneOnceItsLeaseExpired(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd members")
	}
	kube := fake.NewClientset()
	a, err := testServer(t, "srv-a", 40, config{ClusterInit: true, Token: "secret"})
	require.NoError(t, err)
	a.kube = kube
	tickUntil(t, "the bootstrap server is ready", a.ready.Load, a)
	join := "https://" + a.o.nodeIP + ":6443"
	b, err := testServer(t, "srv-b", 41, config{Server: join, Token: "secret"})
	require.NoError(t, err)
	b.kube = kube
	tickUntil(t, "the second server is ready", b.ready.Load, a, b)
	c, err := testServer(t, "srv-c", 42, config{Server: join, Token: "secret"})
	require.NoError(t, err)
	c.kube = kube
	tickUntil(t, "the third server is ready", c.ready.Load, a, b, c)

	all := []string{a.o.nodeIP, b.o.nodeIP, c.o.nodeIP}
	tickUntil(t, "the EndpointSlice lists the three", func() bool { return assert.ObjectsAreEqual(all, sliceAddresses(t, kube)) }, a, b, c)
	sl, err := kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Get(context.Background(), "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{discoveryv1.LabelServiceName: "kubernetes"}, sl.Labels)
	assert.Equal(t, discoveryv1.AddressTypeIPv4, sl.AddressType)
	assert.Equal(t, []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](6443), Protocol: ptr.To(corev1.ProtocolTCP)}}, sl.Ports)
	ep, err := kube.CoreV1().Endpoints(metav1.NamespaceDefault).Get(context.Background(), "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "true", ep.Labels[discoveryv1.LabelSkipMirror])
	require.Len(t, ep.Subsets, 1)
	assert.Equal(t, []corev1.EndpointAddress{{IP: all[0]}, {IP: all[1]}, {IP: all[2]}}, ep.Subsets[0].Addresses)
	assert.Equal(t, []corev1.EndpointPort{{Name: "https", Port: 6443, Protocol: corev1.ProtocolTCP}}, ep.Subsets[0].Ports)

	c.close() // k3s stopped: its apiserver goes, its lease is not removed
	leases, err := a.cli.Get(context.Background(), masterLeasePrefix, clientv3.WithPrefix())
	require.NoError(t, err)
	assert.Len(t, leases.Kvs, 3, "its lease is left to expire")
	tickUntil(t, "the stopped server drops out", func() bool { return assert.ObjectsAreEqual(all[:2], sliceAddresses(t, kube)) }, a, b)
	ep, err = kube.CoreV1().Endpoints(metav1.NamespaceDefault).Get(context.Background(), "kubernetes", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []corev1.EndpointAddress{{IP: all[0]}, {IP: all[1]}}, ep.Subsets[0].Addresses, "the Endpoints too")
}

func TestAServerThatDoesNotServeWritesNoEndpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an etcd member")
	}
	kube := fake.NewClientset()
	s, err := testServer(t, "srv-nr", 43, config{ClusterInit: true, Token: "secret"})
	require.NoError(t, err)
	s.kube = kube
	require.NoError(t, os.WriteFile(filepath.Join(s.o.dataDir, "server", "never-ready"), nil, 0o600))
	for range 10 {
		require.NoError(t, s.tick(context.Background()))
		time.Sleep(50 * time.Millisecond)
	}
	require.False(t, s.ready.Load())
	_, err = kube.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Get(context.Background(), "kubernetes", metav1.GetOptions{})
	assert.Error(t, err, "a server whose apiserver never came up is listed nowhere")
}
