// Package apiservers is how the agent reaches the Kubernetes API through
// any live server of a k3s fleet, as k3s's own agent does
// (k3s-io/k3s pkg/agent/loadbalancer and pkg/agent/tunnel): on k3s each
// server's apiserver runs over its own etcd member and stops with it, so
// an agent pointed at one server goes silent once that server is swapped
// out.
//
// Servers keeps the addresses (host:port) of the apiservers it knows,
// seeded with every server of the inventory, learnt from the `kubernetes`
// EndpointSlices of the default namespace (every apiserver registers
// itself there while it serves), the inventory's kept last as a fallback,
// and kept in a file across restarts. Its DialContext stands in for the
// client's dialer: it dials the server that answered last, and on a
// connection error the next, so a client fails over within a dial
// timeout. A server that answers a request with a 5xx, or does not answer
// it in time, is put last and its connections are closed, so the
// client's next request dials the next server: a server whose apiserver
// runs but cannot serve (its member without quorum, or too slow) loses
// its clients at once, as k3s's load balancer closes the connections of
// a server that fails its health check (pkg/agent/loadbalancer/servers.go,
// runHealthChecks and closeAll). The host's own address is never
// dialled: a host's own k3s goes with its member.
package apiservers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	typeddiscoveryv1 "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fleet-role/fleet-role/api/logkey"
	"github.com/fleet-role/fleet-role/platform"
)

// ServiceName is the Service whose EndpointSlices list the apiservers.
const ServiceName = "kubernetes"

// ServerName is the name every k3s apiserver's serving certificate holds
// (k3s-io/k3s pkg/daemons/control/deps, genServerCerts: kubernetes,
// kubernetes.default, ...), whatever server answers: the client verifies
// it rather than the address it dialled.
const ServerName = "kubernetes"

// DialTimeout bounds the dial of one server.
const DialTimeout = 3 * time.Second

// ErrNoServer: no server answered.
var ErrNoServer = errors.New("no apiserver answered")

// Servers are the apiservers the agent knows, the one that answered last
// first.
type Servers struct {
	mu      sync.Mutex
	list    []string
	exclude []string
	// seed are the servers configured, less the host's own: kept last as
	// a fallback when the slice no longer lists them.
	seed   []string
	file   string
	log    *slog.Logger
	dialer net.Dialer
	// conns are the open connections, by the server dialled.
	conns map[string]map[*conn]struct{}
}

// conn is a connection to one server, forgotten when closed.
type conn struct {
	net.Conn
	addr string
	s    *Servers
	// shut is set once Servers has closed the connection itself.
	shut atomic.Bool
}

func (c *conn) Close() error {
	c.s.mu.Lock()
	delete(c.s.conns[c.addr], c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// state is the file's content.
type state struct {
	Servers []string `json:"servers"`
}

// New returns the servers kept in file (written by an earlier run), then
// those of seed not among them, less exclude (this host's own addresses).
// A file that cannot be read is taken as empty.
func New(file string, seed, exclude []string, log *slog.Logger) *Servers {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Servers{file: file, exclude: exclude, log: log, dialer: net.Dialer{Timeout: DialTimeout}, conns: map[string]map[*conn]struct{}{}}
	var kept state
	if b, err := os.ReadFile(file); err == nil {
		if err := json.Unmarshal(b, &kept); err != nil {
			log.Warn("the apiservers' file not read; seeded again", logkey.File, file, logkey.Err, err)
		}
	}
	s.seed = s.merge(nil, seed)
	s.list = s.merge(kept.Servers, s.seed)
	return s
}

// merge keeps the addresses of first then of rest, once each, less the
// excluded ones.
func (s *Servers) merge(first, rest []string) []string {
	var out []string
	for _, a := range slices.Concat(first, rest) {
		host, _, err := net.SplitHostPort(a)
		if err != nil || slices.Contains(s.exclude, host) || slices.Contains(out, a) {
			continue
		}
		out = append(out, a)
	}
	return out
}

// List returns the servers, the one to dial first first.
func (s *Servers) List() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.list)
}

