package apiservers

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// listener is a server that accepts connections, or one closed.
func listener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l
}

// closedAddress is an address where nothing listens.
func closedAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestTheServersAreThoseKeptThenTheSeedLessThisHostsOwn(t *testing.T) {
	file := filepath.Join(t.TempDir(), "api-servers.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"servers": ["10.0.0.3:6443", "10.0.0.9:6443"]}`), 0o600))
	s := New(file, []string{"10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"}, []string{"10.0.0.2"}, nil)
	assert.Equal(t, []string{"10.0.0.3:6443", "10.0.0.9:6443", "10.0.0.1:6443"}, s.List(),
		"those kept first, in their order; the seed's others after; the host's own never")

	require.NoError(t, os.WriteFile(file, []byte(`garbage`), 0o600))
	s = New(file, []string{"10.0.0.1:6443"}, nil, nil)
	assert.Equal(t, []string{"10.0.0.1:6443"}, s.List(), "a file that cannot be read is taken as empty")
}

func TestADialFailsOverToTheNextServerAndKeepsTheOneThatAnswered(t *testing.T) {
	live := listener(t).Addr().String()
	dead := closedAddress(t)
	file := filepath.Join(t.TempDir(), "api-servers.json")
	s := New(file, []string{dead, live}, nil, nil)
	c, err := s.DialContext(context.Background(), "tcp", "ignored:6443")
	require.NoError(t, err)
	c.Close()
	assert.Equal(t, live, c.RemoteAddr().String(), "the dead server passed over")
	assert.Equal(t, []string{live, dead}, s.List(), "the server that answered is dialled first from now on")
	assert.Equal(t, []string{live, dead}, New(file, nil, nil, nil).List(), "and kept across a restart")

	s = New("", []string{dead, closedAddress(t)}, nil, nil)
	_, err = s.DialContext(context.Background(), "tcp", "ignored:6443")
	assert.ErrorIs(t, err, ErrNoServer)
}

func TestTheEndpointSliceSetsTheServersKeepingTheOrderOfThoseKnown(t *testing.T) {
	s := New("", []string{"10.0.0.2:6443", "10.0.0.1:6443", "10.0.0.3:6443"}, []string{"10.0.0.5"}, nil)
	s.Set([]string{"10.0.0.1:6443", "10.0.0.4:6443", "10.0.0.2:6443", "10.0.0.5:6443"})
	assert.Equal(t, []string{"10.0.0.2:6443", "10.0.0.1:6443", "10.0.0.4:6443", "10.0.0.3:6443"}, s.List(),
		"known ones keep their place, a new one comes after them, a configured one gone from the slice last, the host's own never")
	s.Set(nil)
	assert.Equal(t, []string{"10.0.0.2:6443", "10.0.0.1:6443", "10.0.0.4:6443", "10.0.0.3:6443"}, s.List(), "an empty slice changes nothing")
	s.Set([]string{"10.0.0.4:6443"})
	assert.Equal(t, []string{"10.0.0.4:6443", "10.0.0.2:6443", "10.0.0.1:6443", "10.0.0.3:6443"}, s.List(),
		"the configured ones the slice drops stay last, in the order kept")
}

// The first apiserver back after an outage writes the slice with itself
// alone; once that server goes too, the agent must still reach another:
// a configured server the slice no longer lists is dialled when every
// listed one fails, as k3s's load balancer dials its default server.
func TestAConfiguredServerTheSliceDropsIsDialledOnceEveryListedOneFails(t *testing.T) {
	configured := newBackend(t, http.StatusOK, false, false)
	gone, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	only := gone.Addr().String()
	s := New("", []string{configured.addr()}, nil, nil)
	c := clientOf(s, nil)
	code, err := get(t, context.Background(), c, "http")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)

	s.Set([]string{only})
	configured.waitClosed(t, "the connection to a server the slice dropped is not closed")
	assert.Equal(t, []string{only, configured.addr()}, s.List())
	gone.Close()
	code, err = get(t, context.Background(), c, "http")
	require.NoError(t, err, "the slice's one server gone, the configured one is dialled")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, []string{configured.addr(), only}, s.List())
}

