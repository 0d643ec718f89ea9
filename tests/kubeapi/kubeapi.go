// Package kubeapi starts a real kube-apiserver over a real etcd, built from
// the Go module proxy by tests/testbins/build-k8s-bins.sh (make test-bins)
// into a cache outside the repository, for the suites that need the
// Kubernetes API. Under CI missing binaries fail the test; elsewhere they
// skip it, naming make test-bins.
package kubeapi

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/fleet-role/fleet-role/tests/testhost"
)

// K8sVersion is the version make test-bins builds.
const K8sVersion = "v1.37.2"

// AdminToken authenticates as a member of system:masters.
const AdminToken = "fleet-role-test-admin"

// BinDir is where make test-bins puts the binaries.
func BinDir() string {
	if d := os.Getenv("FLEET_ROLE_TEST_BINS"); d != "" {
		return d
	}
	return filepath.Join(testhost.CacheDir(), "k8s-bins", K8sVersion)
}

// Server is a running etcd and kube-apiserver.
type Server struct {
	// Config authenticates as an administrator.
	Config *rest.Config
	// Kubeconfig is a file holding Config.
	Kubeconfig string
	// Client is a clientset of Config.
	Client kubernetes.Interface
	// URL is the API server's address.
	URL string
	// CAFile is the API server's serving certificate.
	CAFile string
	dir    string
	procs  []*exec.Cmd
	once   sync.Once
	// apiArgs start the API server again (StartAPIServer), as before.
	apiArgs []string
	bins    string
	// held is a socket bound to the API server's address while it is
	// stopped, or -1.
	held int
}

// Start starts etcd and the API server in a temporary directory, the API
// server on loopback. Stop them with Stop (Start registers it as a cleanup
// of tb too).
func Start(tb testhost.T) *Server {
	tb.Helper()
	return StartOn(tb, "127.0.0.1")
}

// StartOn is Start with the API server listening on address alone (the
// gateway of a network of containers, say, for them to reach it), which it
// also advertises and its serving certificate names. etcd stays on
// loopback.
func StartOn(tb testhost.T, address string) *Server {
	tb.Helper()
	bins := BinDir()
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bins, b)); err != nil {
			testhost.Unavailable(tb, "no %s in %s: run make test-bins", b, bins)
		}
	}
	// A port chosen free can be taken by another process before the
	// server binds it; a start that fails is tried again on new ports.
	var last error
	for range 3 {
		dir, err := os.MkdirTemp("", "fleet-role-kubeapi-")
		if err != nil {
			tb.Fatal(err)
		}
		s := &Server{dir: dir, held: -1}
		if last = s.start(bins, address); last == nil {
			tb.Cleanup(s.Stop)
			return s
		}
		tb.Logf("start the API server: %v; trying again", last)
		s.keep()
	}
	tb.Fatalf("start the API server: %v", last)
	return nil
}