// DialContext dials the servers in order, the first that answers moved
// first and kept; the address asked is not used.
func (s *Servers) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	var errs []error
	for _, addr := range s.List() {
		c, err := s.dialer.DialContext(ctx, network, addr)
		if err == nil {
			return s.answered(addr, c), nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("%w: %w", ErrNoServer, errors.Join(errs...))
}

// answered keeps the connection c to addr among its open ones and moves
// addr first.
func (s *Servers) answered(addr string, c net.Conn) net.Conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &conn{Conn: c, addr: addr, s: s}
	if s.conns[addr] == nil {
		s.conns[addr] = map[*conn]struct{}{}
	}
	s.conns[addr][w] = struct{}{}
	if len(s.list) > 0 && s.list[0] == addr {
		return w
	}
	s.list = s.merge([]string{addr}, s.list)
	s.log.Info("apiserver reached", logkey.Server, addr)
	s.save()
	return w
}

// Failed puts addr last and closes its connections, so that the next
// request dials the next server; why is logged when addr was first.
func (s *Servers) Failed(addr, why string) {
	s.mu.Lock()
	if len(s.list) > 1 && s.list[0] == addr {
		s.list = s.merge(s.list[1:], []string{addr})
		s.log.Warn("apiserver failed a request; the next is dialled", logkey.Server, addr, logkey.Reason, why, logkey.Servers, s.list)
		s.save()
	}
	conns := s.conns[addr]
	delete(s.conns, addr)
	s.mu.Unlock()
	closeAll(conns)
}

// closeAll closes the connections, each its own way: a connection's Close
// may wait on its peer.
func closeAll(conns map[*conn]struct{}) {
	for c := range conns {
		c.shut.Store(true)
		go c.Conn.Close()
	}
}

// failure says why a request's outcome counts against the server that
// answered it: a 5xx (an apiserver without its etcd, or k3s's "apiserver
// not ready") or an error other than the caller's cancel (a timeout, a
// connection cut); "" when it does not.
func failure(resp *http.Response, err error) string {
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		return ""
	case err != nil:
		return err.Error()
	case resp.StatusCode >= http.StatusInternalServerError:
		return resp.Status
	}
	return ""
}

// roundTripper is a function as an http.RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// wrap counts each request's failure against the server whose connection
// carried it. A request that failed on a connection Servers had already
// closed when the client took it was never sent: it is sent once more,
// over a new connection, when its body can be read again (as net/http
// retries a request it had not written on a connection found broken).
// Without that, the request after a failover could fail for nothing:
// an HTTP/2 client may take the closed connection before it notices.
func (s *Servers) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		resp, stale, err := s.roundTrip(rt, r)
		if err != nil && stale && replayable(r) {
			if r.GetBody != nil {
				r = r.Clone(r.Context())
				if r.Body, err = r.GetBody(); err != nil {
					return nil, err
				}
			}
			resp, _, err = s.roundTrip(rt, r)
		}
		return resp, err
	})
}

// roundTrip sends r once and counts its failure against the server that
// carried it; stale says the connection taken had been closed already.
func (s *Servers) roundTrip(rt http.RoundTripper, r *http.Request) (*http.Response, bool, error) {
	var used atomic.Pointer[conn]
	var stale atomic.Bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) {
		c := i.Conn
		if t, ok := c.(interface{ NetConn() net.Conn }); ok {
			c = t.NetConn()
		}
		if w, ok := c.(*conn); ok {
			used.Store(w)
			stale.Store(w.shut.Load())
		}
	}}
	resp, err := rt.RoundTrip(r.WithContext(httptrace.WithClientTrace(r.Context(), trace)))
	if c := used.Load(); c != nil && !stale.Load() {
		if why := failure(resp, err); why != "" {
			s.Failed(c.addr, why)
		}
	}
	return resp, stale.Load(), err
}

// replayable says r's body can be sent again.
func replayable(r *http.Request) bool {
	return r.Body == nil || r.Body == http.NoBody || r.GetBody != nil
}