func TestAddressesAreTheReadyEndpointsAtTheHTTPSPort(t *testing.T) {
	got := Addresses([]discoveryv1.EndpointSlice{{
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](6443)}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
			{Addresses: []string{"fd00::3"}},
		},
	}})
	assert.Equal(t, []string{"10.0.0.1:6443", "[fd00::3]:6443"}, got)
}

// backend is an API server stand-in that answers with its status, or holds
// each request until the test ends; closed says when a connection to it
// closed.
type backend struct {
	*httptest.Server
	closed chan struct{}
}

func newBackend(t *testing.T, status int, hold bool, tls bool) *backend {
	t.Helper()
	release := make(chan struct{})
	b := &backend{closed: make(chan struct{}, 16)}
	b.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if hold {
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		w.WriteHeader(status)
	}))
	b.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			b.closed <- struct{}{}
		}
	}
	if tls {
		b.EnableHTTP2 = true
		b.StartTLS()
	} else {
		b.Start()
	}
	t.Cleanup(func() { close(release); b.Close() })
	return b
}

func (b *backend) addr() string { return b.Listener.Addr().String() }

// waitClosed fails the test, saying why, unless a connection to b closes.
func (b *backend) waitClosed(t *testing.T, why string) {
	t.Helper()
	select {
	case <-b.closed:
	case <-time.After(10 * time.Second): // an outer limit: the close is asynchronous, and takes milliseconds here
		t.Fatal(why)
	}
}

// notClosed fails the test, saying why, if a connection to b has closed.
func (b *backend) notClosed(t *testing.T, why string) {
	t.Helper()
	select {
	case <-b.closed:
		t.Fatal(why)
	default:
	}
}

// clientOf is an HTTP client that reaches the servers as the agent's
// does: through their dialer, its requests counted against the server
// that answered.
func clientOf(s *Servers, tlsOf *backend) *http.Client {
	tr := &http.Transport{DialContext: s.DialContext}
	if tlsOf != nil {
		tr.TLSClientConfig = tlsOf.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
		tr.TLSClientConfig.ServerName = "example.com" // httptest's certificate's name
		tr.ForceAttemptHTTP2 = true
	}
	return &http.Client{Transport: s.wrap(tr)}
}

func get(t *testing.T, ctx context.Context, c *http.Client, scheme string) (int, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, scheme+"://ignored/api", nil)
	require.NoError(t, err)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func TestAServerThatAnswers5xxIsPutLastAndItsConnectionClosedSoTheNextRequestReachesTheNext(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tls    bool
		scheme string
	}{{"HTTP/1.1", false, "http"}, {"TLS and HTTP/2", true, "https"}} {
		t.Run(tc.name, func(t *testing.T) {
			failing := newBackend(t, http.StatusInternalServerError, false, tc.tls)
			serving := newBackend(t, http.StatusOK, false, tc.tls)
			file := filepath.Join(t.TempDir(), "api-servers.json")
			s := New(file, []string{failing.addr(), serving.addr()}, nil, nil)
			var tlsOf *backend
			if tc.tls {
				tlsOf = failing // httptest's servers share one certificate
			}
			c := clientOf(s, tlsOf)
			code, err := get(t, context.Background(), c, tc.scheme)
			require.NoError(t, err)
			assert.Equal(t, http.StatusInternalServerError, code, "the first server answered first")
			assert.Equal(t, []string{serving.addr(), failing.addr()}, s.List(), "the failing server put last")
			assert.Equal(t, []string{serving.addr(), failing.addr()}, New(file, nil, nil, nil).List(), "and kept so")
			failing.waitClosed(t, "the failing server's connection is not closed")
			code, err = get(t, context.Background(), c, tc.scheme)
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, code, "the next request reaches the next server")
			assert.Equal(t, []string{serving.addr(), failing.addr()}, s.List())
		})
	}
}

func TestAServerThatDoesNotAnswerInTimeIsLeftForTheNextButACancelCountsAgainstNone(t *testing.T) {
	held := newBackend(t, 0, true, false)
	serving := newBackend(t, http.StatusOK, false, false)
	s := New("", []string{held.addr(), serving.addr()}, nil, nil)
	c := clientOf(s, nil)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	_, err := get(t, ctx, c, "http")
	require.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []string{held.addr(), serving.addr()}, s.List(), "the caller's cancel says nothing of the server")

	ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = get(t, ctx, c, "http")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, []string{serving.addr(), held.addr()}, s.List(), "a request not answered in time puts its server last")
	code, err := get(t, context.Background(), c, "http")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)
}

