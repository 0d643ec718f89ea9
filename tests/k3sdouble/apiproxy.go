package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// apiState is what a server's apiserver does with a request to :6443.
type apiState int

const (
	// apiNotReady: k3s's supervisor listens on :6443 from the start, but
	// its apiserver is not up yet (the member does not vote, or never
	// will): every API request is answered at once with 503 "apiserver
	// not ready" and the connection closed. k3s: pkg/cluster/cluster.go,
	// (*Cluster).Start (initClusterAndHTTPS before the managed database
	// starts); pkg/server/handlers/handlers.go, APIServer (503 while
	// Runtime.APIServer is nil); pkg/util/api.go, SendError (ErrAPINotReady,
	// "Connection: close").
	apiNotReady apiState = iota
	// apiServing: the apiserver runs and its member reaches a quorum.
	apiServing
	// apiStalled: the apiserver runs (k3s never stops it once started)
	// but its member reaches no quorum or its etcd stopped: a request
	// waits for etcd, and fails once etcd's request timeout passes
	// (etcd: server/config, (*ServerConfig).ReqTimeout, 5 s plus two
	// election timeouts) with a 500 "etcdserver: request timed out";
	// watches end (kubernetes: staging/src/k8s.io/apiserver/pkg/storage/
	// etcd3/watcher.go, newWatchChan watches WithRequireLeader, and etcd
	// cancels such streams once its member has had no leader for three
	// election timeouts, server/etcdserver/api/v3rpc/interceptor.go,
	// monitorLeader; the watch cache then ends every client's watch,
	// storage/cacher/cacher.go, (*Cacher).startCaching,
	// terminateAllWatchers). The double cuts the watches at once.
	apiStalled
)

func (st apiState) String() string {
	switch st {
	case apiNotReady:
		return "not ready"
	case apiServing:
		return "serving"
	default:
		return "stalled"
	}
}

// apiProxy is a server's apiserver on :6443: the test's one
// kube-apiserver, reached through this proxy while the server serves.
// Clients present their own credentials, which the proxy passes on; it
// terminates TLS with that kube-apiserver's own serving certificate,
// which names "kubernetes" as every k3s server's does.
type apiProxy struct {
	upstream *httputil.ReverseProxy
	// hold is how long a request waits on a stalled apiserver.
	hold time.Duration
	log  *slog.Logger

	mu    sync.Mutex
	state apiState
	// up is closed while the state is apiServing, a new one made when it
	// leaves it.
	up chan struct{}
	// cut ends every request forwarded since the state became
	// apiServing, once it leaves it.
	cut    context.Context
	cutNow context.CancelFunc
}

// newAPIProxy forwards to target through transport; hold is etcd's
// request timeout.
func newAPIProxy(target *url.URL, transport http.RoundTripper, hold time.Duration, log *slog.Logger) *apiProxy {
	p := &apiProxy{hold: hold, log: log, state: apiNotReady, up: make(chan struct{})}
	p.cut, p.cutNow = context.WithCancel(context.Background())
	p.cutNow()
	p.upstream = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.SetXForwarded()
		},
		Transport:     transport,
		FlushInterval: -1, // watches stream
		ErrorLog:      slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		// A request cut because the server stopped serving fails as
		// one in flight when etcd lost its quorum.
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "Internal error occurred: etcdserver: request timed out")
				return
			}
			writeStatus(w, http.StatusBadGateway, metav1.StatusReasonInternalError, err.Error())
		},
	}
	return p
}

// set is the server's state after a tick.
func (p *apiProxy) set(st apiState) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st == p.state {
		return
	}
	p.log.Info("apiserver", "state", st.String(), "was", p.state.String())
	if st == apiServing {
		p.cut, p.cutNow = context.WithCancel(context.Background())
		close(p.up)
	} else if p.state == apiServing {
		p.cutNow()
		p.up = make(chan struct{})
	}
	p.state = st
}

func (p *apiProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var held *time.Timer
	for {
		p.mu.Lock()
		st, up, cut := p.state, p.up, p.cut
		p.mu.Unlock()
		switch st {
		case apiServing:
			ctx, cancel := context.WithCancel(r.Context())
			stop := context.AfterFunc(cut, cancel)
			defer stop()
			defer cancel()
			p.upstream.ServeHTTP(w, r.WithContext(ctx))
			return
		case apiNotReady:
			w.Header().Set("Connection", "close")
			writeStatus(w, http.StatusServiceUnavailable, metav1.StatusReasonServiceUnavailable, "apiserver not ready")
			return
		}
		if held == nil {
			held = time.NewTimer(p.hold)
			defer held.Stop()
		}
		select {
		case <-up:
		case <-held.C:
			writeStatus(w, http.StatusInternalServerError, metav1.StatusReasonInternalError, "Internal error occurred: etcdserver: request timed out")
			return
		case <-r.Context().Done():
			return
		}
	}
}

// writeStatus answers as the apiserver does, with a Status.
func writeStatus(w http.ResponseWriter, code int, reason metav1.StatusReason, msg string) {
	b, _ := json.Marshal(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Message: msg, Reason: reason, Code: int32(code)})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// upstreamOf is where the test's kube-apiserver is and a transport that
// trusts it and adds no credentials: each request carries its client's.
func upstreamOf(rc *rest.Config) (*url.URL, http.RoundTripper, error) {
	u, err := url.Parse(rc.Host)
	if err != nil || u.Host == "" {
		return nil, nil, fmt.Errorf("the kubeconfig's server %q is no URL", rc.Host)
	}
	tc, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: rc.TLSClientConfig})
	if err != nil {
		return nil, nil, fmt.Errorf("the kubeconfig's TLS: %w", err)
	}
	return u, &http.Transport{TLSClientConfig: tc, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 50}, nil
}

// listenAPI listens on address with the serving certificate and key, and
// serves h until ctx ends, when every connection is closed (k3s stopped
// takes its apiserver with it).
func listenAPI(ctx context.Context, address, certFile, keyFile string, h http.Handler, log *slog.Logger) error {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return fmt.Errorf("the apiserver's serving certificate: %w", err)
	}
	l, err := net.Listen("tcp", address)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", address, err)
	}
	srv := &http.Server{Handler: h, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.ServeTLS(l, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("apiserver stopped serving", "err", err)
		}
	}()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	return nil
}

// apiState is this server's apiserver's state: not ready until its member
// voted, then serving while it reaches a quorum, else stalled.
func (s *server) apiState() apiState {
	switch {
	case !s.ready.Load():
		return apiNotReady
	case s.serves():
		return apiServing
	default:
		return apiStalled
	}
}

// etcdRequestTimeout is etcd's: 5 s plus two election timeouts. etcd:
// server/config, (*ServerConfig).ReqTimeout.
func etcdRequestTimeout(electionMs uint) time.Duration {
	return 5*time.Second + 2*time.Duration(electionMs)*time.Millisecond
}
