package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/tests/deployment"
	"github.com/fleet-role/fleet-role/tests/kubeapi"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// A deployed fleet (Deploy) is built as its users build it: k3s on each
// host as its installer and its operator leave it, then fleet-role by
// `ansible-playbook ansible/deploy.yml` over the community.docker.docker
// connection — the .deb installed, agent.toml rendered and validated, the
// agents' credentials, the controller's RBAC, ConfigMap and Deployment
// applied — and the controller run from that Deployment by a stand-in
// for the Deployment controller and a kubelet (tests/deployment), its
// replicas containers of the image `make image` builds, in-cluster under
// the role's RBAC.
//
// Its hosts are containers on one bridge network of the machine's
// engine, each in a network namespace of its own at a fixed address: a
// native host has systemd as PID 1 (testhost.StartSystemdHostIn), a
// Docker host has an engine of its own too (testhost.StartDockerHostIn,
// Docker-in-Docker). The real kube-apiserver listens on the network's
// gateway, the machine's own address on it (its serving certificate
// names that address), where the test and the k3s double reach it; the
// agents and the controller's replicas reach it only through the
// servers' :6443, each of which passes requests on only while its
// server serves (tests/k3sdouble), as on k3s, where each server runs
// its own apiserver over its own etcd member.
//
// What the harness puts on a host is k3s's side alone, as k3s's installer
// and the operator (k3s-ansible, say) leave it: on a native host the k3s
// double as /usr/local/bin/k3s under the image's k3s.service and
// k3s-agent.service (a drop-in giving its arguments), the token, a
// staged host's config.yaml, the agent unit's environment file, the one
// unit the installer enables; on a Docker host the double's image in its
// engine and a staged host's config.yaml; on both the double's
// kubeconfig and the kube-apiserver's serving certificate and key, which
// the double's :6443 presents. Everything
// fleet-role's is the playbook's, the agents' credentials among it.

// DeployedHosts is the deployed fleet: two voters on native hosts, the
// first the bootstrap host, a voter and a standby on Docker hosts.
var DeployedHosts = []HostSpec{
	{Name: "v1", Role: api.RoleVoter},
	{Name: "v2", Role: api.RoleVoter},
	{Name: "v3", Role: api.RoleVoter, Docker: true},
	{Name: "s1", Role: api.RoleStandby, Docker: true},
}

// doubleKubeconfig is where a host keeps the k3s double's kubeconfig.
const doubleKubeconfig = "/etc/k3s-double/kubeconfig"

// controllerName is the controller's Deployment.
const controllerName = "fleet-role-controller"

