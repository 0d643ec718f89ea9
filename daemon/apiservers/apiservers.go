// Package apiservers is how a fleet-role client (the agent, the
// controller) reaches the Kubernetes API through any live server of a k3s
// fleet, as k3s's own agent does (k3s-io/k3s pkg/agent/loadbalancer and
// pkg/agent/tunnel): on k3s each server's apiserver reads and writes only
// its own etcd member and stops with it, so a client pointed at one server
// goes silent once that server is swapped out, and a slow member slows
// every request through its apiserver.
//
// Servers keeps the addresses (host:port) of the apiservers it knows,
// seeded with the configured ones, learnt from the `kubernetes`
// EndpointSlices of the default namespace (every apiserver registers
// itself there while it serves), the configured ones the slice does not
// list kept last as a fallback, and kept in a file across restarts.
//
// Each server has a state, as in k3s's load balancer
// (pkg/agent/loadbalancer/servers.go, recordSuccess, recordFailure and
// the states' order), and the servers are dialled best state first:
// failed (a health check, a dial or a request failed), standby (a
// configured server the slice does not list), unchecked, recovering
// (answered once since it failed), healthy, preferred (recovered, or no
// longer active) and active (its connections carry the requests). A
// failed server comes back only through recovering, by a health check
// passed while another serves: one good answer does not make a flapping
// server active again. Run checks every server every HealthInterval
// (an authenticated GET /readyz bounded by HealthTimeout, ReadyzCheck);
// a server in use that fails a check, or a request (429, 500, 502, 503,
// 504, no answer in time, a connection cut), fails at once and its
// connections are closed, so the client's next request dials the next
// server (k3s: runHealthChecks and closeAll). Every request but a watch
// is bounded by RequestTimeout. The host's own address is never dialled:
// a host's own k3s goes with its member.
package apiservers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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

	coordinationv1 "k8s.io/api/coordination/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	typeddiscoveryv1 "k8s.io/client-go/kubernetes/typed/discovery/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/fleet-role/fleet-role/api"
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

const (
	// DialTimeout bounds the dial of one server.
	DialTimeout = 3 * time.Second
	// HealthInterval is how often Run checks every server (k3s's load
	// balancer checks each second; a check here is a request to the
	// apiserver, so every two).
	HealthInterval = 2 * time.Second
	// HealthTimeout bounds one check: an apiserver that does not say it
	// is ready within it is failed.
	HealthTimeout = 2 * time.Second
	// RequestTimeout bounds every request but a watch whose caller set no
	// deadline of its own.
	RequestTimeout = 15 * time.Second
	// preferredFor is how long a server stays preferred, not dialled,
	// before it is merely healthy (k3s: a minute).
	preferredFor = time.Minute
)

// ErrNoServer: no server answered.
var ErrNoServer = errors.New("no apiserver answered")

// State is a server's health, in increasing order of preference.
type State int

const (
	Failed State = iota + 1
	Standby
	Unchecked
	Recovering
	Healthy
	Preferred
	Active
)

func (s State) String() string {
	switch s {
	case Failed:
		return "failed"
	case Standby:
		return "standby"
	case Unchecked:
		return "unchecked"
	case Recovering:
		return "recovering"
	case Healthy:
		return "healthy"
	case Preferred:
		return "preferred"
	case Active:
		return "active"
	}
	return "invalid"
}

// reason is what told a server's health.
type reason string

const (
	byDial    reason = "dial"
	byCheck   reason = "health check"
	byRequest reason = "request"
)

// HealthCheck says whether the apiserver at addr serves: nil when it does.
type HealthCheck func(ctx context.Context, addr string) error

// Servers are the apiservers a client knows, the one to dial first first.
type Servers struct {
	mu      sync.Mutex
	servers []*server
	exclude []string
	// seed are the servers configured, less the host's own: kept last, in
	// standby, as a fallback when the slice no longer lists them.
	seed []string
	file string
	// saved is the order last marked for the file, unsaved the one not
	// written yet (nil when none); saveMu orders the writes.
	saved   []string
	unsaved []string
	saveMu  sync.Mutex
	// leaving are the servers a swap takes out (Leave): failed, and kept
	// so until the swap no longer names them.
	leaving []string
	log     *slog.Logger
	dialer  net.Dialer
	// requestTimeout is RequestTimeout (shorter in tests).
	requestTimeout time.Duration
}

