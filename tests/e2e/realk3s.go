package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/deployment"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// The real-k3s tier (DeployOnK3s) deploys the same fleet on the real k3s
// binary (testhost.K3sBinary) in place of the double: each host's
// container runs k3s as its installer leaves it — k3s.service or
// k3s-agent.service, /etc/rancher/k3s/config.yaml, the token — the
// servers with embedded etcd (the bootstrap host with cluster-init, the
// others joining through it with server:), a standby staged (its server's
// config.yaml and unit in place, its k3s agent running), an agent (its
// k3s agent alone). Every Node is registered by a real kubelet, with no
// fleet-role.io/role label: the playbook puts it on, as it does on a
// user's install. The API is the real servers' (k3sapi.go says who
// reaches it how). fleet-role is
// the playbook's, with its defaults for where the agents reach the API
// and their etcd member.
//
// What the harness adds to a host, beyond what an installer leaves:
//   - the binary is k3s's multi-call cmd/server, not a release's
//     self-extracting wrapper, so the directory that holds it and its
//     links (containerd among them) and Debian's CNI plugins are put on
//     the k3s units' PATH (a drop-in), as the wrapper puts the bin
//     directory it extracts (which bundles the CNI plugins);
//   - the kernel settings the kubelet sets when they differ
//     (kubelet's setupKernelTunables: vm.overcommit_memory,
//     kernel.panic, ...) are the machine's, not the host's: each that
//     differs is shown to the host as the kubelet's value, by a file
//     bound over it in the host's own mount namespace, so that the
//     kubelet leaves the machine's alone;
//   - k3s's data dir and the kubelet's root dir are directories of the
//     machine's, bound into the host;
//   - the flags this machine needs: in config.yaml, --kubelet-arg
//     fail-cgroupv1=false (the machine has cgroup v1, which a kubelet of
//     1.35 or later refuses by default), flannel-iface (the host's
//     interface on the network), --kube-proxy-arg
//     conntrack-max-per-core=0 (as kind's nodes: leave the machine's
//     conntrack table alone); on the server's command line, --disable of
//     what needs the Helm charts the binary does not bundle (traefik,
//     metrics-server, servicelb), the apiService's address among
//     --tls-san, and --kube-controller-manager-arg controllers= k3s's own
//     list less the deployment-controller (below).
//
// The controller: its Deployment, as the playbook applies it, cannot run
// as Pods here: a Pod's sandbox needs a CNI network (k3s's flannel CNI
// plugin is not in the binary nor among Debian's plugins), runc and a
// containerd shim (not bundled either) and a pause image (from a
// registry). So it runs as on the double, from tests/deployment's
// stand-in for the Deployment controller and a kubelet, its replicas
// containers on the hosts' network reaching the API through the
// apiService; and k3s's own Deployment controller is turned off, which
// would otherwise make Pods of it that never run and that the
// controller's PodDisruptionBudget would keep a drain from evicting.

// RealK3sHosts is the real-k3s fleet: three servers, the first the
// bootstrap host, a staged standby and an agent, all native hosts.
var RealK3sHosts = []HostSpec{
	{Name: "v1", Role: api.RoleVoter},
	{Name: "v2", Role: api.RoleVoter},
	{Name: "v3", Role: api.RoleVoter},
	{Name: "s1", Role: api.RoleStandby},
	{Name: "a1", Role: api.RoleAgent},
}

// k8sNodeMonitorGracePeriod is how old a Node's heartbeat may be before
// the node lifecycle controller of real k3s's kube-controller-manager
// turns its Ready to Unknown: Kubernetes's default since v1.32
// (pkg/controller/nodelifecycle/config/v1alpha1/defaults.go), which k3s
// does not change (docs/k3s-fidelity.md, row 15).
const k8sNodeMonitorGracePeriod = 50 * time.Second

// k3sBinDir is where a real-k3s host mounts the binary's directory.
const k3sBinDir = "/opt/k3s"

// k3sPath is the PATH of the k3s units on a real-k3s host: the binary's
// directory and the CNI plugins first, as a release's wrapper puts its
// own, then systemd's default.
const k3sPath = k3sBinDir + ":" + testhost.CNIDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// k3sIface is the hosts' interface on their network.
const k3sIface = "eth0"