func (s *Server) run(bin string, log string, args ...string) (*exec.Cmd, error) {
	f, err := os.OpenFile(filepath.Join(s.dir, log), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s.procs = append(s.procs, cmd)
	return cmd, nil
}

func (s *Server) start(bins, address string) error {
	clientPort, err := testhost.FreePort()
	if err != nil {
		return err
	}
	peerPort, err := testhost.FreePort()
	if err != nil {
		return err
	}
	apiPort, err := testhost.FreePort()
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	if _, err := s.run(filepath.Join(bins, "etcd"), "etcd.log",
		"--name", "test", "--data-dir", filepath.Join(s.dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "test="+peerURL, "--unsafe-no-fsync", "--log-level", "warn"); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	if err := waitHTTP(http.DefaultClient, etcdURL+"/health", s.procs[0], 30*time.Second); err != nil {
		return fmt.Errorf("etcd: %w (log in %s)", err, s.dir)
	}
	if err := s.keys(); err != nil {
		return err
	}
	certs := filepath.Join(s.dir, "certs")
	if err := os.WriteFile(filepath.Join(s.dir, "audit-policy.yaml"), []byte(auditPolicy), 0o644); err != nil {
		return err
	}
	s.bins = bins
	s.apiArgs = []string{
		"--audit-policy-file", filepath.Join(s.dir, "audit-policy.yaml"),
		"--audit-log-path", filepath.Join(s.dir, auditLog), "--audit-log-format", "json", "--audit-log-mode", "blocking",
		"--etcd-servers", etcdURL,
		"--bind-address", address, "--advertise-address", address, "--secure-port", strconv.Itoa(apiPort),
		"--cert-dir", certs,
		"--token-auth-file", filepath.Join(s.dir, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file", filepath.Join(s.dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(s.dir, "sa.key"),
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--disable-admission-plugins", "ServiceAccount",
		"--allow-privileged=true",
		"--endpoint-reconciler-type", "none",
		"--v", "0"}
	api, err := s.run(filepath.Join(bins, "kube-apiserver"), "kube-apiserver.log", s.apiArgs...)
	if err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	s.URL = "https://" + net.JoinHostPort(address, strconv.Itoa(apiPort))
	s.CAFile = filepath.Join(certs, "apiserver.crt")
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(s.CAFile); err == nil {
			break
		}
		if time.Now().After(deadline) || exited(api) {
			return fmt.Errorf("kube-apiserver wrote no serving certificate (log in %s)", s.dir)
		}
		time.Sleep(50 * time.Millisecond)
	}
	hc, err := s.adminHTTP()
	if err != nil {
		return err
	}
	if err := waitHTTP(hc, s.URL+"/readyz", api, 90*time.Second); err != nil {
		return fmt.Errorf("kube-apiserver: %w (log in %s)", err, s.dir)
	}
	s.Config = &rest.Config{Host: s.URL, BearerToken: AdminToken, TLSClientConfig: rest.TLSClientConfig{CAFile: s.CAFile}, QPS: 200, Burst: 400}
	if s.Client, err = kubernetes.NewForConfig(s.Config); err != nil {
		return err
	}
	s.Kubeconfig = filepath.Join(s.dir, "kubeconfig")
	return s.WriteKubeconfig(s.Kubeconfig, "admin", AdminToken)
}

// StopAPIServer kills the API server (etcd goes on), as a crash or a
// host's restart would: every client's connections are refused until
// StartAPIServer. Its address is held meanwhile, bound and not listened
// on: a port nothing is bound to may be taken as the local port of any
// connection the machine makes, and the API server could then not bind
// it again.
func (s *Server) StopAPIServer() {
	p := s.procs[len(s.procs)-1]
	_ = p.Process.Kill()
	_ = p.Wait()
	if fd, err := reserve(strings.TrimPrefix(s.URL, "https://")); err == nil {
		s.held = fd
	}
}

// reserve binds a socket to an IPv4 address and port without listening
// on it: connections to it are refused, and Linux takes no port bound so
// as the local port of a connection. With SO_REUSEADDR, as Go's
// listeners and the API server's set it, the killed server's connections
// in TIME_WAIT do not stop the bind.
func reserve(hostport string) (int, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return -1, err
	}
	n, err := strconv.Atoi(port)
	ip := net.ParseIP(host).To4()
	if err != nil || ip == nil {
		return -1, fmt.Errorf("not an IPv4 address and port: %s", hostport)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	sa := &syscall.SockaddrInet4{Port: n}
	copy(sa.Addr[:], ip)
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	if err := syscall.Bind(fd, sa); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// release closes the socket StopAPIServer holds, if any.
func (s *Server) release() {
	if s.held >= 0 {
		_ = syscall.Close(s.held)
		s.held = -1
	}
}

// StartAPIServer starts the API server again on the same address, etcd
// and certificates, and waits until it is ready.
func (s *Server) StartAPIServer() error {
	p := s.procs[len(s.procs)-1]
	if !exited(p) {
		return errors.New("the API server is running")
	}
	s.release()
	s.procs = s.procs[:len(s.procs)-1]
	api, err := s.run(filepath.Join(s.bins, "kube-apiserver"), "kube-apiserver.log", s.apiArgs...)
	if err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	hc, err := s.adminHTTP()
	if err != nil {
		return err
	}
	if err := waitHTTP(hc, s.URL+"/readyz", api, 90*time.Second); err != nil {
		return fmt.Errorf("kube-apiserver: %w: %s", err, s.logTail("kube-apiserver.log", 5))
	}
	return nil
}

// logTail is the last n lines of a log of the server's, or why not.
func (s *Server) logTail(name string, n int) string {
	b, err := os.ReadFile(filepath.Join(s.dir, name))
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// WriteKubeconfig writes a kubeconfig for the server with a token.
func (s *Server) WriteKubeconfig(path, user, token string) error {
	return s.writeKubeconfig(path, user, &clientcmdapi.AuthInfo{Token: token})
}

// WriteImpersonatingKubeconfig writes a kubeconfig that acts as the user
// given (a ServiceAccount's "system:serviceaccount:NS:NAME"), through the
// administrator's right to impersonate: the client has exactly the user's
// permissions.
func (s *Server) WriteImpersonatingKubeconfig(path, as string) error {
	return s.writeKubeconfig(path, "as", &clientcmdapi.AuthInfo{Token: AdminToken, Impersonate: as})
}

// WriteEmbeddedKubeconfig writes an administrator's kubeconfig that holds
// the serving certificate itself, for a host that cannot see CAFile.
func (s *Server) WriteEmbeddedKubeconfig(path string) error {
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		return err
	}
	return s.write(path, "admin", &clientcmdapi.AuthInfo{Token: AdminToken}, &clientcmdapi.Cluster{Server: s.URL, CertificateAuthorityData: ca})
}

func (s *Server) writeKubeconfig(path, user string, auth *clientcmdapi.AuthInfo) error {
	return s.write(path, user, auth, &clientcmdapi.Cluster{Server: s.URL, CertificateAuthority: s.CAFile})
}

func (s *Server) write(path, user string, auth *clientcmdapi.AuthInfo, cluster *clientcmdapi.Cluster) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = cluster
	kc.AuthInfos[user] = auth
	kc.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: user}
	kc.CurrentContext = "test"
	return clientcmd.WriteToFile(*kc, path)
}

// keys writes the service account key pair and the token file.
func (s *Server) keys() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"sa.pub":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		"tokens.csv": []byte(AdminToken + ",admin,admin-uid,system:masters\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(s.dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops the API server and etcd and removes their files.
func (s *Server) Stop() {
	s.once.Do(func() {
		s.kill()
		s.release()
		os.RemoveAll(s.dir)
	})
}

// keep stops the processes of a start that failed and keeps their logs,
// which its error names.
func (s *Server) keep() {
	s.once.Do(s.kill)
}

// adminHTTP is an HTTP client of the administrator that trusts the
// serving certificate.
func (s *Server) adminHTTP() (*http.Client, error) {
	ca, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Transport: &bearer{token: AdminToken, rt: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}}, nil
}

func (s *Server) kill() {
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		_ = p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
}

type bearer struct {
	token string
	rt    http.RoundTripper
}

func (b *bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

func exited(cmd *exec.Cmd) bool {
	return cmd.ProcessState != nil || cmd.Process.Signal(syscall.Signal(0)) != nil
}

func waitHTTP(c *http.Client, url string, proc *exec.Cmd, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		if exited(proc) {
			return fmt.Errorf("exited before %s answered", url)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("%s: %s", url, resp.Status)
		} else {
			last = err
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s did not answer in %s: %v", url, timeout, last)
}

// auditPolicy has the API server record every write to a Node (its
// metadata: verb, user, user agent), and nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    resources: [{group: "", resources: [nodes, nodes/status]}]
    verbs: [create, update, patch, delete, deletecollection]
  - level: None
`

// auditLog is the API server's audit log, in its directory.
const auditLog = "audit.log"

// NodeWrite is a write to a Node the API server audited.
type NodeWrite struct {
	Verb, Node, Subresource, UserAgent string
	// Code is the response's status code.
	Code int
}

// NodeWrites are the writes to Nodes the API server audited, in order:
// each request once, as it completed.
func (s *Server) NodeWrites() ([]NodeWrite, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, auditLog))
	if err != nil {
		return nil, err
	}
	var out []NodeWrite
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var e struct {
			Stage     string `json:"stage"`
			Verb      string `json:"verb"`
			UserAgent string `json:"userAgent"`
			ObjectRef struct {
				Resource, Name, Subresource string
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			return nil, fmt.Errorf("audit log: %w", err)
		}
		if e.Stage != "ResponseComplete" || e.ObjectRef.Resource != "nodes" {
			continue
		}
		out = append(out, NodeWrite{Verb: e.Verb, Node: e.ObjectRef.Name, Subresource: e.ObjectRef.Subresource, UserAgent: e.UserAgent, Code: e.ResponseStatus.Code})
	}
	return out, nil
}