// server is one apiserver and its open connections.
type server struct {
	addr  string
	state State
	since time.Time
	conns map[*conn]struct{}
}

// conn is a connection to one server, forgotten when closed.
type conn struct {
	net.Conn
	srv *server
	s   *Servers
	// shut is set once Servers has closed the connection itself.
	shut atomic.Bool
}

func (c *conn) Close() error {
	c.s.mu.Lock()
	delete(c.srv.conns, c)
	c.s.mu.Unlock()
	return c.Conn.Close()
}

// state is the file's content.
type state struct {
	Servers []string `json:"servers"`
}

// New returns the servers kept in file (written by an earlier run), then
// those of seed not among them, less exclude (this host's own addresses),
// each unchecked. A file that cannot be read is taken as empty.
func New(file string, seed, exclude []string, log *slog.Logger) *Servers {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Servers{file: file, exclude: exclude, log: log, dialer: net.Dialer{Timeout: DialTimeout}, requestTimeout: RequestTimeout}
	var kept state
	if b, err := os.ReadFile(file); err == nil {
		if err := json.Unmarshal(b, &kept); err != nil {
			log.Warn("the apiservers' file not read; seeded again", logkey.File, file, logkey.Err, err)
		}
	}
	s.seed = s.merge(nil, seed)
	for _, a := range s.merge(kept.Servers, s.seed) {
		s.servers = append(s.servers, &server{addr: a, state: Unchecked, conns: map[*conn]struct{}{}})
	}
	s.saved = s.addrs()
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

// addrs are the servers' addresses in order; s.mu held.
func (s *Servers) addrs() []string {
	out := make([]string, len(s.servers))
	for i, srv := range s.servers {
		out[i] = srv.addr
	}
	return out
}

// List returns the servers, the one to dial first first.
func (s *Servers) List() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addrs()
}

// ServerState is a server and its state, as States reports them.
type ServerState struct {
	Addr  string
	State State
}

// States returns the servers with their states, the one to dial first
// first.
func (s *Servers) States() []ServerState {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]ServerState, len(s.servers))
	for i, srv := range s.servers {
		out[i] = ServerState{Addr: srv.addr, State: srv.state}
	}
	return out
}

// find is the server at addr, or nil; s.mu held.
func (s *Servers) find(addr string) *server {
	if i := slices.IndexFunc(s.servers, func(srv *server) bool { return srv.addr == addr }); i >= 0 {
		return s.servers[i]
	}
	return nil
}