// Set makes the servers the ones listed, in the order kept: those already
// known keep their place, new ones come after them, those gone are
// dropped and their connections closed, as k3s's load balancer closes
// those of a server it drops (pkg/agent/loadbalancer/servers.go,
// setServers). The
// configured servers the slice does not list stay, last, dialled only
// when every listed one fails, as k3s's load balancer keeps its default
// server in standby (setServers: "demote the default server down to
// standby, instead of deleting it"): a slice read as one server alone
// wrote it (the first apiserver back after an outage) would otherwise
// leave the agent with a single server, and with none once that one
// went, since the watch that would learn the others goes through them.
// An empty list changes nothing (no server serves, or the slice is being
// rewritten): the last known are better than none.
func (s *Servers) Set(addrs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.merge(nil, addrs)
	if len(next) == 0 {
		return
	}
	for addr, conns := range s.conns {
		if !slices.Contains(next, addr) {
			delete(s.conns, addr)
			closeAll(conns)
		}
	}
	var ordered []string
	for _, a := range s.list {
		if slices.Contains(next, a) {
			ordered = append(ordered, a)
		}
	}
	var fallback []string
	for _, a := range s.list {
		if slices.Contains(s.seed, a) {
			fallback = append(fallback, a)
		}
	}
	ordered = s.merge(s.merge(ordered, next), s.merge(fallback, s.seed))
	if slices.Equal(ordered, s.list) {
		return
	}
	s.list = ordered
	s.log.Info("apiservers learnt", logkey.Listed, next, logkey.Servers, ordered)
	s.save()
}

// save writes the list, atomically; a write that fails is logged, the list
// kept in memory.
func (s *Servers) save() {
	if s.file == "" {
		return
	}
	b, err := json.MarshalIndent(state{Servers: s.list}, "", "  ")
	if err == nil {
		if err = os.MkdirAll(filepath.Dir(s.file), 0o700); err == nil {
			err = platform.WriteFileAtomic(s.file, b, 0o600)
		}
	}
	if err != nil {
		s.log.Warn("the apiservers' file not written", logkey.File, s.file, logkey.Err, err)
	}
}

// Addresses are the ready endpoints' addresses of the slices, with the
// port of the slices' https port (6443 when they name none).
func Addresses(all []discoveryv1.EndpointSlice) []string {
	var out []string
	for _, sl := range all {
		port := 6443
		for _, p := range sl.Ports {
			if p.Port != nil && (p.Name == nil || *p.Name == "https") {
				port = int(*p.Port)
			}
		}
		for _, e := range sl.Endpoints {
			if e.Conditions.Ready != nil && !*e.Conditions.Ready {
				continue
			}
			for _, a := range e.Addresses {
				out = append(out, net.JoinHostPort(a, strconv.Itoa(port)))
			}
		}
	}
	return out
}

// Configure makes the client reach the API through the servers: its
// dialer, what makes it leave a server that fails its requests, and the
// name its serving certificate is checked against (left as set when set).
func (s *Servers) Configure(rc *rest.Config) {
	rc.Dial = s.DialContext
	rc.Wrap(s.wrap)
	if rc.TLSClientConfig.ServerName == "" {
		rc.TLSClientConfig.ServerName = ServerName
	}
}

// Watch keeps the servers those the `kubernetes` EndpointSlice lists,
// until ctx ends. Its list and watch go through the servers themselves.
// Note: the apiservers' reconciler keeps one slice of the Service's name
// (kubernetes pkg/controlplane/reconcilers); the agent asks for it by
// name, which its RBAC allows alone.
func (s *Servers) Watch(ctx context.Context, client typeddiscoveryv1.DiscoveryV1Interface) {
	own := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ServiceName).String()
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			own(&o)
			return client.EndpointSlices(metav1.NamespaceDefault).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			own(&o)
			return client.EndpointSlices(metav1.NamespaceDefault).Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &discoveryv1.EndpointSlice{}, 0, cache.Indexers{})
	update := func() {
		var all []discoveryv1.EndpointSlice
		for _, o := range inf.GetStore().List() {
			if sl, ok := o.(*discoveryv1.EndpointSlice); ok {
				all = append(all, *sl)
			}
		}
		s.Set(Addresses(all))
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { update() },
		UpdateFunc: func(any, any) { update() },
		DeleteFunc: func(any) { update() },
	})
	inf.RunWithContext(ctx)
}
