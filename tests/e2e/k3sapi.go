package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"strconv"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleet-role/fleet-role/tests/testhost"
)

// On real k3s each server serves the API (k3s's supervisor on :6443, in
// front of its apiserver), and a server swapped out takes its API with
// it. Who reaches it how:
//
//   - the agents, as the playbook's defaults say: the first server of the
//     inventory other than their own host, then whichever live server
//     they learn (follow_servers); the harness gives them nothing;
//   - the test, the CLI and the playbook, as an administrator, with the
//     bootstrap server's /etc/rancher/k3s/k3s.yaml, its server made the
//     host's address; the test's own reads go on through any live server
//     once that one is gone (k3sAPI.dial), since what the test reads is
//     not what it tests;
//   - the controller's replicas, which run as containers on the hosts'
//     network (tests/deployment) rather than as Pods, through a stand-in
//     for the kubernetes Service: a listener on the network's gateway
//     that hands each connection to one endpoint of the Service's
//     EndpointSlice at random, as kube-proxy's rules do, with no retry on
//     another when that one refuses (apiService). Its address is among
//     the servers' tls-san, as a Service's ClusterIP is among k3s's
//     certificates' names.

// k3sAPI follows the fleet's servers for the test's own client.
type k3sAPI struct {
	// servers are the addresses of the fleet's servers (and standbys),
	// in the inventory's order.
	servers []string
	// svc is the kubernetes Service's stand-in.
	svc  *apiService
	mu   sync.Mutex
	last string
}

// apiServerName is a name every k3s server's certificate holds
// (pkg/daemons/control/deps: genServerCerts), so that one client can
// verify whichever server it reaches.
const apiServerName = "kubernetes"

// config is the administrator's configuration from the kubeconfig, its
// connections made to the first server that takes one: the last that
// did, then the others in order.
func (a *k3sAPI) config(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.TLSClientConfig.ServerName = apiServerName
	cfg.Dial = a.dial
	cfg.QPS, cfg.Burst = 100, 200
	cfg.Timeout = 15 * time.Second
	return cfg, nil
}

func (a *k3sAPI) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	a.mu.Lock()
	order := []string{}
	if a.last != "" {
		order = append(order, a.last)
	}
	for _, s := range a.servers {
		if s != a.last {
			order = append(order, s)
		}
	}
	a.mu.Unlock()
	var errs []error
	for _, s := range order {
		d := net.Dialer{Timeout: 2 * time.Second}
		c, err := d.DialContext(ctx, network, net.JoinHostPort(s, "6443"))
		if err == nil {
			a.mu.Lock()
			a.last = s
			a.mu.Unlock()
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// apiService stands in for the kubernetes Service's ClusterIP and
// kube-proxy's rules for it, for clients off the cluster's Pod network:
// each connection goes to one ready endpoint of the Service's
// EndpointSlice (default/kubernetes, which each apiserver keeps itself
// in while it runs), drawn at random; a connection that endpoint refuses
// is closed, as the client of a ClusterIP sees it refused.
type apiService struct {
	l         net.Listener
	Host      string
	Port      int
	mu        sync.Mutex
	endpoints []string
	conns     map[net.Conn]bool
	stop      chan struct{}
	done      sync.WaitGroup
}

// listenAPIService listens on a free port of host; it serves once
// follow is called, and stops at the test's end.
func listenAPIService(t testhost.T, host string) *apiService {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	s := &apiService{l: l, Host: host, Port: l.Addr().(*net.TCPAddr).Port, conns: map[net.Conn]bool{}, stop: make(chan struct{})}
	t.Cleanup(s.close)
	return s
}

// follow serves, its endpoints first those given, then the
// EndpointSlice's as c reads it every second.
func (s *apiService) follow(c kubernetes.Interface, initial []string) {
	s.mu.Lock()
	s.endpoints = initial
	s.mu.Unlock()
	s.done.Add(2)
	go func() {
		defer s.done.Done()
		for {
			if eps, err := serviceEndpoints(c); err == nil {
				s.mu.Lock()
				s.endpoints = eps
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-time.After(time.Second):
			}
		}
	}()
	go func() {
		defer s.done.Done()
		for {
			conn, err := s.l.Accept()
			if err != nil {
				return
			}
			go s.pipe(conn)
		}
	}()
}

// serviceEndpoints are the ready endpoints of default/kubernetes, as
// host:port.
func serviceEndpoints(c kubernetes.Interface) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := c.DiscoveryV1().EndpointSlices(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=kubernetes"})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, es := range list.Items {
		for _, p := range es.Ports {
			if p.Port == nil {
				continue
			}
			for _, e := range es.Endpoints {
				if e.Conditions.Ready != nil && !*e.Conditions.Ready {
					continue
				}
				for _, a := range e.Addresses {
					out = append(out, net.JoinHostPort(a, strconv.Itoa(int(*p.Port))))
				}
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("the kubernetes Service has no ready endpoint")
	}
	return out, nil
}

func (s *apiService) pipe(client net.Conn) {
	s.mu.Lock()
	eps := s.endpoints
	s.mu.Unlock()
	if len(eps) == 0 {
		_ = client.Close()
		return
	}
	server, err := net.DialTimeout("tcp", eps[mrand.IntN(len(eps))], 2*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	s.mu.Lock()
	select {
	case <-s.stop:
		s.mu.Unlock()
		_ = client.Close()
		_ = server.Close()
		return
	default:
	}
	s.conns[client], s.conns[server] = true, true
	s.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = io.Copy(server, client); _ = server.Close() }()
	go func() { defer wg.Done(); _, _ = io.Copy(client, server); _ = client.Close() }()
	wg.Wait()
	s.mu.Lock()
	delete(s.conns, client)
	delete(s.conns, server)
	s.mu.Unlock()
}

func (s *apiService) close() {
	s.mu.Lock()
	select {
	case <-s.stop:
		s.mu.Unlock()
		return
	default:
	}
	close(s.stop)
	for c := range s.conns {
		_ = c.Close()
	}
	s.mu.Unlock()
	_ = s.l.Close()
	s.done.Wait()
}