// Deploy deploys the fleet from nothing, on the k3s double or, where
// Options.K3s names a binary, on real k3s: it builds fleet-role's
// package and image, starts the hosts with k3s as its installer leaves
// it (on the double, the real kube-apiserver behind them first), runs
// the playbook once from nothing, and waits until every voter votes,
// every Node is Ready with a probe and the controller's Deployment is
// available. Every scenario is written once against the Fleet it
// returns, whichever k3s runs under it.
func Deploy(t testhost.T, opts Options) *Fleet {
	t.Helper()
	testhost.RequireImage(t, testhost.SystemdImage)
	if opts.K3s == "" {
		testhost.RequireImage(t, testhost.DockerHostImage)
	}
	for _, h := range opts.Hosts {
		if h.Docker && opts.K3s != "" {
			t.Fatalf("%s: the real-k3s tier has native hosts only", h.Name)
		}
	}
	if _, err := exec.LookPath("ansible-playbook"); err != nil {
		testhost.Unavailable(t, "ansible-playbook is not installed: apt-get install ansible python3-kubernetes python3-docker (.ci/setup does)")
	}
	if opts.ProbePeriod == 0 {
		opts.ProbePeriod = 2 * time.Second
	}
	dir, err := os.MkdirTemp("", "fleet-role-deployed")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	f := &Fleet{t: t, opts: opts, Dir: dir, Hosts: map[string]*Host{}, BinDir: filepath.Join(dir, "bin"), logs: filepath.Join(dir, "logs"), k3s: opts.K3s}
	if err := os.MkdirAll(f.logs, 0o755); err != nil {
		t.Fatal(err)
	}
	if f.k3s != "" {
		out, _ := exec.Command(f.k3s, "--version").CombinedOutput()
		f.logf("real k3s: %s (%s)", strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]), f.k3s)
	}
	f.logf("building fleet-role's package and image (make package image)")
	began := time.Now()
	if err := f.make(); err != nil {
		t.Fatal(err)
	}
	f.logf("built in %s", time.Since(began).Round(time.Second))
	f.Net = testhost.NewNetwork(t)
	for i, spec := range opts.Hosts {
		h := &Host{HostSpec: spec, IP: f.Net.Addr(10 + i), f: f, dir: filepath.Join(dir, spec.Name)}
		f.Hosts[spec.Name], f.Order = h, append(f.Order, spec.Name)
	}

	if f.k3s != "" {
		f.startOnK3s()
	} else {
		f.startOnDouble()
	}

	inventory, err := f.writeInventory("inventory.json", nil)
	if err != nil {
		t.Fatal(err)
	}
	f.inventory = inventory
	f.logf("ansible-playbook -i %s deploy.yml: fleet-role from nothing", f.inventory)
	began = time.Now()
	if _, changed := f.Playbook(); changed == 0 {
		t.Fatalf("the first run of the playbook changed nothing")
	}
	f.logf("the playbook ran in %s", time.Since(began).Round(time.Second))
	f.requireRolesLabelled()
	if f.API != nil {
		f.requireNoNodeWrittenByTheHarness()
	}
	f.logf("waiting for etcd's members to vote, every Node to be Ready with a probe and the controller to be available")
	// Note: outer limits, not assertions, the real tier's (the double's
	// were 4 and 2 minutes): five real k3s on two cores, the first group
	// of packages beside them, took up to 7m10s to deploy here.
	f.waitUp(6 * time.Minute)
	f.WaitRolledOut(3 * time.Minute)
	return f
}

