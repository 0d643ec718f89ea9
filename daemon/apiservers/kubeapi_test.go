package apiservers_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/url"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	typeddiscoveryv1 "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/fleet-role/fleet-role/api"
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

// slowProxy passes TCP connections to an address, each chunk the server
// sends held for the delay set: an apiserver that answers, slowly, as one
// over a member whose disk stalls.
type slowProxy struct {
	l     net.Listener
	delay atomic.Int64
}

func newSlowProxy(t *testing.T, to string) *slowProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &slowProxy{l: l}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.serve(c, to)
		}
	}()
	return p
}

func (p *slowProxy) serve(c net.Conn, to string) {
	defer c.Close()
	up, err := net.Dial("tcp", to)
	if err != nil {
		return
	}
	defer up.Close()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			time.Sleep(time.Duration(p.delay.Load()))
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *slowProxy) addr() string { return p.l.Addr().String() }

// write is one write of the loop: when it began, how long it took, how it
// failed.
type write struct {
	at   time.Time
	took time.Duration
	err  error
}

// writeLoop updates a ConfigMap through core, one write after another,
// until ctx ends.
func writeLoop(ctx context.Context, t *testing.T, core typedcorev1.CoreV1Interface) <-chan []write {
	out := make(chan []write, 1)
	cm, err := core.ConfigMaps(metav1.NamespaceDefault).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "writes"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	go func() {
		var ws []write
		for i := 0; ctx.Err() == nil; i++ {
			began := time.Now()
			cm.Data = map[string]string{"n": strconv.Itoa(i)}
			next, err := core.ConfigMaps(metav1.NamespaceDefault).Update(context.Background(), cm, metav1.UpdateOptions{})
			if err == nil {
				cm = next
			} else if got, gerr := core.ConfigMaps(metav1.NamespaceDefault).Get(context.Background(), cm.Name, metav1.GetOptions{}); gerr == nil {
				cm = got
			}
			ws = append(ws, write{at: began, took: time.Since(began), err: err})
			time.Sleep(50 * time.Millisecond)
		}
		out <- ws
	}()
	return out
}

// firstSuccessAfter is how long after from the first write that began
// after it succeeded, or -1.
func firstSuccessAfter(ws []write, from time.Time) time.Duration {
	for _, w := range ws {
		if w.at.After(from) && w.err == nil {
			return w.at.Add(w.took).Sub(from)
		}
	}
	return -1
}

// stateOf is addr's state among the servers'.
func stateOf(s *apiservers.Servers, addr string) apiservers.State {
	for _, st := range s.States() {
		if st.Addr == addr {
			return st.State
		}
	}
	return 0
}

// Two real kube-apiservers over one etcd: a client whose server turns
// slow, still answering, leaves it within a health check, and a client
// whose server stops answering (its process stopped) leaves it too; the
// writes go on through the other. Without the checks each would wait for
// the request's bound: a write loop's next success comes later than
// RequestTimeout after the fault. A server back does not take the
// clients back from the one serving.
func TestThroughRealAPIServersAClientLeavesOneTurnedSlowAndOneStoppedWithinAHealthCheck(t *testing.T) {
	s := kubeapi.Start(t)
	u, err := url.Parse(s.URL)
	require.NoError(t, err)
	first := newSlowProxy(t, u.Host)
	other := s.StartAnother(t)

	servers := apiservers.New("", []string{first.addr(), other.Addr}, nil, nil)
	rc := rest.CopyConfig(s.Config)
	rc.Host = "https://" + first.addr()
	check, err := apiservers.ReadyzCheck(rc)
	require.NoError(t, err)
	servers.Configure(rc)
	core, err := typedcorev1.NewForConfig(rc)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go servers.Run(ctx, check)
	wctx, stopWrites := context.WithCancel(ctx)
	done := writeLoop(wctx, t, core)
	// An outer limit: two checks, two seconds apart, make it active.
	require.Eventually(t, func() bool { return stateOf(servers, first.addr()) == apiservers.Active }, 30*time.Second, 100*time.Millisecond,
		"the first server active: %v", servers.States())

	// Every answer of the first held 3 s: under the request bound,
	// over the check's.
	slowed := time.Now()
	first.delay.Store(int64(3 * time.Second))
	// Outer limits, here and below: a check every 2 s bounded by 2 s
	// leaves a server within about 4 s, and the next check makes its
	// successor active; 30 s is slack for a busy 2-core machine, never
	// a bound the assertions lean on (those are on RequestTimeout).
	require.Eventually(t, func() bool { return stateOf(servers, other.Addr) == apiservers.Active }, 30*time.Second, 100*time.Millisecond,
		"the other server active: %v", servers.States())
	assert.Equal(t, apiservers.Failed, stateOf(servers, first.addr()))

	// The first fast again: it recovers, and is preferred, not active.
	first.delay.Store(0)
	require.Eventually(t, func() bool { return stateOf(servers, first.addr()) == apiservers.Preferred }, 30*time.Second, 100*time.Millisecond,
		"the first server preferred once it passes its checks again: %v", servers.States())
	assert.Equal(t, apiservers.Active, stateOf(servers, other.Addr), "the clients stay where they are")

	// The other stopped: it answers nothing.
	stopped := time.Now()
	require.NoError(t, other.Pause())
	require.Eventually(t, func() bool { return stateOf(servers, first.addr()) == apiservers.Active }, 30*time.Second, 100*time.Millisecond,
		"the first server active again: %v", servers.States())
	require.NoError(t, other.Resume())
	time.Sleep(time.Second) // a few writes more through the first, active again
	stopWrites()
	ws := <-done

	for _, f := range []struct {
		what string
		at   time.Time
	}{{"slowed", slowed}, {"stopped", stopped}} {
		took := firstSuccessAfter(ws, f.at)
		t.Logf("a server %s: the next write that succeeded ended %s after", f.what, took.Round(time.Millisecond))
		require.GreaterOrEqual(t, took, time.Duration(0), "no write succeeded after the server %s", f.what)
		assert.Less(t, took, apiservers.RequestTimeout, "the server %s was left by its check, not by the request's bound", f.what)
	}
}