// k3sYAML is where a server writes the administrator's kubeconfig.
const k3sYAML = hostRancher + "/k3s.yaml"

// k3sEtcdTLS are real k3s's etcd client files under a server's data dir.
var k3sEtcdTLS = struct{ CA, Cert, Key string }{"server/tls/etcd/server-ca.crt", "server/tls/etcd/client.crt", "server/tls/etcd/client.key"}

// DeployOnK3s is Deploy on the real k3s binary testhost.K3sBinary names.
func DeployOnK3s(t testhost.T, opts Options) *Fleet {
	t.Helper()
	opts.K3s = testhost.K3sBinary(t)
	return Deploy(t, opts)
}

// startOnK3s starts the hosts with real k3s as its installer leaves it
// (the bootstrap server first, then the others), waits until every
// kubelet has registered its Node Ready and every voter's member votes,
// and starts the controller's Deployment's stand-in.
func (f *Fleet) startOnK3s() {
	t := f.t
	f.k3sAPI = &k3sAPI{}
	for _, s := range f.servers() {
		f.k3sAPI.servers = append(f.k3sAPI.servers, s.IP)
	}
	// The servers' certificates name the apiService's address: it
	// listens before they start.
	svc := listenAPIService(t, f.Net.Gateway)
	f.k3sAPI.svc = svc

	f.logf("starting the hosts' containers on %s: %s", f.Net.Name, strings.Join(f.describe(), ", "))
	began := time.Now()
	if err := f.eachHost(f.startK3sHost); err != nil {
		t.Fatal(err)
	}
	// Note: after the hosts' own cleanups, so that it runs before them,
	// while their journals can still be read.
	t.Cleanup(f.cleanup)
	t.Cleanup(f.keepLogs)
	f.logf("the hosts' containers are up in %s", time.Since(began).Round(time.Second))

	b := f.bootstrap()
	f.logf("starting k3s on the bootstrap host %s (cluster-init)", b.Name)
	began = time.Now()
	if err := b.install(); err != nil {
		t.Fatal(err)
	}
	f.waitBootstrapAPI(b, 5*time.Minute)
	f.logf("%s's API answers after %s", b.Name, time.Since(began).Round(time.Second))
	svc.follow(f.Client, []string{b.IP + ":6443"})

	f.logf("starting k3s on the other hosts, each joining through %s", b.Name)
	began = time.Now()
	if err := f.eachHost(func(_ testhost.T, h *Host) error {
		if h == b {
			return nil
		}
		return h.install()
	}); err != nil {
		t.Fatal(err)
	}
	// Note: an outer limit, not an assertion: five k3s starting on two
	// cores registered in about a minute here, a build beside them or not.
	f.Wait(12*time.Minute, "every kubelet registered its Node, Ready, and every voter's member votes", f.registered)
	f.logf("every Node Ready and every voter voting after %s", time.Since(began).Round(time.Second))
	m, err := f.Members()
	if err != nil {
		t.Fatal(err)
	}
	f.logf("etcd: voters %v, learners %v", m.Voters, m.Learners)

	ca, err := f.serverCA()
	if err != nil {
		t.Fatal(err)
	}
	f.Controller = deployment.Start(t, deployment.Options{Client: f.Client, Namespace: api.Namespace, Name: controllerName,
		Network: f.Net.Name, APIHost: svc.Host, APIPort: svc.Port, CA: ca, Dir: filepath.Join(f.Dir, "replicas"), Log: f.logf,
		NodeImages: f.nodeImages})
}