// DialContext dials the servers in order, recording each dial's outcome;
// the address asked is not used.
func (s *Servers) DialContext(ctx context.Context, network, _ string) (net.Conn, error) {
	var errs []error
	for _, addr := range s.List() {
		c, err := s.dialer.DialContext(ctx, network, addr)
		if err == nil {
			if w := s.answered(addr, c); w != nil {
				return w, nil
			}
			continue
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
		s.record(addr, false, byDial, err.Error())
	}
	return nil, fmt.Errorf("%w: %w", ErrNoServer, errors.Join(errs...))
}

// answered keeps the connection c to addr among its open ones and records
// the dial's success; nil (c closed) when addr was dropped meanwhile.
func (s *Servers) answered(addr string, c net.Conn) net.Conn {
	s.mu.Lock()
	srv := s.find(addr)
	if srv == nil {
		s.mu.Unlock()
		c.Close()
		return nil
	}
	w := &conn{Conn: c, srv: srv, s: s}
	srv.conns[w] = struct{}{}
	s.mu.Unlock()
	s.record(addr, true, byDial, "")
	return w
}

// Failed records a failure of addr's (a request's): it is failed and its
// connections are closed, so that the next request dials the next server.
func (s *Servers) Failed(addr, why string) { s.record(addr, false, byRequest, why) }

// record moves addr's state after a success or a failure told by r, as
// k3s's load balancer does (recordSuccess, recordFailure): a failed
// check fails a healthy, preferred or active server and closes its
// connections, and leaves an unchecked or recovering one as it is, with
// its connections: when every apiserver is slow (a slow etcd leader
// slows them all) the one dialled is all there is, and closing its
// connections at each check would only cut the requests it carries. A
// dial's or a request's failure fails any server but a standby one (a
// request's closes the standby server's connections too).
func (s *Servers) record(addr string, ok bool, r reason, why string) {
	s.mu.Lock()
	srv := s.find(addr)
	if srv == nil {
		s.mu.Unlock()
		return
	}
	var next State
	var closing []map[*conn]struct{}
	if ok && slices.Contains(s.leaving, addr) {
		next = 0
	} else if ok {
		next = s.improved(srv, r)
		if next == Active {
			for _, o := range s.servers {
				switch {
				case o == srv:
				case o.state == Active:
					o.state, o.since = Preferred, time.Now()
					closing = append(closing, o.take())
				case o.state != Preferred:
					closing = append(closing, o.take())
				}
			}
		}
	} else {
		switch {
		case srv.state == Standby:
			if r == byRequest {
				closing = append(closing, srv.take())
			}
		case srv.state >= Healthy || r != byCheck:
			next = Failed
			closing = append(closing, srv.take())
		}
	}
	if next != 0 && next != srv.state {
		was := srv.state
		srv.state, srv.since = next, time.Now()
		s.sort()
		if next == Failed {
			s.log.Warn("apiserver failed; the next is dialled", logkey.Server, addr, logkey.State, was.String()+"->"+next.String(),
				logkey.Reason, string(r)+": "+why, logkey.Servers, s.addrs())
		} else {
			s.log.Info("apiserver better", logkey.Server, addr, logkey.State, was.String()+"->"+next.String(), logkey.Reason, string(r))
		}
	}
	s.mu.Unlock()
	s.save()
	for _, c := range closing {
		closeAll(c)
	}
}

// improved is srv's state after a success told by r, or 0 for no change
// (k3s: recordSuccess). A standby server stays standby however it
// answers: it is the last fallback, dialled when no other answers.
func (s *Servers) improved(srv *server, r reason) State {
	switch srv.state {
	case Failed, Unchecked:
		return Recovering
	case Recovering:
		if r == byCheck {
			if len(srv.conns) > 0 {
				return Active
			}
			return Preferred
		}
	case Healthy:
		if r == byDial {
			return Active
		}
	case Preferred:
		if r == byDial {
			return Active
		}
		if time.Since(srv.since) > preferredFor {
			return Healthy
		}
	}
	return 0
}

// take forgets srv's connections and returns them, for closeAll; s.mu
// held.
func (srv *server) take() map[*conn]struct{} {
	conns := srv.conns
	srv.conns = map[*conn]struct{}{}
	return conns
}

// sort orders the servers best state first, those of one state in the
// order they had, and marks the order for the file when it changed (save
// writes it, s.mu released); s.mu held.
func (s *Servers) sort() {
	slices.SortStableFunc(s.servers, func(a, b *server) int { return cmp.Compare(b.state, a.state) })
	if addrs := s.addrs(); !slices.Equal(addrs, s.saved) {
		s.saved = addrs
		s.unsaved = slices.Clone(addrs)
	}
}

// closeAll closes the connections, each its own way: a connection's Close
// may wait on its peer.
func closeAll(conns map[*conn]struct{}) {
	for c := range conns {
		c.shut.Store(true)
		go c.Conn.Close()
	}
}

// Run checks every server every HealthInterval until ctx ends, each check
// bounded by HealthTimeout, and records the outcomes.
func (s *Servers) Run(ctx context.Context, check HealthCheck) {
	t := time.NewTicker(HealthInterval)
	defer t.Stop()
	for {
		s.CheckAll(ctx, check)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// CheckAll checks every server at once and records the outcomes.
func (s *Servers) CheckAll(ctx context.Context, check HealthCheck) {
	var wg sync.WaitGroup
	for _, addr := range s.List() {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, HealthTimeout)
			defer cancel()
			err := check(cctx, addr)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				s.record(addr, false, byCheck, err.Error())
			} else {
				s.record(addr, true, byCheck, "")
			}
		})
	}
	wg.Wait()
}

// ReadyzCheck asks an apiserver whether it is ready, as the client rc
// describes authenticates (GET /readyz, which a server without its etcd,
// or still starting, answers with an error), verifying its serving
// certificate by ServerName. Its connections are its own, never the
// client's.
func ReadyzCheck(rc *rest.Config) (HealthCheck, error) {
	cfg := rest.CopyConfig(rc)
	cfg.Dial, cfg.WrapTransport = nil, nil
	cfg.Timeout = HealthTimeout
	if cfg.TLSClientConfig.ServerName == "" {
		cfg.TLSClientConfig.ServerName = ServerName
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("the apiservers' health check: %w", err)
	}
	return func(ctx context.Context, addr string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %s: %s", resp.Status, body)
		}
		return nil
	}, nil
}