// Against a real kube-apiserver: the regrade Lease's swap record, as the
// controller writes it, makes the servers leave the outgoing voter's
// apiserver from the swap's start, and come back to it once the swap
// rolls back; a host the inventory does not name changes nothing.
func TestTheRegradeLeasesSwapRecordMakesTheServersLeaveTheOutgoingVotersAPIServer(t *testing.T) {
	s := kubeapi.Start(t)
	// An outer limit on the whole test: each step below takes a watch
	// event, milliseconds on loopback.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: api.Namespace}}, metav1.CreateOptions{})
	require.NoError(t, err)
	servers := apiservers.New("", []string{"10.255.0.1:6443", "10.255.0.2:6443"}, nil, nil)
	address := map[string]string{"v1": "10.255.0.1:6443", "v2": "10.255.0.2:6443"}
	go servers.FollowSwaps(ctx, s.Client.CoordinationV1(), api.Namespace, func(n string) string { return address[n] })

	record := func(r api.SwapRecord) string {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		return string(b)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: api.LeaseName, Namespace: api.Namespace,
		Annotations: map[string]string{api.AnnotationSwap: record(api.SwapRecord{V: 1, ID: "x", Out: "v1", In: "s1", Origin: api.OriginManual, StartedAt: time.Now()})}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(api.ControllerHolder)}}
	lease, err = s.Client.CoordinationV1().Leases(api.Namespace).Create(ctx, lease, metav1.CreateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return stateOf(servers, "10.255.0.1:6443") == apiservers.Failed }, 20*time.Second, 50*time.Millisecond,
		"the outgoing voter's apiserver left: %v", servers.States())
	assert.Equal(t, []string{"10.255.0.2:6443", "10.255.0.1:6443"}, servers.List())

	lease.Annotations[api.AnnotationSwap] = record(api.SwapRecord{V: 1, ID: "x", Out: "v1", In: "s1", Origin: api.OriginManual, StartedAt: time.Now(), Phase: api.PhaseRollback})
	lease, err = s.Client.CoordinationV1().Leases(api.Namespace).Update(ctx, lease, metav1.UpdateOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return stateOf(servers, "10.255.0.1:6443") == apiservers.Unchecked }, 20*time.Second, 50*time.Millisecond,
		"a swap rolling back keeps its outgoing voter: its apiserver back: %v", servers.States())

	lease.Annotations[api.AnnotationSwap] = record(api.SwapRecord{V: 1, ID: "y", Out: "gone", In: "s1", Origin: api.OriginManual, StartedAt: time.Now()})
	_, err = s.Client.CoordinationV1().Leases(api.Namespace).Update(ctx, lease, metav1.UpdateOptions{})
	require.NoError(t, err)
	// Nothing should happen: a second gives the watch event the
	// milliseconds it takes, so a wrong Leave would be seen.
	time.Sleep(time.Second)
	assert.Equal(t, apiservers.Unchecked, stateOf(servers, "10.255.0.1:6443"))
	assert.Equal(t, apiservers.Unchecked, stateOf(servers, "10.255.0.2:6443"), "a host the inventory does not name: nothing left")
}