// eachHost runs fn for every host at once, each on a goroutine of its
// own, and joins their errors.
func (f *Fleet) eachHost(fn func(t testhost.T, h *Host) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(f.Order))
	for i, name := range f.Order {
		wg.Go(func() {
			g := &onGoroutine{t: f.t}
			defer func() {
				if errs[i] == nil {
					errs[i] = g.err
				}
			}()
			errs[i] = fn(g, f.Hosts[name])
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startK3sHost starts a host's container on the network and puts on it
// what k3s's installer and the operator leave: the binary and its links,
// the token, a staged host's config.yaml and the units' drop-ins; the
// unit is enabled later (install).
func (f *Fleet) startK3sHost(t testhost.T, h *Host) error {
	data := filepath.Join(h.dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	if h.staged() {
		if err := ownDisk(t, data, filepath.Join(h.dir, "disk.img")); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	// Note: the kubelet's root dir too, which the kubelet's cAdvisor
	// must find the filesystem of (a container's own root, on this
	// machine's engine fuse-overlayfs, fails the kubelet's start: "failed
	// to get rootfs info: cannot find filesystem info for device
	// \"fuse-overlayfs\"").
	kubelet := filepath.Join(h.dir, "kubelet")
	if err := os.MkdirAll(kubelet, 0o700); err != nil {
		return err
	}
	sd := testhost.StartK3sHostIn(t, h.dir, f.k3s, k3sBinDir, "--network", f.Net.Name, "--ip", h.IP, "--hostname", h.Name,
		"-v", data+":"+hostDataDir, "-v", kubelet+":/var/lib/kubelet")
	h.Container = sd.Name
	if out, err := h.exec("sh", "-c", `command -v sudo >/dev/null && python3 -c "import apt"`); err != nil {
		return fmt.Errorf("%s: the host image lacks sudo or python3-apt, which Ansible's become and apt module need: run tests/images/build-images.sh: %v: %s", h.Name, err, out)
	}
	// As k3s's installer: the binary in /usr/local/bin, and its links
	// kubectl, crictl and ctr beside it.
	k3s := filepath.Base(f.k3s)
	if out, err := h.exec("sh", "-c", `ln -sfn "$1" /usr/local/bin/k3s && for n in kubectl crictl ctr; do ln -sfn k3s /usr/local/bin/$n; done`,
		"sh", k3sBinDir+"/"+k3s); err != nil {
		return fmt.Errorf("%s: link k3s: %v: %s", h.Name, err, out)
	}
	if err := h.maskKernelTunables(); err != nil {
		return err
	}
	files := map[string]string{hostToken: token + "\n"}
	if h.staged() {
		files["/etc/systemd/system/k3s.service.d/real-k3s.conf"] = k3sDropIn(f.k3sServerArgs(h)...)
		files["/etc/systemd/system/k3s-agent.service.d/real-k3s.conf"] = k3sDropIn("agent")
		files[hostRancher+"/config.yaml"] = f.k3sConfig(h)
	} else {
		files["/etc/systemd/system/k3s-agent.service.d/real-k3s.conf"] = k3sDropIn(k3sAgentArgs(h)...)
	}
	for path, data := range files {
		if err := h.put(path, data); err != nil {
			return err
		}
	}
	if out, err := h.exec("systemctl", "daemon-reload"); err != nil {
		return fmt.Errorf("%s: daemon-reload: %v: %s", h.Name, err, out)
	}
	return nil
}

// diskSize is the size of a server's own disk (ownDisk): a database of
// 240 MB, its WAL and the swap's snapshot of it fit several times over.
// The file is sparse: it takes what is written.
const diskSize = 4 << 30

// ownDisk mounts at dir a file system of its own, ext4 on a loop device
// over a sparse file at img (direct I/O: the machine's page cache does
// not stand between), and undoes it as the test ends, after the host's
// container is gone. A server's data dir is on one, as a server's data is
// on a disk of its own: a disk slowed (Host.SlowDisk) then slows that
// host alone. Note: on the machine's one file system the hosts share one
// journal, and a throttled host's writes held it: every host's fsync
// waited behind them, and etcd's writes, the API's and the other agents'
// reports stalled for 8.4 s at once (a follower's disk slowed, on real
// k3s), which no slow disk of one server does to the others; a loop
// device's writes, throttled before its file system's journal, held a
// dd's synced writes on the machine's disk to under 1 ms each.
func ownDisk(t testhost.T, dir, img string) error {
	run := func(name string, args ...string) (string, error) {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out)), nil
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		return err
	}
	if err := os.Truncate(img, diskSize); err != nil {
		return err
	}
	dev, err := run("losetup", "--find", "--show", "--direct-io=on", img)
	if err != nil {
		return err
	}
	t.Cleanup(func() {
		_, _ = run("umount", "--lazy", dir)
		_, _ = run("losetup", "--detach", dev)
		_ = os.Remove(img)
	})
	if _, err := run("mkfs.ext4", "-q", "-E", "nodiscard", dev); err != nil {
		return err
	}
	_, err = run("mount", dev, dir)
	return err
}

// k3sDropIn runs the real binary under the unit with the arguments, the
// binary's directory and the CNI plugins on its PATH. The rest is the
// unit's own, as k3s's installer writes it (Type=notify,
// Restart=always, RestartSec=5s).
func k3sDropIn(args ...string) string {
	return "[Service]\nEnvironment=PATH=" + k3sPath + "\nExecStart=\nExecStart=/usr/local/bin/k3s " + strings.Join(args, " ") + "\n"
}

// k3sServerArgs are k3s.service's arguments on a staged host, as k3s's
// installer writes those it is given (INSTALL_K3S_EXEC) into the unit:
// the flags k3s's agent does not know, which config.yaml cannot hold on
// a host whose k3s agent reads it too (k3s's agent refuses a key of the
// file it has no flag for: "flag provided but not defined: -disable";
// only the server drops those it does not know, pkg/configfilearg:
// DefaultParser's ValidFlags). The bootstrap host starts the cluster;
// and what this machine needs (DeployOnK3s says why).
func (f *Fleet) k3sServerArgs(h *Host) []string {
	args := []string{"server"}
	if f.bootstrap() == h {
		args = append(args, "--cluster-init")
	}
	return append(args, "--disable=traefik,metrics-server,servicelb", "--tls-san="+f.Net.Gateway,
		// Note: k3s's own list (pkg/daemons/control: controllerManager)
		// with the Deployment controller's off: the argument replaces it.
		"--kube-controller-manager-arg=controllers=*,tokencleaner,-service,-route,-cloud-node-lifecycle,-deployment-controller")
}

// k3sAgentArgs are k3s-agent.service's arguments on an agent, a host
// never staged (it has no config.yaml: staged_files), as k3s's installer
// writes those it is given into the unit; the server it joins and the
// token are in the unit's environment file (install).
func k3sAgentArgs(h *Host) []string {
	return []string{"agent", "--flannel-iface=" + k3sIface,
		"--kubelet-arg=fail-cgroupv1=false", "--kube-proxy-arg=conntrack-max-per-core=0"}
}

// k3sConfig is a staged host's /etc/rancher/k3s/config.yaml, which its
// server and its agent both read, as the operator writes it: the server
// the host joins through (but on the bootstrap host), the token file and
// what this machine needs (DeployOnK3s says why). Never fleet-role's
// role label: k3s puts its node-labels back at every start
// (pkg/agent/run.go, configureNode and updateMutableLabels), which would
// undo a swap's relabel; the playbook labels the Node once.
func (f *Fleet) k3sConfig(h *Host) string {
	var b strings.Builder
	if f.bootstrap() != h {
		fmt.Fprintf(&b, "server: https://%s:6443\n", f.bootstrap().IP)
	}
	fmt.Fprintf(&b, "token-file: %s\n", hostToken)
	fmt.Fprintf(&b, "flannel-iface: %s\n", k3sIface)
	b.WriteString("kubelet-arg:\n  - fail-cgroupv1=false\n")
	b.WriteString("kube-proxy-arg:\n  - conntrack-max-per-core=0\n")
	return b.String()
}

// kubeletTunables are the kernel settings the kubelet sets at its start
// where they differ, and its values (kubernetes pkg/kubelet/cm:
// setupKernelTunables).
var kubeletTunables = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// maskKernelTunables shows the host each of kubeletTunables the machine
// holds otherwise as the kubelet's value, a file bound over it in the
// host's mount namespace: they are the machine's, which the host's
// kubelet must leave alone.
func (h *Host) maskKernelTunables() error {
	for _, k := range slices.Sorted(maps.Keys(kubeletTunables)) {
		v := kubeletTunables[k]
		machine, err := os.ReadFile("/proc/sys/" + k)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(machine)) == v {
			continue
		}
		file := "/etc/fleet-role-test/sysctl/" + strings.ReplaceAll(k, "/", ".")
		if out, err := h.exec("sh", "-c", `mkdir -p "$(dirname "$1")" && echo "$2" >"$1" && mount --bind "$1" "/proc/sys/$3"`, "sh", file, v, k); err != nil {
			return fmt.Errorf("%s: show the kubelet %s as %s: %v: %s", h.Name, k, v, err, out)
		}
	}
	return nil
}

// waitBootstrapAPI waits for the bootstrap server's k3s.yaml and for its
// API to answer, then makes the administrator's kubeconfig of it and the
// test's client.
func (f *Fleet) waitBootstrapAPI(b *Host, timeout time.Duration) {
	f.t.Helper()
	var yaml string
	f.Wait(timeout, b.Name+" writes "+k3sYAML, func() error {
		out, err := b.exec("cat", k3sYAML)
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		yaml = out
		return nil
	})
	cfg, err := clientcmd.Load([]byte(yaml))
	if err != nil {
		f.t.Fatalf("%s: %v", k3sYAML, err)
	}
	for _, c := range cfg.Clusters {
		c.Server = "https://" + b.IP + ":6443"
	}
	f.Kubeconfig = filepath.Join(f.Dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, f.Kubeconfig); err != nil {
		f.t.Fatal(err)
	}
	rc, err := f.k3sAPI.config(f.Kubeconfig)
	if err != nil {
		f.t.Fatal(err)
	}
	if f.Client, err = kubernetes.NewForConfig(rc); err != nil {
		f.t.Fatal(err)
	}
	f.Wait(timeout, b.Name+"'s API is ready", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := f.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err
	})
	if f.etcdTLS, err = f.k3sEtcdTLS(b); err != nil {
		f.t.Fatal(err)
	}
}

// k3sEtcdTLS is a client's TLS to the servers' etcd: the client
// certificate k3s's own server uses, from the bootstrap host's data dir
// (a directory of the machine's).
func (f *Fleet) k3sEtcdTLS(b *Host) (*tls.Config, error) {
	data := filepath.Join(b.dir, "data")
	ca, err := os.ReadFile(filepath.Join(data, k3sEtcdTLS.CA))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s: no certificate", k3sEtcdTLS.CA)
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(data, k3sEtcdTLS.Cert), filepath.Join(data, k3sEtcdTLS.Key))
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// serverCA is the servers' CA, from the administrator's kubeconfig.
func (f *Fleet) serverCA() ([]byte, error) {
	cfg, err := clientcmd.LoadFromFile(f.Kubeconfig)
	if err != nil {
		return nil, err
	}
	for _, c := range cfg.Clusters {
		return c.CertificateAuthorityData, nil
	}
	return nil, fmt.Errorf("%s has no cluster", f.Kubeconfig)
}

// registered: every host's kubelet registered its Node, Ready, and every
// voter's member votes (k3s's EtcdIsVoter).
func (f *Fleet) registered() error {
	nodes, err := f.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err
	}
	seen := map[string]*corev1.Node{}
	for i := range nodes.Items {
		seen[nodes.Items[i].Name] = &nodes.Items[i]
	}
	for _, name := range f.Order {
		h, n := f.Hosts[name], seen[name]
		switch {
		case n == nil:
			return fmt.Errorf("%s has no Node", name)
		case !conditionTrue(n, corev1.NodeReady):
			return fmt.Errorf("%s is not Ready", name)
		case h.Role == api.RoleVoter && !conditionTrue(n, api.ConditionEtcdIsVoter):
			return fmt.Errorf("%s's member does not vote", name)
		}
	}
	return nil
}