// failure says why a request's outcome counts against the server that
// answered it: 429 (k3s's and the apiserver's "storage is (re)initializing",
// or a server too busy), 500, 502, 503 (an apiserver without its etcd) or
// 504 (its etcd too slow), or an error other than the caller's cancel (a
// timeout, a connection cut); "" when it does not.
func failure(resp *http.Response, err error) string {
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		return ""
	case err != nil:
		return err.Error()
	}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return resp.Status
	}
	return ""
}

// roundTripper is a function as an http.RoundTripper.
type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// wrap bounds each request but a watch by RequestTimeout when its caller
// set no deadline, and counts its failure against the server whose
// connection carried it. A request that failed on a connection Servers
// had already closed when the client took it was never sent: it is sent
// once more, over a new connection, when its body can be read again (as
// net/http retries a request it had not written on a connection found
// broken). Without that, the request after a failover could fail for
// nothing: an HTTP/2 client may take the closed connection before it
// notices.
func (s *Servers) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		cancel := context.CancelFunc(func() {})
		if _, ok := r.Context().Deadline(); !ok && r.URL.Query().Get("watch") != "true" {
			var ctx context.Context
			ctx, cancel = context.WithTimeout(r.Context(), s.requestTimeout)
			r = r.WithContext(ctx)
		}
		resp, stale, err := s.roundTrip(rt, r)
		if err != nil && stale && replayable(r) {
			if r.GetBody != nil {
				r = r.Clone(r.Context())
				if r.Body, err = r.GetBody(); err != nil {
					cancel()
					return nil, err
				}
			}
			resp, _, err = s.roundTrip(rt, r)
		}
		if err != nil {
			cancel()
			return nil, err
		}
		resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
		return resp, nil
	})
}

// cancelOnClose ends a request's bound once its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
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
			s.Failed(c.srv.addr, why)
		}
	}
	return resp, stale.Load(), err
}

// replayable says r's body can be sent again.
func replayable(r *http.Request) bool {
	return r.Body == nil || r.Body == http.NoBody || r.GetBody != nil
}

// Set makes the servers the ones listed: those already known keep their
// state and place, new ones come after them unchecked, those gone are
// dropped and their connections closed, as k3s's load balancer closes
// those of a server it drops (pkg/agent/loadbalancer/servers.go,
// setServers). The configured servers the slice does not list stay, in
// standby, dialled only when every listed one fails, as k3s's load
// balancer keeps its default server in standby (setServers: "demote the
// default server down to standby, instead of deleting it"): a slice read
// as one server alone wrote it (the first apiserver back after an outage)
// would otherwise leave the client with a single server, and with none
// once that one went, since the watch that would learn the others goes
// through them. An empty list changes nothing (no server serves, or the
// slice is being rewritten): the last known are better than none.
func (s *Servers) Set(addrs []string) {
	s.mu.Lock()
	next := s.merge(nil, addrs)
	if len(next) == 0 {
		s.mu.Unlock()
		return
	}
	var kept []*server
	var closing []map[*conn]struct{}
	for _, srv := range s.servers {
		listed := slices.Contains(next, srv.addr)
		switch {
		case listed && srv.state == Standby:
			srv.state, srv.since = Unchecked, time.Now()
		case !listed && slices.Contains(s.seed, srv.addr):
			srv.state, srv.since = Standby, time.Now()
		case !listed:
			closing = append(closing, srv.take())
			continue
		}
		if !listed {
			closing = append(closing, srv.take())
		}
		kept = append(kept, srv)
	}
	for _, a := range next {
		if !slices.ContainsFunc(kept, func(srv *server) bool { return srv.addr == a }) {
			st := Unchecked
			if slices.Contains(s.leaving, a) {
				st = Failed
			}
			kept = append(kept, &server{addr: a, state: st, since: time.Now(), conns: map[*conn]struct{}{}})
		}
	}
	for _, a := range s.seed {
		if !slices.ContainsFunc(kept, func(srv *server) bool { return srv.addr == a }) {
			kept = append(kept, &server{addr: a, state: Standby, since: time.Now(), conns: map[*conn]struct{}{}})
		}
	}
	before := s.addrs()
	s.servers = kept
	s.sort()
	if !slices.Equal(before, s.addrs()) {
		s.log.Info("apiservers learnt", logkey.Listed, next, logkey.Servers, s.addrs())
	}
	s.mu.Unlock()
	s.save()
	for _, c := range closing {
		closeAll(c)
	}
}