func TestAServerDroppedFromTheSliceHasItsConnectionsClosed(t *testing.T) {
	dropped := newBackend(t, http.StatusOK, false, false)
	kept := newBackend(t, http.StatusOK, false, false)
	s := New("", []string{dropped.addr(), kept.addr()}, nil, nil)
	c := clientOf(s, nil)
	code, err := get(t, context.Background(), c, "http")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	s.Set([]string{kept.addr()})
	dropped.waitClosed(t, "the dropped server's connection is not closed")
	kept.notClosed(t, "a kept server's connection closed")
}

// states is the servers' states by address.
func states(s *Servers) map[string]State {
	out := map[string]State{}
	for _, st := range s.States() {
		out[st.Addr] = st.State
	}
	return out
}

// A server that fails a check is failed at once and its connections
// closed; once it passes again it comes back by steps, recovering then
// preferred, and does not take the connections back from the server
// that serves meanwhile (k3s: recordSuccess, recordFailure).
func TestAServerThatFailsACheckIsLeftAtOnceAndComesBackByStepsWithoutTakingTheClientsBack(t *testing.T) {
	a := newBackend(t, http.StatusOK, false, false)
	b := newBackend(t, http.StatusOK, false, false)
	s := New("", []string{a.addr(), b.addr()}, nil, nil)
	c := clientOf(s, nil)
	var mu sync.Mutex
	failing := map[string]bool{}
	check := func(_ context.Context, addr string) error {
		mu.Lock()
		defer mu.Unlock()
		if failing[addr] {
			return errors.New("not ready")
		}
		return nil
	}
	setFailing := func(addr string, f bool) {
		mu.Lock()
		failing[addr] = f
		mu.Unlock()
	}
	ctx := context.Background()

	_, err := get(t, ctx, c, "http")
	require.NoError(t, err)
	assert.Equal(t, map[string]State{a.addr(): Recovering, b.addr(): Unchecked}, states(s), "dialled once: recovering")
	s.CheckAll(ctx, check)
	assert.Equal(t, map[string]State{a.addr(): Active, b.addr(): Recovering}, states(s), "checked with its connection: active")
	s.CheckAll(ctx, check)
	assert.Equal(t, map[string]State{a.addr(): Active, b.addr(): Preferred}, states(s), "checked again without one: preferred")

	setFailing(a.addr(), true)
	s.CheckAll(ctx, check)
	assert.Equal(t, []string{b.addr(), a.addr()}, s.List())
	assert.Equal(t, Failed, states(s)[a.addr()])
	a.waitClosed(t, "the failed server's connection is not closed")
	_, err = get(t, ctx, c, "http")
	require.NoError(t, err)
	assert.Equal(t, Active, states(s)[b.addr()], "the next server dialled: active")

	setFailing(a.addr(), false)
	s.CheckAll(ctx, check)
	assert.Equal(t, Recovering, states(s)[a.addr()], "one good check: recovering, not yet dialled first")
	assert.Equal(t, []string{b.addr(), a.addr()}, s.List())
	s.CheckAll(ctx, check)
	assert.Equal(t, map[string]State{a.addr(): Preferred, b.addr(): Active}, states(s), "a second: preferred, the clients kept where they are")
	b.notClosed(t, "the active server's connection closed as the other came back")
}

// A 429 counts against the server as a 5xx does: an apiserver whose
// storage is (re)initializing answers it.
func TestA429PutsItsServerLast(t *testing.T) {
	busy := newBackend(t, http.StatusTooManyRequests, false, false)
	serving := newBackend(t, http.StatusOK, false, false)
	s := New("", []string{busy.addr(), serving.addr()}, nil, nil)
	c := clientOf(s, nil)
	code, err := get(t, context.Background(), c, "http")
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, code)
	assert.Equal(t, []string{serving.addr(), busy.addr()}, s.List())
	assert.Equal(t, Failed, states(s)[busy.addr()])
	for _, code := range []int{http.StatusNotFound, http.StatusConflict, http.StatusNotImplemented} {
		assert.Empty(t, failure(&http.Response{StatusCode: code, Status: http.StatusText(code)}, nil), "%d is the request's, not the server's", code)
	}
}