// startOnDouble starts the real kube-apiserver and the hosts with the k3s
// double as k3s's installer leaves them, and the controller's
// Deployment's stand-in.
func (f *Fleet) startOnDouble() {
	t := f.t
	var err error
	if f.double, err = testhost.Build(f.Dir, "k3s", "./tests/k3sdouble"); err != nil {
		t.Fatal(err)
	}
	f.image = testhost.ImageOf(t, "fleet-role-test/k3s-double:latest", f.double, "/bin/k3s")

	f.logf("starting a real kube-apiserver on %s, the gateway of the hosts' network %s", f.Net.Gateway, f.Net.Name)
	f.API = kubeapi.StartOn(t, f.Net.Gateway)
	f.Client, f.Kubeconfig = f.API.Client, f.API.Kubeconfig
	f.kubeconfig = filepath.Join(f.Dir, "kubeconfig")
	if err := f.API.WriteEmbeddedKubeconfig(f.kubeconfig); err != nil {
		t.Fatal(err)
	}
	f.objects()

	f.logf("starting the hosts with k3s as its installer leaves it: %s", strings.Join(f.describe(), ", "))
	began := time.Now()
	if err := f.eachHost(f.startHost); err != nil {
		t.Fatal(err)
	}
	f.logf("the hosts are up in %s", time.Since(began).Round(time.Second))
	// Note: after the hosts' own cleanups, so that it runs before them,
	// while their journals can still be read.
	t.Cleanup(f.cleanup)
	t.Cleanup(f.keepLogs)

	// The controller's replicas reach the API as a Pod does, through the
	// kubernetes Service: its stand-in on the gateway hands each
	// connection to a server the Service's EndpointSlice lists, which
	// the servers keep themselves in while they serve (tests/k3sdouble).
	// The kube-apiserver's serving certificate, which each server's :6443
	// presents, names the gateway, as a Service's ClusterIP is among
	// k3s's certificates' names.
	// Before the playbook, the servers whose k3s its installer started
	// (on a Docker host the playbook starts k3s's containers) serve.
	var voters []string
	for _, n := range f.Order {
		if h := f.Hosts[n]; h.Role == api.RoleVoter && !h.Docker {
			voters = append(voters, h.IP)
		}
	}
	f.logf("waiting for the servers %s to serve the API on :6443", strings.Join(voters, ", "))
	began = time.Now()
	f.waitServing(voters, 4*time.Minute)
	f.logf("the servers serve in %s", time.Since(began).Round(time.Second))
	svc := listenAPIService(t, f.Net.Gateway)
	svc.follow(f.Client, nil)
	ca, err := os.ReadFile(f.API.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	f.Controller = deployment.Start(t, deployment.Options{Client: f.Client, Namespace: api.Namespace, Name: controllerName,
		Network: f.Net.Name, APIHost: svc.Host, APIPort: svc.Port, CA: ca, Dir: filepath.Join(f.Dir, "replicas"), Log: f.logf,
		NodeImages: f.nodeImages})
}

// make builds the binary, the .deb and the controller's image as a user
// does: make package image.
func (f *Fleet) make() error {
	cmd := exec.Command("make", "package", "image", "BIN="+f.BinDir)
	cmd.Dir = testhost.Root()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("make package image: %v: %s", err, out.String())
	}
	f.Bin = filepath.Join(f.BinDir, "fleet-role")
	debs, _ := filepath.Glob(filepath.Join(f.BinDir, "fleet-role_*_amd64.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("make package made %d .debs, not one: %s", len(debs), out.String())
	}
	f.deb = debs[0]
	var err error
	f.helm, err = testhost.Helm()
	return err
}

// objects creates what k3s's kubelets would have registered: the Nodes
// (not labelled with their role: the playbook does that) and an app's
// Pod on each.
// fleet-role's namespace is the playbook's.
func (f *Fleet) objects() {
	createObjects(f.t, f.Client, []string{api.NodeLeaseNamespace, "apps"}, f.opts.Hosts)
}

// startHost starts a host's container on the network and puts k3s's side
// on it.
func (f *Fleet) startHost(t testhost.T, h *Host) error {
	// k3s's data dir is a directory of the machine's, as a host's data is
	// on its disk: Host.SlowDisk throttles the disk that holds it. Note:
	// writes to a container's own overlay root are not counted in its
	// blkio cgroup here, so a throttle would not slow them.
	data := filepath.Join(h.dir, "data")
	if err := os.MkdirAll(data, 0o700); err != nil {
		return err
	}
	flags := []string{"--network", f.Net.Name, "--ip", h.IP, "--hostname", h.Name, "-v", data + ":" + hostDataDir}
	if h.Docker {
		dh := testhost.StartDockerHostIn(t, h.dir, flags...)
		h.Container = dh.Name
		dh.Load(t, f.image)
	} else {
		sd := testhost.StartSystemdHostIn(t, h.dir, append(flags, "-v", f.double+":/usr/local/bin/k3s:ro")...)
		h.Container = sd.Name
	}
	if out, err := h.exec("sh", "-c", `command -v sudo >/dev/null && python3 -c "import apt"`); err != nil {
		return fmt.Errorf("%s: the host image lacks sudo or python3-apt, which Ansible's become and apt module need: run tests/images/build-images.sh: %v: %s", h.Name, err, out)
	}
	kc, err := os.ReadFile(f.kubeconfig)
	if err != nil {
		return err
	}
	files := map[string]string{doubleKubeconfig: string(kc)}
	// A server's :6443 serves with the kube-apiserver's own certificate
	// and key (the double's --serving-cert and --serving-key defaults).
	for _, name := range []string{"apiserver.crt", "apiserver.key"} {
		b, err := os.ReadFile(filepath.Join(filepath.Dir(f.API.CAFile), name))
		if err != nil {
			return err
		}
		files[filepath.Join(filepath.Dir(doubleKubeconfig), name)] = string(b)
	}
	if h.staged() {
		// As the operator stages a k3s server: the bootstrap host starts
		// the cluster, the others join through it.
		conf := "cluster-init: true\n"
		if b := f.bootstrap(); b != h {
			conf = fmt.Sprintf("server: https://%s:6443\n", b.IP)
		}
		if !h.Docker {
			// A Docker host's token is the playbook's, given by --token-file.
			conf += "token-file: " + hostToken + "\n"
		}
		files[hostRancher+"/config.yaml"] = conf
	}
	if !h.Docker {
		files[hostToken] = token + "\n"
		files["/etc/systemd/system/k3s.service.d/double.conf"] = unitDropIn(h.doubleArgs("server", doubleKubeconfig))
		files["/etc/systemd/system/k3s-agent.service.d/double.conf"] = unitDropIn(h.doubleArgs("agent", doubleKubeconfig))
	}
	for path, data := range files {
		if err := h.put(path, data); err != nil {
			return err
		}
	}
	if h.Docker {
		return nil
	}
	if out, err := h.exec("systemctl", "daemon-reload"); err != nil {
		return fmt.Errorf("%s: daemon-reload: %v: %s", h.Name, err, out)
	}
	return h.install()
}

// put writes a file of the host, root's, making its directory: 0644 for
// systemd's unit files (systemd warns of a unit file others cannot read),
// 0600 for the rest.
func (h *Host) put(path, data string) error {
	umask := "077"
	if strings.HasPrefix(path, "/etc/systemd/") {
		umask = "022"
	}
	cmd := exec.Command("docker", "exec", "-i", h.Container, "sh", "-c", `umask `+umask+` && mkdir -p "$(dirname "$1")" && cat >"$1"`, "sh", path)
	cmd.Stdin = strings.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: write %s: %v: %s", h.Name, path, err, out)
	}
	return nil
}