// Leave makes the servers at addrs leaving, those of a voter a swap is
// taking out, whose k3s (its apiserver with it) the swap will stop: each
// is failed and its connections closed now, while the others serve, and
// stays failed however it answers until a later Leave no longer names
// it; then it is unchecked again. A leaving server is still dialled, last,
// when no other answers.
func (s *Servers) Leave(addrs []string) {
	s.mu.Lock()
	addrs = s.merge(nil, addrs)
	if slices.Equal(addrs, s.leaving) {
		s.mu.Unlock()
		return
	}
	var closing []map[*conn]struct{}
	for _, srv := range s.servers {
		was, now := slices.Contains(s.leaving, srv.addr), slices.Contains(addrs, srv.addr)
		switch {
		case now && !was:
			if srv.state != Standby {
				srv.state, srv.since = Failed, time.Now()
			}
			closing = append(closing, srv.take())
		case was && !now && srv.state == Failed:
			srv.state, srv.since = Unchecked, time.Now()
		}
	}
	s.leaving = addrs
	s.sort()
	s.log.Info("apiservers a swap takes out left", logkey.Leaving, addrs, logkey.Servers, s.addrs())
	s.mu.Unlock()
	s.save()
	for _, c := range closing {
		closeAll(c)
	}
}

// FollowSwaps makes the servers leave the apiserver of the voter a swap
// takes out, from the swap's start until it ends or rolls back, as the
// controller's swap record on the regrade Lease (namespace) names it,
// until ctx ends: address maps a Node's name to its apiserver's address
// ("" when unknown). A swap's step-down stops its outgoing voter's k3s,
// apiserver and all; its clients leave it before, while the others serve,
// rather than lose their requests and watches as it stops. A Lease that
// cannot be read leaves the servers as they are.
func (s *Servers) FollowSwaps(ctx context.Context, client typedcoordinationv1.CoordinationV1Interface, namespace string, address func(node string) string) {
	own := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", api.LeaseName).String()
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			own(&o)
			return client.Leases(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			own(&o)
			return client.Leases(namespace).Watch(ctx, o)
		},
	}
	inf := cache.NewSharedIndexInformer(lw, &coordinationv1.Lease{}, 0, cache.Indexers{})
	update := func() {
		var leaving []string
		for _, o := range inf.GetStore().List() {
			l, ok := o.(*coordinationv1.Lease)
			if !ok {
				continue
			}
			v, ok := l.Annotations[api.AnnotationSwap]
			if !ok || v == "" {
				continue
			}
			// Note: read as the controller reads it (controller/adapt
			// Lease), which the agent does not import: the planner stays
			// out of the agent.
			var r api.SwapRecord
			err := json.Unmarshal([]byte(v), &r)
			if err == nil {
				err = r.Validate()
			}
			if err != nil {
				s.log.Warn("the regrade Lease's swap record not read; the servers left as they are", logkey.Err, err)
				return
			}
			if r.Phase == "" && r.EndedAt == nil {
				if a := address(r.Out); a != "" {
					leaving = append(leaving, a)
				}
			}
		}
		s.Leave(leaving)
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { update() },
		UpdateFunc: func(any, any) { update() },
		DeleteFunc: func(any) { update() },
	})
	inf.RunWithContext(ctx)
}

// save writes the order sort marked last, atomically, if any; a write
// that fails is logged, the list kept in memory. It runs with s.mu
// released, so that a slow disk (the host's may be the slow voter's)
// holds no dial nor request of another goroutine; writes follow each
// other, the last order marked written last.
func (s *Servers) save() {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	s.mu.Lock()
	list := s.unsaved
	s.unsaved = nil
	s.mu.Unlock()
	if s.file == "" || list == nil {
		return
	}
	b, err := json.MarshalIndent(state{Servers: list}, "", "  ")
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