// A request whose caller set no deadline is bounded by the request
// timeout, and fails its server; a watch is not bounded.
func TestARequestWithNoDeadlineIsBoundedAndAWatchIsNot(t *testing.T) {
	held := newBackend(t, 0, true, false)
	serving := newBackend(t, http.StatusOK, false, false)
	s := New("", []string{held.addr(), serving.addr()}, nil, nil)
	s.requestTimeout = 500 * time.Millisecond
	c := clientOf(s, nil)

	watched := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://ignored/api/v1/nodes?watch=true", nil)
		if err == nil {
			var resp *http.Response
			if resp, err = c.Do(req); err == nil {
				resp.Body.Close()
			}
		}
		watched <- err
	}()
	select {
	case err := <-watched:
		t.Fatalf("the watch ended: %v", err)
	case <-time.After(4 * s.requestTimeout): // four times the bound a request would have been cut at
	}
	cancel()
	require.ErrorIs(t, <-watched, context.Canceled)

	_, err := get(t, context.Background(), c, "http")
	require.ErrorIs(t, err, context.DeadlineExceeded, "the request not answered within the bound")
	assert.Equal(t, []string{serving.addr(), held.addr()}, s.List(), "and its server put last")
	code, err := get(t, context.Background(), c, "http")
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, code)
}

// When every apiserver fails its checks (a slow etcd leader slows them
// all), the one dialled is all there is: its connections are kept, not
// cut at each check (k3s: recordFailure leaves an unchecked or recovering
// server as it is).
func TestWhenEveryServerFailsItsChecksTheOneDialledKeepsItsConnections(t *testing.T) {
	a := newBackend(t, http.StatusOK, false, false)
	b := newBackend(t, http.StatusOK, false, false)
	s := New("", []string{a.addr(), b.addr()}, nil, nil)
	c := clientOf(s, nil)
	ctx := context.Background()
	ok := func(context.Context, string) error { return nil }
	slow := func(context.Context, string) error { return context.DeadlineExceeded }

	_, err := get(t, ctx, c, "http")
	require.NoError(t, err)
	s.CheckAll(ctx, ok)
	require.Equal(t, Active, states(s)[a.addr()])
	s.CheckAll(ctx, slow)
	assert.Equal(t, map[string]State{a.addr(): Failed, b.addr(): Recovering}, states(s), "the active server fails its check")
	a.waitClosed(t, "the failed server's connection is not closed")
	_, err = get(t, ctx, c, "http")
	require.NoError(t, err)
	for range 3 {
		s.CheckAll(ctx, slow)
	}
	assert.Equal(t, map[string]State{a.addr(): Failed, b.addr(): Recovering}, states(s))
	b.notClosed(t, "the connection of the server dialled when every one fails its checks was closed")
}

// The apiserver of a voter a swap takes out is left at once, its
// connections closed, and stays failed however it answers until the swap
// no longer names it; then it is unchecked again.
func TestTheServerASwapTakesOutIsLeftUntilTheSwapNoLongerNamesIt(t *testing.T) {
	out := newBackend(t, http.StatusOK, false, false)
	other := newBackend(t, http.StatusOK, false, false)
	s := New("", []string{out.addr(), other.addr()}, nil, nil)
	c := clientOf(s, nil)
	ctx := context.Background()
	ok := func(context.Context, string) error { return nil }
	_, err := get(t, ctx, c, "http")
	require.NoError(t, err)
	s.CheckAll(ctx, ok)
	require.Equal(t, Active, states(s)[out.addr()])

	s.Leave([]string{out.addr()})
	assert.Equal(t, []string{other.addr(), out.addr()}, s.List())
	assert.Equal(t, Failed, states(s)[out.addr()])
	out.waitClosed(t, "the leaving server's connection is not closed")
	for range 3 {
		s.CheckAll(ctx, ok)
	}
	assert.Equal(t, Failed, states(s)[out.addr()], "it answers, and stays failed while the swap names it")
	_, err = get(t, ctx, c, "http")
	require.NoError(t, err)
	assert.Equal(t, []string{other.addr(), out.addr()}, s.List(), "the requests go to the other")

	s.Leave(nil)
	assert.Equal(t, Unchecked, states(s)[out.addr()])
	s.CheckAll(ctx, ok)
	assert.Equal(t, Recovering, states(s)[out.addr()], "back by steps, as any failed server")
}