// inventory is an Ansible inventory (YAML, here written as JSON).
type inventory struct {
	All struct {
		Vars     map[string]any          `json:"vars"`
		Children map[string]inventoryGrp `json:"children"`
	} `json:"all"`
}

type inventoryGrp struct {
	Hosts map[string]map[string]any `json:"hosts"`
}

// diskFsyncLimit and diskReadLimit are the controller's verdict limits
// on the probe in every test fleet. Every member's WAL and
// every host's probe is on the machine's one disk: with nothing else
// running, a fault fleet's hosts sampled fsync p99 of 11-30 ms (51 ms at
// most) and reads up to 97 ms, over etcd's 10 ms guidance, and real k3s
// 15-30 ms while the machine is busy. So they are raised, as an operator
// raises them for a slower disk that etcd copes with; a disk turned slow
// (Host.SlowDisk at 10 writes a second: 300 ms a synced write, measured)
// stays well over them.
// The voters' own etcd latencies (its WAL fsync and backend commit p99s)
// are raised likewise, tenfold etcd's guidance: this machine's embedded
// etcd alone measured a WAL fsync p99 of 15-30 ms and a backend commit p99
// of 28-36 ms while the machine was busy (docs/figures.md); a disk turned
// slow gives seconds (1.0-3.6 s measured on real k3s).
const (
	diskFsyncLimit    = "100ms"
	diskReadLimit     = "500ms"
	diskWALFsyncLimit = "100ms"
	diskCommitLimit   = "250ms"
)