// cliKubeconfig is the kubeconfig the CLI runs with: on the double, the
// API server's; on real k3s, the administrator's with its server made
// the first server whose API is ready, as an operator points kubectl at a
// server that is up.
func (f *Fleet) cliKubeconfig() string {
	if f.k3s == "" {
		return f.Kubeconfig
	}
	return f.liveKubeconfig(filepath.Join(f.Dir, "kubeconfig-cli"))
}

// adminKubeconfig is the kubeconfig the playbook runs with, as the
// inventory names it: on the double, the API server's; on real k3s, one
// that Playbook points at a server whose API is ready before each run, as
// an operator points the playbook's kubeconfig at a server that is up:
// the bootstrap server the first run reached may have been swapped out
// since.
func (f *Fleet) adminKubeconfig() string {
	if f.k3s == "" {
		return f.Kubeconfig
	}
	return filepath.Join(f.Dir, "kubeconfig-admin")
}

// liveKubeconfig writes to path the administrator's kubeconfig with its
// server the first server whose API is ready, and returns path.
func (f *Fleet) liveKubeconfig(path string) string {
	f.t.Helper()
	cfg, err := clientcmd.LoadFromFile(f.Kubeconfig)
	if err != nil {
		f.t.Fatal(err)
	}
	var live string
	f.Wait(time.Minute, "a server's API is ready", func() error {
		var errs []error
		for _, s := range f.servers() {
			if err := f.readyz(s.IP); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", s.Name, err))
				continue
			}
			live = s.IP
			return nil
		}
		return errors.Join(errs...)
	})
	for _, c := range cfg.Clusters {
		c.Server = "https://" + live + ":6443"
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		f.t.Fatal(err)
	}
	return path
}

