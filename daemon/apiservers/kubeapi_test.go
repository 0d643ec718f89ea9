package apiservers_test

import (
	"context"
	"net"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	typeddiscoveryv1 "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/daemon/apiservers"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
)

// Against a real kube-apiserver: a client whose first server is gone
// reaches the API through the next, verifying the serving certificate by
// the name every apiserver's holds, and learns the servers from the
// kubernetes EndpointSlice.
func TestAClientReachesTheAPIThroughTheNextServerAndLearnsTheServersFromTheEndpointSlice(t *testing.T) {
	s := kubeapi.Start(t)
	u, err := url.Parse(s.URL)
	require.NoError(t, err)
	// A server gone, at an address the serving certificate does not name.
	gone, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err)
	dead := gone.Addr().String()
	gone.Close()

	servers := apiservers.New("", []string{dead, u.Host}, nil, nil)
	rc := rest.CopyConfig(s.Config)
	rc.Host = "https://" + dead // the kubeconfig's server, gone
	servers.Configure(rc)
	assert.Equal(t, apiservers.ServerName, rc.TLSClientConfig.ServerName)
	core, err := typedcorev1.NewForConfig(rc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = core.Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{})
	require.NoError(t, err, "reached through the live server, its certificate checked against %q", apiservers.ServerName)
	assert.Equal(t, []string{u.Host, dead}, servers.List())

	// The slice as the apiservers' lease reconciler writes it (the test's
	// apiserver runs without one, on loopback, which a slice may not
	// list): every apiserver that serves, at its port. Note: the watch
	// goes straight to the test's apiserver, not through the servers as
	// the agent's does: the slice's addresses do not serve, and the
	// servers close their connections to the test's apiserver once the
	// slice no longer lists it.
	disc, err := typeddiscoveryv1.NewForConfig(s.Config)
	require.NoError(t, err)
	go servers.Watch(ctx, disc)
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: apiservers.ServiceName, Labels: map[string]string{discoveryv1.LabelServiceName: apiservers.ServiceName}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](6443), Protocol: ptr.To(corev1.ProtocolTCP)}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.255.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.255.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
		},
	}
	_, err = s.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Create(ctx, slice, metav1.CreateOptions{})
	require.NoError(t, err)
	want := []string{"10.255.0.1:6443", "10.255.0.2:6443", u.Host, dead}
	require.Eventually(t, func() bool { return slices.Equal(servers.List(), want) }, 20*time.Second, 50*time.Millisecond,
		"the servers the EndpointSlice lists, then the configured ones it does not: %v", servers.List())

	slice.Endpoints = slice.Endpoints[1:]
	_, err = s.Client.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).Update(ctx, slice, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return slices.Equal(servers.List(), want[1:]) }, 20*time.Second, 50*time.Millisecond,
		"a server gone from the slice, and configured nowhere, is dropped: %v", servers.List())
}