// writeInventory writes the fleet's inventory, as an operator would for
// these hosts: each reached over the community.docker.docker connection
// by its container's name, its ansible_host its address; the package,
// the timings of a test fleet, and for the Docker hosts k3s's image (the
// double's) and its arguments. Each host is in the group of its role at
// the deploy, or in moved's group for it; the inventory is written to
// file in the fleet's directory, whose path is returned.
func (f *Fleet) writeInventory(file string, moved map[string]string) (string, error) {
	var inv inventory
	p := f.opts.ProbePeriod.String()
	inv.All.Vars = map[string]any{
		"fleet_role_agent_package":       f.deb,
		"fleet_role_agent_probe_period":  p,
		"fleet_role_agent_resync_period": "5s",
		// The agents' credentials are made from the machine the playbook
		// runs on, as its administrator.
		"fleet_role_agent_admin_kubeconfig":  f.adminKubeconfig(),
		"fleet_role_controller_kubeconfig":   f.adminKubeconfig(),
		"fleet_role_controller_binary":       f.Bin,
		"fleet_role_controller_helm":         f.helm,
		"fleet_role_controller_period":       "1s",
		"fleet_role_controller_probe_period": p,
		"fleet_role_controller_cooldown":     "10s",
		"fleet_role_controller_extra_config": f.controllerConfig(),
	}
	if f.k3s == "" {
		// On the double: each host's member at its own address, over
		// plain http; and the token the Docker hosts' k3s containers are
		// given. On real k3s the role's defaults say both. The agents
		// reach the API as on real k3s, by the role's defaults: through
		// the servers' :6443, each serving only while its server does.
		inv.All.Vars["fleet_role_agent_etcd_endpoint"] = "http://{{ ansible_host }}:2379"
		inv.All.Vars["fleet_role_agent_k3s_token"] = token
	}
	inv.All.Vars["fleet_role_agent_read_limit"] = diskReadLimit
	inv.All.Children = map[string]inventoryGrp{}
	group := map[string]string{api.RoleVoter: "fleet_servers", api.RoleStandby: "fleet_standbys", api.RoleAgent: "fleet_agents"}
	for _, n := range f.Order {
		h := f.Hosts[n]
		vars := map[string]any{
			"ansible_connection":         "community.docker.docker",
			"ansible_docker_host":        h.Container,
			"ansible_host":               h.IP,
			"ansible_python_interpreter": "/usr/bin/python3",
		}
		if h.Docker {
			vars["fleet_role_agent_platform"] = "docker"
			vars["fleet_role_agent_docker_image"] = f.image
			vars["fleet_role_agent_docker_privileged"] = false
			vars["fleet_role_agent_docker_server_args"] = h.doubleArgs("server", doubleKubeconfig)[1:]
			vars["fleet_role_agent_docker_agent_args"] = h.doubleArgs("agent", doubleKubeconfig)[1:]
			vars["fleet_role_agent_docker_volumes"] = []string{
				hostDataDir + ":" + hostDataDir,
				filepath.Dir(doubleKubeconfig) + ":" + filepath.Dir(doubleKubeconfig) + ":ro",
			}
		}
		name := group[h.Role]
		if m, ok := moved[h.Name]; ok {
			name = m
		}
		g := inv.All.Children[name]
		if g.Hosts == nil {
			g.Hosts = map[string]map[string]any{}
		}
		g.Hosts[h.Name] = vars
		inv.All.Children[name] = g
	}
	b, err := json.MarshalIndent(inv, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(f.Dir, file)
	return path, os.WriteFile(path, b, 0o600)
}

// controllerConfig is the controller's configuration beyond the role's
// keys: the harness's timings.
func (f *Fleet) controllerConfig() string {
	var keys strings.Builder
	for _, k := range slices.Sorted(maps.Keys(f.opts.Keys)) {
		fmt.Fprintf(&keys, "%s = %s\n", k, f.opts.Keys[k])
	}
	verdicts := fmt.Sprintf("[verdicts]\nfsync_limit = %q\nread_limit = %q\nwal_fsync_p99_limit = %q\nbackend_commit_p99_limit = %q\n",
		diskFsyncLimit, diskReadLimit, diskWALFsyncLimit, diskCommitLimit)
	if f.opts.VerdictWindow > 0 {
		verdicts += fmt.Sprintf("window = %d\n", f.opts.VerdictWindow)
	}
	return fmt.Sprintf(`min_pass_interval = "50ms"
drain_timeout = "10s"
lease_duration = "10s"
%s
[leader_election]
lease_duration = "4s"
renew_deadline = "3s"
retry_period = "500ms"

[bounds]
%s

%s`, keys.String(), f.bounds(), verdicts)
}

var playRecap = regexp.MustCompile(`(?m)^(\S+)\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)`)

// Playbook runs ansible-playbook -i INVENTORY deploy.yml with more
// arguments (-e dry_run=false, say) from the ansible directory, as its
// README says, failing on a failed or unreachable host; it returns the
// output and the tasks changed in all.
func (f *Fleet) Playbook(args ...string) (string, int) {
	f.t.Helper()
	out, err := f.runPlaybook(f.inventory, args...)
	if err != nil {
		f.t.Fatalf("ansible-playbook %s: %v:\n%s", strings.Join(args, " "), err, tail(out, 60))
	}
	recap := playRecap.FindAllStringSubmatch(out, -1)
	if len(recap) == 0 {
		f.t.Fatalf("ansible-playbook %s: no play recap:\n%s", strings.Join(args, " "), tail(out, 60))
	}
	changed := 0
	for _, r := range recap {
		if r[4] != "0" || r[5] != "0" {
			f.t.Fatalf("ansible-playbook %s: %s unreachable or failed:\n%s", strings.Join(args, " "), r[1], tail(out, 60))
		}
		n, _ := strconv.Atoi(r[3])
		changed += n
	}
	return out, changed
}

// PlaybookRefused runs deploy.yml as Playbook does, with the fleet's
// inventory but each host of moved in the group it names, and requires
// it to fail; it returns the output.
func (f *Fleet) PlaybookRefused(moved map[string]string, args ...string) string {
	f.t.Helper()
	inventory, err := f.writeInventory(fmt.Sprintf("inventory-%d.json", f.runs+1), moved)
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := f.runPlaybook(inventory, args...)
	if err == nil {
		f.t.Fatalf("ansible-playbook -i %s %s: not refused:\n%s", inventory, strings.Join(args, " "), tail(out, 60))
	}
	return out
}

// runPlaybook runs ansible-playbook -i inventory deploy.yml args... and
// keeps its output in the fleet's logs.
func (f *Fleet) runPlaybook(inventory string, args ...string) (string, error) {
	f.runs++
	if f.k3s != "" {
		f.liveKubeconfig(f.adminKubeconfig())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ansible-playbook", append([]string{"-i", inventory, "deploy.yml"}, args...)...)
	cmd.Dir = filepath.Join(testhost.Root(), "ansible")
	// Every host at once (the default forks, 5, would run a fleet of six
	// in two rounds) and each module piped to its host's Python rather
	// than copied as a file first: how an operator speeds a run up,
	// changing nothing of what the playbook does.
	// The time of each task is in the run's log (logs/playbook-N.log),
	// with the slowest listed at its end (ansible.posix.profile_tasks).
	cmd.Env = append(os.Environ(), "ANSIBLE_NOCOLOR=1", "ANSIBLE_FORCE_COLOR=0", "PY_COLORS=0",
		"ANSIBLE_FORKS=10", "ANSIBLE_PIPELINING=True", "ANSIBLE_CALLBACKS_ENABLED=ansible.posix.profile_tasks")
	out, err := cmd.CombinedOutput()
	_ = os.WriteFile(filepath.Join(f.logs, fmt.Sprintf("playbook-%d.log", f.runs)), out, 0o644)
	return string(out), err
}

// playTask and playChanged read ansible-playbook's default output: a
// task's header, and a host it changed ("changed: [v1]", or
// "changed: [v1 -> localhost]" where delegated).
var (
	playTask    = regexp.MustCompile(`(?m)^TASK \[(.*)\] \**$`)
	playChanged = regexp.MustCompile(`^changed: \[([^\] ]+)`)
)

// changedTasks names each task a playbook run changed, as "host: task".
func changedTasks(out string) []string {
	var got []string
	task := ""
	for _, line := range strings.Split(out, "\n") {
		if m := playTask.FindStringSubmatch(line); m != nil {
			task = m[1]
		} else if m := playChanged.FindStringSubmatch(line); m != nil {
			got = append(got, m[1]+": "+task)
		}
	}
	return got
}

// roles are the hosts' roles on the cluster (fleet-role.io/role).
func (f *Fleet) roles() map[string]string {
	f.t.Helper()
	out := map[string]string{}
	for _, n := range f.Order {
		node, err := f.Client.CoreV1().Nodes().Get(context.Background(), n, metav1.GetOptions{})
		if err != nil {
			f.t.Fatal(err)
		}
		out[n] = node.Labels[api.LabelRole]
	}
	return out
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	if len(l) > lines {
		l = l[len(l)-lines:]
	}
	return strings.Join(l, "\n")
}

// ControllerDeployment reads the controller's Deployment.
func (f *Fleet) ControllerDeployment() *appsv1.Deployment {
	f.t.Helper()
	dep, err := f.Client.AppsV1().Deployments(api.Namespace).Get(context.Background(), controllerName, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return dep
}

// WaitRolledOut waits until the controller's Deployment reports its
// generation observed and every replica of its template available, and
// the stand-in runs only those, and returns them.
func (f *Fleet) WaitRolledOut(timeout time.Duration) []deployment.Replica {
	f.t.Helper()
	var reps []deployment.Replica
	f.Wait(timeout, "the controller's Deployment is rolled out", func() error {
		dep, err := f.Client.AppsV1().Deployments(api.Namespace).Get(context.Background(), controllerName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		want := *dep.Spec.Replicas
		s := dep.Status
		if s.ObservedGeneration != dep.Generation || s.Replicas != want || s.UpdatedReplicas != want || s.ReadyReplicas != want || s.AvailableReplicas != want {
			return fmt.Errorf("generation %d, observed %d: %d replicas, %d updated, %d ready, %d available of %d; the stand-in: %v",
				dep.Generation, s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.ReadyReplicas, s.AvailableReplicas, want, f.Controller.Err())
		}
		hash := deployment.TemplateHash(&dep.Spec.Template, s.CollisionCount)
		reps = f.Controller.Replicas()
		for _, r := range reps {
			if r.Hash != hash || !r.Ready {
				return fmt.Errorf("replica %s is of revision %s (the template's: %s), ready %t", r.Pod, r.Hash, hash, r.Ready)
			}
		}
		return nil
	})
	return reps
}

// keepLogs keeps, for a failed test, the playbook's runs, the
// controller's replicas' logs, each host's whole journal and the k3s
// containers' logs of the Docker hosts.
func (f *Fleet) keepLogs() {
	if t, ok := f.t.(interface{ Failed() bool }); !ok || !t.Failed() {
		return
	}
	if f.Controller != nil {
		for _, r := range f.Controller.Replicas() {
			_ = os.WriteFile(filepath.Join(f.logs, r.Pod+".log"), []byte(f.Controller.Logs(r.Pod)), 0o644)
		}
		for _, r := range f.Controller.Stopped() {
			_ = os.WriteFile(filepath.Join(f.logs, r.Pod+".log"), []byte(f.Controller.Logs(r.Pod)), 0o644)
		}
	}
	for _, n := range f.Order {
		h := f.Hosts[n]
		out, _ := h.exec("journalctl", "--no-pager", "-o", "short-precise")
		_ = os.WriteFile(filepath.Join(f.logs, n+".journal"), []byte(out), 0o644)
		if f.k3s != "" {
			// Real k3s's containerd logs to its data dir, which goes
			// with the test.
			if b, err := os.ReadFile(filepath.Join(h.dir, "data", "agent", "containerd", "containerd.log")); err == nil {
				_ = os.WriteFile(filepath.Join(f.logs, n+"-containerd.log"), b, 0o644)
			}
		}
		if h.Docker {
			for _, c := range []string{"k3s-server", "k3s-agent"} {
				out, _ := h.exec("docker", "logs", "--timestamps", c)
				_ = os.WriteFile(filepath.Join(f.logs, n+"-"+c+".log"), []byte(out), 0o644)
			}
		}
	}
	keep, err := os.MkdirTemp("", "fleet-role-e2e-logs")
	if err != nil {
		return
	}
	entries, _ := os.ReadDir(f.logs)
	for _, e := range entries {
		if b, err := os.ReadFile(filepath.Join(f.logs, e.Name())); err == nil {
			_ = os.WriteFile(filepath.Join(keep, e.Name()), b, 0o644)
		}
	}
	f.t.Logf("the playbook's output, the controller's logs and the hosts' journals are kept in %s", keep)
}

// Eligible says why a standby is not eligible for an automatic swap, as
// the controller sees it (a standby, Ready, schedulable, staged, with a
// fresh sample and a fit verdict); nil when it is.
func (f *Fleet) Eligible(name string) error {
	n, err := f.Client.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var p api.Probe
	_ = json.Unmarshal([]byte(n.Annotations[api.AnnotationProbe]), &p)
	v := f.Status().Verdicts[name]
	switch {
	case n.Labels[api.LabelRole] != api.RoleStandby:
		return fmt.Errorf("%s's role is %q", name, n.Labels[api.LabelRole])
	case !conditionTrue(n, corev1.NodeReady):
		return fmt.Errorf("%s is not Ready: %+v", name, n.Status.Conditions)
	case n.Spec.Unschedulable:
		return fmt.Errorf("%s is cordoned", name)
	case !p.Staged:
		return fmt.Errorf("%s's probe says it is not staged: %s", name, n.Annotations[api.AnnotationProbe])
	case v.State != api.VerdictFit:
		return fmt.Errorf("%s's verdict is %+v", name, v)
	}
	return nil
}

// Metrics reads the leading replica's /metrics ("" when none leads or
// answers): the replica the leader election's Lease names, by its Pod's
// name, which is its hostname.
func (f *Fleet) Metrics() string {
	ctx := context.Background()
	l, err := f.Client.CoordinationV1().Leases(api.Namespace).Get(ctx, controllerName, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	dep, err := f.Client.AppsV1().Deployments(api.Namespace).Get(ctx, controllerName, metav1.GetOptions{})
	if err != nil || len(dep.Spec.Template.Spec.Containers[0].Ports) == 0 {
		return ""
	}
	port := strconv.Itoa(int(dep.Spec.Template.Spec.Containers[0].Ports[0].ContainerPort))
	for _, r := range f.Controller.Replicas() {
		if strings.HasPrefix(*l.Spec.HolderIdentity, r.Pod+"-") && r.IP != "" {
			resp, err := http.Get("http://" + net.JoinHostPort(r.IP, port) + "/metrics")
			if err != nil {
				return ""
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return string(b)
		}
	}
	return ""
}

// waitServing waits until each of the servers serves the API on :6443,
// as the kubernetes EndpointSlice says: each lists itself there while it
// serves (tests/k3sdouble).
func (f *Fleet) waitServing(servers []string, timeout time.Duration) {
	f.t.Helper()
	f.Wait(timeout, "the servers serve the API", func() error {
		eps, err := serviceEndpoints(f.Client)
		if err != nil {
			return err
		}
		for _, s := range servers {
			if !slices.Contains(eps, net.JoinHostPort(s, "6443")) {
				return fmt.Errorf("the kubernetes Service lists %v, not %s", eps, s)
			}
		}
		return nil
	})
}