// readyz asks the server at ip whether its API is ready, as the
// administrator.
func (f *Fleet) readyz(ip string) error {
	rc, err := clientcmd.BuildConfigFromFlags("https://"+ip+":6443", f.Kubeconfig)
	if err != nil {
		return err
	}
	rc.Timeout = 5 * time.Second
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	_, err = c.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
	return err
}

// apiWrites is the namespace StartAPIWrites writes in.
const apiWrites = "e2e-writes"

// StartAPIWrites writes to the API as a client in the cluster does,
// through the kubernetes Service (apiService), one write at a time: each
// a ConfigMap of its own, labelled with the run and holding its number,
// given k3s's election timeout four times over (StartWrites), until
// Count, which lists them back.
func (f *Fleet) StartAPIWrites() *Writes {
	return f.startAPIWrites(fmt.Sprintf("%s:%d", f.k3sAPI.svc.Host, f.k3sAPI.svc.Port))
}

// startAPIWrites is StartAPIWrites through the API at addr (host:port).
func (f *Fleet) startAPIWrites(addr string) *Writes {
	f.t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("https://"+addr, f.Kubeconfig)
	if err != nil {
		f.t.Fatal(err)
	}
	rc.QPS, rc.Burst = 100, 200
	c, err := kubernetes.NewForConfig(rc)
	if err != nil {
		f.t.Fatal(err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: apiWrites}}
	if _, err := f.Client.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		f.t.Fatal(err)
	}
	run := strconv.FormatInt(time.Now().UnixNano(), 10)
	cms := c.CoreV1().ConfigMaps(apiWrites)
	return f.startWrites(func(ctx context.Context, i int) error {
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("w-%s-%08d", run, i), Labels: map[string]string{"e2e-run": run}},
			Data:       map[string]string{"write": strconv.Itoa(i)},
		}
		_, err := cms.Create(ctx, cm, metav1.CreateOptions{})
		return err
	}, func(ctx context.Context) (map[int]bool, error) {
		got := map[int]bool{}
		opts := metav1.ListOptions{LabelSelector: "e2e-run=" + run, Limit: 500}
		for {
			list, err := f.Client.CoreV1().ConfigMaps(apiWrites).List(ctx, opts)
			if err != nil {
				return nil, err
			}
			for _, cm := range list.Items {
				i, err := strconv.Atoi(cm.Data["write"])
				if err != nil || cm.Name != fmt.Sprintf("w-%s-%08d", run, i) {
					return nil, fmt.Errorf("%s holds %q", cm.Name, cm.Data["write"])
				}
				got[i] = true
			}
			if opts.Continue = list.Continue; opts.Continue == "" {
				return got, nil
			}
		}
	})
}
