package config

import (
	"bytes"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/fleet-role/fleet-role/api"
)

// Platforms the agent can drive.
const (
	PlatformSystemd = "systemd"
	PlatformDocker  = "docker"
)

// Agent is the configuration of `fleet-role agent`, the host daemon.
type Agent struct {
	// Version is the format of the file, which this build reads: 1. A
	// file must state it.
	Version int `toml:"version"`
	// NodeName is this host's Kubernetes Node; required.
	NodeName string `toml:"node_name"`
	// Platform is how k3s runs here: "systemd" or "docker".
	Platform string `toml:"platform"`
	// DataDir is k3s's data dir (server/db/etcd lives under it).
	DataDir string `toml:"data_dir"`
	// RoleFile holds one word, server or agent.
	RoleFile string `toml:"role_file"`
	// StateDir keeps what must survive a restart: pending reports, the
	// requests handled, the units' recorded starts.
	StateDir string `toml:"state_dir"`
	// Kubeconfig to reach the API server; empty means in-cluster.
	Kubeconfig string `toml:"kubeconfig"`
	// FollowServers: the agent reaches the API through any live server,
	// not only the kubeconfig's: the servers of the inventory, then those
	// the `kubernetes` EndpointSlice lists, each checked (/readyz every
	// 2 s), the healthiest first, never this host's own (a host's k3s
	// goes with its etcd member). Off, the kubeconfig's server is used as
	// given: a fixed registration address in front of every server.
	FollowServers bool `toml:"follow_servers"`
	// TokenFile is the ServiceAccount token the kubeconfig reads (its
	// user's tokenFile). The agent renews it by a TokenRequest for its own
	// ServiceAccount once half its lifetime has passed, and rewrites the
	// file atomically; client-go reads the file again within a minute.
	// Empty: the kubeconfig's credentials are left alone.
	TokenFile string `toml:"token_file"`
	// ProbePeriod is how often the host is sampled.
	ProbePeriod time.Duration `toml:"probe_period"`
	// ResyncPeriod is how often the agent re-reads everything, whatever
	// it was told: the source of truth behind the watches.
	ResyncPeriod time.Duration `toml:"resync_period"`
	// Debounce gathers a burst of file events into one look.
	Debounce time.Duration `toml:"debounce"`
	// StagedFiles must all exist for the host to count as staged to
	// become a server (with the server unit installed).
	StagedFiles []string `toml:"staged_files"`
	// JoinFile is the k3s config drop-in in which the agent writes, before
	// it starts a server that has no datastore, the `server:` that server
	// joins through: a live voter. k3s merges config.yaml.d/*.yaml over
	// config.yaml, so the config.yaml Ansible renders stays unchanged. It
	// must be a .yaml or .yml file in the drop-in directory of k3s's
	// config file (<file>.d), the only place k3s reads drop-ins from; the
	// agent reads k3s's settings from that config file and its drop-ins:
	// https-listen-port, the port of the `server:` it writes and of the
	// servers' apiservers, which the fleet's servers share, and the
	// addresses this host's apiserver is advertised by (node-ip,
	// node-external-ip, advertise-address), never dialled.
	JoinFile string `toml:"join_file"`
	// KeepRemoved is how many moved-aside datastores (db/etcd-removed-*)
	// to keep.
	KeepRemoved int `toml:"keep_removed"`
	// ListenAddress serves the agent's /metrics and /healthz, host:port;
	// empty serves nothing.
	ListenAddress string `toml:"listen_address"`
	// KeepSnapshots is how many of its own etcd snapshots
	// (server/db/snapshots/fleet-role-*) the agent keeps; the newest is
	// never removed, and k3s's own snapshots are never touched.
	KeepSnapshots int `toml:"keep_snapshots"`
	// SnapshotCopyDir is a directory off the host (an NFS or other
	// mount) where the agent copies each snapshot it takes, keeping as
	// many there as KeepSnapshots; a snapshot is reported only once its
	// copy is whole. It must exist: the agent never creates it, so that
	// a mount that is missing fails the snapshot rather than filling the
	// host's own disk. Empty: no copy.
	SnapshotCopyDir string `toml:"snapshot_copy_dir"`
	// Servers is the inventory of servers, in order; at least one is
	// required. A promoted host's server joins through the first other
	// server that is a live voter; a demoted host's agent joins the first
	// other server that is a current voter (else the first other one).
	Servers []Server `toml:"servers"`
	Probe   Probe    `toml:"probe"`
	Etcd    Etcd     `toml:"etcd"`
	Systemd Systemd  `toml:"systemd"`
	Docker  Docker   `toml:"docker"`
}

// Server is one server of the inventory.
type Server struct {
	// Name is the server's Kubernetes Node; required, and listed once.
	Name string `toml:"name"`
	// Address is the server's IP address or host name; required. A host
	// joins the server at https://<address>:<port>, the port being the
	// https-listen-port of the host's own k3s configuration (6443 unless
	// set; see join_file): the fleet's servers share one.
	Address string `toml:"address"`
}

// K3sConfigFile is k3s's config file whose drop-in directory holds the
// join file: the join file's directory less its ".d" (k3s-io/k3s
// pkg/configfilearg/parser.go, dotDFiles: the drop-ins of a config file
// are in <file>.d).
func (a Agent) K3sConfigFile() string {
	return strings.TrimSuffix(filepath.Dir(a.JoinFile), ".d")
}

// K3sServerArgs are the flags of k3s's server command line the agent
// knows: a Docker host's server_args; none on a systemd host, whose
// unit's are not read.
func (a Agent) K3sServerArgs() []string {
	if a.Platform != PlatformDocker {
		return nil
	}
	return a.Docker.ServerArgs
}

// Probe is how the host samples its own health every probe period: small
// writes each followed by fdatasync in the data dir (as etcd's WAL does),
// and on a server the member list, the status and a timed linearizable
// read through its etcd.
type Probe struct {
	// FsyncLimit is deprecated and ignored: the controller's verdicts
	// set every fitness limit in one place (verdicts.fsync_limit for the
	// probe's writes, verdicts.wal_fsync_p99_limit and
	// verdicts.backend_commit_p99_limit for a voter's etcd). A file that
	// sets it still loads; Deprecated says so, and the agent warns.
	FsyncLimit time.Duration `toml:"fsync_limit"`
	// ReadLimit: a sample whose timed read through etcd (on a server) took
	// longer is not healthy.
	ReadLimit time.Duration `toml:"read_limit"`
	// Writes is the small writes, each followed by fdatasync, a sample
	// makes: from 1 to 100.
	Writes int `toml:"writes"`
	// History is how many of the last writes the fsync p99 is over: no
	// fewer than a sample makes.
	History int `toml:"history"`
}

// Etcd is how the agent reaches its host's etcd member, for snapshots,
// leadership moves and the probe.
type Etcd struct {
	// Endpoint is the member's client URL, http:// or https://.
	Endpoint string `toml:"endpoint"`
	// CAFile is the CA certificate the member's certificate is checked
	// against.
	CAFile string `toml:"ca_file"`
	// CertFile is the client certificate the agent presents.
	CertFile string `toml:"cert_file"`
	// KeyFile is the client certificate's key.
	KeyFile string `toml:"key_file"`
	// Timeout bounds each call to the member but a snapshot.
	Timeout time.Duration `toml:"timeout"`
}

// Systemd is the systemd platform's section, read with platform =
// "systemd": the units, through systemd's D-Bus API.
type Systemd struct {
	// ServerUnit is k3s's server unit.
	ServerUnit string `toml:"server_unit"`
	// AgentUnit is k3s's agent unit, other than ServerUnit.
	AgentUnit string `toml:"agent_unit"`
	// AgentEnvFile is the agent unit's EnvironmentFile, where K3S_URL is
	// set before the agent unit starts (other lines are kept).
	AgentEnvFile string `toml:"agent_env_file"`
	// Bus is the D-Bus address; empty means the system bus.
	Bus string `toml:"bus"`
	// JobTimeout bounds a start or stop job.
	JobTimeout time.Duration `toml:"job_timeout"`
}

// Docker is the Docker platform's section, read with platform = "docker":
// a server and an agent container sharing the data directory, through the
// Docker API.
type Docker struct {
	// Host is the Docker daemon's address; empty means DOCKER_HOST or the
	// local socket.
	Host string `toml:"host"`
	// Image is the k3s image, loaded on the host; required with platform
	// = "docker".
	Image string `toml:"image"`
	// ServerContainer is the name of k3s's server container.
	ServerContainer string `toml:"server_container"`
	// AgentContainer is the name of k3s's agent container, other than
	// ServerContainer.
	AgentContainer string `toml:"agent_container"`
	// ServerArgs is the server container's command: the arguments after
	// the image, as docker run takes them.
	ServerArgs []string `toml:"server_args"`
	// AgentArgs is the agent container's command.
	AgentArgs []string `toml:"agent_args"`
	// Volumes as "source:target[:options]"; the data directory is shared
	// by the server and the agent container, and bound from the host's own
	// data_dir, where the agent sees k3s's datastore and tombstone and
	// moves the datastore aside (a named volume would hide them).
	Volumes []string `toml:"volumes"`
	// Network is both containers' network mode, as docker run's
	// --network.
	Network string `toml:"network"`
	// Env is given to both containers as NAME=value; the agent's also gets
	// K3S_URL. Never the token (K3S_TOKEN), which docker inspect would
	// show: mount a 0600 token file read-only and pass --token-file.
	Env []string `toml:"env"`
	// Privileged runs both containers privileged.
	Privileged bool `toml:"privileged"`
	// CapAdd is the capabilities both containers are given.
	CapAdd []string `toml:"cap_add"`
	// CapDrop is the capabilities both containers are denied.
	CapDrop []string `toml:"cap_drop"`
	// SecurityOpt is both containers' security options, as docker run's
	// --security-opt.
	SecurityOpt []string `toml:"security_opt"`
	// Tmpfs is the tmpfs mounts of both containers, as "path[:options]".
	Tmpfs []string `toml:"tmpfs"`
	// StopTimeout is how long a container is given to stop before it is
	// killed.
	StopTimeout time.Duration `toml:"stop_timeout"`
}

// DefaultAgent returns the agent configuration used where a file is silent.
func DefaultAgent() Agent {
	return Agent{
		Version:       Version,
		Platform:      PlatformSystemd,
		DataDir:       "/var/lib/rancher/k3s",
		RoleFile:      "/var/lib/fleet-role/role",
		StateDir:      "/var/lib/fleet-role",
		Kubeconfig:    "/etc/fleet-role/kubeconfig",
		FollowServers: true,
		TokenFile:     "/var/lib/fleet-role/token",
		ProbePeriod:   time.Minute,
		ResyncPeriod:  30 * time.Second,
		Debounce:      20 * time.Millisecond,
		StagedFiles:   []string{"/etc/rancher/k3s/config.yaml"},
		JoinFile:      "/etc/rancher/k3s/config.yaml.d/90-fleet-role.yaml",
		KeepRemoved:   3,
		KeepSnapshots: 5,
		Probe:         Probe{ReadLimit: 100 * time.Millisecond, Writes: 5, History: 100},
		Etcd: Etcd{
			Endpoint: "https://127.0.0.1:2379",
			CAFile:   api.K3sEtcdCA,
			CertFile: api.K3sEtcdCert,
			KeyFile:  api.K3sEtcdKey,
			Timeout:  5 * time.Second,
		},
		Systemd: Systemd{
			ServerUnit:   "k3s.service",
			AgentUnit:    "k3s-agent.service",
			AgentEnvFile: "/etc/systemd/system/k3s-agent.service.env",
			JobTimeout:   5 * time.Minute,
		},
		Docker: Docker{
			ServerContainer: "k3s-server",
			AgentContainer:  "k3s-agent",
			ServerArgs:      []string{"server"},
			AgentArgs:       []string{"agent"},
			Volumes:         []string{"/var/lib/rancher/k3s:/var/lib/rancher/k3s"},
			Network:         "host",
			Env:             []string{},
			Privileged:      true,
			CapAdd:          []string{},
			CapDrop:         []string{},
			SecurityOpt:     []string{},
			Tmpfs:           []string{},
			StopTimeout:     30 * time.Second,
		},
	}
}

// LoadAgent reads, strictly decodes and validates an agent configuration
// file. Errors wrap ErrInvalid and name the key.
func LoadAgent(path string) (Agent, error) {
	data, err := ReadFile(path)
	if err != nil {
		return Agent{}, err
	}
	return ParseAgent(data)
}

// ParseAgent strictly decodes and validates an agent configuration.
func ParseAgent(data []byte) (Agent, error) {
	a := DefaultAgent()
	a.Version = 0
	if err := decodeStrict(data, &a); err != nil {
		return Agent{}, err
	}
	if err := a.Validate(); err != nil {
		return Agent{}, err
	}
	return a, nil
}

// Deprecated names the keys set that are deprecated, each with what
// replaces it: the agent warns of each as it starts.
func (a Agent) Deprecated() []string {
	var d []string
	if a.Probe.FsyncLimit != 0 {
		d = append(d, "probe.fsync_limit is ignored: the controller's verdicts.fsync_limit judges the probe's writes, "+
			"verdicts.wal_fsync_p99_limit and verdicts.backend_commit_p99_limit a voter's etcd")
	}
	return d
}

// Validate reports every problem at once, each naming its key.
func (a Agent) Validate() error {
	var p problems
	if a.Version != Version {
		p.add("version", "must be %d, got %d", Version, a.Version)
	}
	if a.NodeName == "" {
		p.add("node_name", "is required")
	}
	absolute(&p, "data_dir", a.DataDir)
	absolute(&p, "role_file", a.RoleFile)
	absolute(&p, "state_dir", a.StateDir)
	if a.Kubeconfig != "" {
		absolute(&p, "kubeconfig", a.Kubeconfig)
	}
	if a.TokenFile != "" {
		absolute(&p, "token_file", a.TokenFile)
	}
	for i, f := range a.StagedFiles {
		absolute(&p, fmt.Sprintf("staged_files[%d]", i), f)
	}
	absolute(&p, "join_file", a.JoinFile)
	if name := strings.ToLower(filepath.Base(a.JoinFile)); !strings.HasSuffix(filepath.Dir(a.JoinFile), ".d") ||
		!(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
		p.add("join_file", "%q is not a .yaml file in the drop-in directory (<config file>.d) of k3s's config file, "+
			"where alone k3s reads drop-ins", a.JoinFile)
	}
	if a.SnapshotCopyDir != "" {
		absolute(&p, "snapshot_copy_dir", a.SnapshotCopyDir)
	}
	if _, _, err := net.SplitHostPort(a.ListenAddress); err != nil && a.ListenAddress != "" {
		p.add("listen_address", "%q is not host:port: %v", a.ListenAddress, err)
	}
	positive(&p, "probe_period", a.ProbePeriod)
	positive(&p, "resync_period", a.ResyncPeriod)
	if a.Debounce < 0 || a.Debounce > time.Second {
		p.add("debounce", "must be between 0s and 1s, got %s", a.Debounce)
	}
	if a.KeepRemoved < 1 {
		p.add("keep_removed", "must be at least 1, got %d", a.KeepRemoved)
	}
	if a.KeepSnapshots < 1 {
		p.add("keep_snapshots", "must be at least 1, got %d", a.KeepSnapshots)
	}
	if len(a.Servers) == 0 {
		p.add("servers", "at least one server is required")
	}
	seen := map[string]bool{}
	for i, s := range a.Servers {
		key := fmt.Sprintf("servers[%d]", i)
		if s.Name == "" {
			p.add(key+".name", "is required")
		} else if seen[s.Name] {
			p.add(key+".name", "%q is listed twice", s.Name)
		}
		seen[s.Name] = true
		if s.Address == "" {
			p.add(key+".address", "is required")
		} else if net.ParseIP(s.Address) == nil && strings.ContainsAny(s.Address, ":/ ") {
			p.add(key+".address", "%q is neither an IP address nor a host name", s.Address)
		}
	}
	positive(&p, "probe.read_limit", a.Probe.ReadLimit)
	if a.Probe.Writes < 1 || a.Probe.Writes > 100 {
		p.add("probe.writes", "must be between 1 and 100, got %d", a.Probe.Writes)
	}
	if a.Probe.History < a.Probe.Writes {
		p.add("probe.history", "must be at least probe.writes (%d), got %d", a.Probe.Writes, a.Probe.History)
	}
	if !strings.HasPrefix(a.Etcd.Endpoint, "https://") && !strings.HasPrefix(a.Etcd.Endpoint, "http://") {
		p.add("etcd.endpoint", "%q must be an http:// or https:// URL", a.Etcd.Endpoint)
	}
	positive(&p, "etcd.timeout", a.Etcd.Timeout)
	switch a.Platform {
	case PlatformSystemd:
		s := a.Systemd
		unit(&p, "systemd.server_unit", s.ServerUnit)
		unit(&p, "systemd.agent_unit", s.AgentUnit)
		if s.ServerUnit == s.AgentUnit && s.ServerUnit != "" {
			p.add("systemd.agent_unit", "must differ from systemd.server_unit")
		}
		absolute(&p, "systemd.agent_env_file", s.AgentEnvFile)
		positive(&p, "systemd.job_timeout", s.JobTimeout)
	case PlatformDocker:
		d := a.Docker
		if d.Image == "" {
			p.add("docker.image", "is required with platform = %q", PlatformDocker)
		}
		if d.ServerContainer == "" {
			p.add("docker.server_container", "is required")
		}
		if d.AgentContainer == "" || d.AgentContainer == d.ServerContainer {
			p.add("docker.agent_container", "is required and must differ from docker.server_container")
		}
		for i, v := range d.Volumes {
			if parts := strings.Split(v, ":"); len(parts) < 2 || parts[0] == "" || !filepath.IsAbs(parts[1]) {
				p.add(fmt.Sprintf("docker.volumes[%d]", i), "%q is not source:/target[:options]", v)
			}
		}
		for i, arg := range d.ServerArgs {
			if k := k3sConfigFlag(arg); k != "" {
				p.add(fmt.Sprintf("docker.server_args[%d]", i), "%s moves k3s's config file away from the one whose drop-ins hold join_file, which the agent reads", k)
			}
		}
		for i, e := range d.Env {
			if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
				p.add(fmt.Sprintf("docker.env[%d]", i), "%q is not NAME=value", e)
			} else if k == "K3S_CONFIG_FILE" {
				p.add(fmt.Sprintf("docker.env[%d]", i), "K3S_CONFIG_FILE moves k3s's config file away from the one whose drop-ins hold join_file, which the agent reads")
			} else if k == "K3S_URL" {
				p.add(fmt.Sprintf("docker.env[%d]", i), "K3S_URL is set by the agent from the inventory")
			} else if k == "K3S_TOKEN" || k == "K3S_AGENT_TOKEN" {
				p.add(fmt.Sprintf("docker.env[%d]", i), "%s would show in `docker inspect`: give the token as a 0600 file mounted read-only and pass it with --token-file", k)
			}
		}
		positive(&p, "docker.stop_timeout", d.StopTimeout)
	default:
		p.add("platform", "must be %q or %q, got %q", PlatformSystemd, PlatformDocker, a.Platform)
	}
	return p.err()
}

// k3sConfigFlag says "--config" where arg is k3s's --config (or -c),
// which names another config file than the one the agent reads (k3s-io/k3s
// pkg/configfilearg/parser.go, Parse); "" for any other. urfave/cli takes
// a flag with one dash or two, its value after "=" or as the next
// argument. The flags the agent reads from k3s's config it reads from
// server_args too (daemon/k3sconfig, Read).
func k3sConfigFlag(arg string) string {
	name, ok := strings.CutPrefix(arg, "-")
	if !ok {
		return ""
	}
	name, _, _ = strings.Cut(strings.TrimPrefix(name, "-"), "=")
	if name == "config" || name == "c" {
		return "--config"
	}
	return ""
}

func absolute(p *problems, key, path string) {
	if !filepath.IsAbs(path) {
		p.add(key, "must be an absolute path, got %q", path)
	}
}

func unit(p *problems, key, name string) {
	if name == "" || strings.ContainsAny(name, "/ ") || !slices.ContainsFunc([]string{".service", ".target"}, func(s string) bool { return strings.HasSuffix(name, s) }) {
		p.add(key, "%q is not a systemd unit name such as k3s.service", name)
	}
}

var agentTemplate = template.Must(template.New("agent").Funcs(template.FuncMap{"d": FormatDuration, "q": quoteList}).Parse(
	`# fleet-role agent configuration (/etc/fleet-role/agent.toml).
# The values below are the defaults, but for node_name and [[servers]],
# which Ansible renders from the inventory. Durations are strings: "90s".

# The format of this file.
version = {{.Version}}

# This host's Kubernetes Node.
node_name = "runner-01"

# How k3s runs on this host: "systemd" (k3s.service, k3s-agent.service)
# or "docker" (a server and an agent container sharing a data volume).
platform = "{{.Platform}}"

# k3s's data dir; the agent watches server/db/etcd under it for k3s's
# tombstone and moves a removed member's datastore aside.
data_dir = "{{.DataDir}}"

# One word, server or agent: the role this host is to have. Written
# atomically by the agent; a hand edit is acted on.
role_file = "{{.RoleFile}}"

# What survives a restart: reports not yet delivered, requests handled,
# the units' recorded starts.
state_dir = "{{.StateDir}}"

# How to reach the API server; "" means the in-cluster configuration.
# Ansible writes it with the server address that stays up while this
# host's k3s is stopped, and the token file below as its credentials.
kubeconfig = "{{.Kubeconfig}}"

# Reach the API through any live server, not only the kubeconfig's: the
# servers below, then those the kubernetes EndpointSlice lists, the one
# that answered last first, never this host's own (a host's k3s goes with
# its etcd member). false: the kubeconfig's server as given, for a fixed
# registration address in front of every server.
follow_servers = {{.FollowServers}}

# The ServiceAccount token the kubeconfig reads (its tokenFile). The agent
# renews it once half its lifetime has passed, by a TokenRequest for its
# own ServiceAccount, and rewrites it atomically; "" leaves the
# kubeconfig's credentials alone.
token_file = "{{.TokenFile}}"

# How often the host's health is sampled into fleet-role.io/probe.
probe_period = "{{d .ProbePeriod}}"

# How often everything is read again, whatever the watches said.
resync_period = "{{d .ResyncPeriod}}"

# A burst of file events within this time is looked at once.
debounce = "{{d .Debounce}}"

# The host is staged to become a server when all these files exist and
# the server unit (or image) is installed.
staged_files = {{q .StagedFiles}}

# The k3s config drop-in where the agent writes, before a server with no
# datastore starts, the server: it joins through (a live voter). It lies in
# the drop-in directory of k3s's config file (<file>.d), from which, with
# its drop-ins, the agent reads k3s's https-listen-port (the port of every
# server: it writes and of the servers' apiservers; 6443 unless set) and
# the addresses this host's apiserver is advertised by.
join_file = "{{.JoinFile}}"

# How many moved-aside datastores (server/db/etcd-removed-<unix>) to keep.
keep_removed = {{.KeepRemoved}}

# How many of its own etcd snapshots (server/db/snapshots/fleet-role-<swap>-
# <unix>, taken before each swap) to keep; the newest is never removed and
# k3s's own snapshots in that directory are never touched.
keep_snapshots = {{.KeepSnapshots}}

# A directory off this host (an NFS or other mount; better a directory
# inside it, for each host its own, which exists only while the mount is
# there) where each snapshot is copied, keeping as many as keep_snapshots.
# A snapshot is reported only once its copy is whole. The agent never
# creates it. "" makes no copy.
snapshot_copy_dir = "{{.SnapshotCopyDir}}"

# Serves the agent's /metrics (Prometheus) and /healthz, host:port; empty
# serves nothing. The Ansible role sets ":9091".
listen_address = "{{.ListenAddress}}"

# The servers of the inventory, in order. A demoted host's agent joins the
# first other server that is a current voter (else the first other one),
# at the https-listen-port of this host's k3s configuration.
[[servers]]
name = "runner-01"
address = "10.0.0.1"

[[servers]]
name = "runner-02"
address = "10.0.0.2"

[[servers]]
name = "runner-03"
address = "10.0.0.3"

# The probe: every probe_period, small writes each followed by fdatasync in
# data_dir (as etcd's WAL does), and on a server the member list, the
# status and a timed linearizable read through its etcd.
[probe]
# A sample whose read is over read_limit is not healthy. The disk's limits
# are the controller's (its [verdicts]); fsync_limit here is deprecated and
# ignored.
read_limit = "{{d .Probe.ReadLimit}}"
# Writes a sample makes; its fsync p99 is over the last history of them.
writes = {{.Probe.Writes}}
history = {{.Probe.History}}

# This host's etcd member, for snapshots, leadership moves and the probe.
[etcd]
endpoint = "{{.Etcd.Endpoint}}"
ca_file = "{{.Etcd.CAFile}}"
cert_file = "{{.Etcd.CertFile}}"
key_file = "{{.Etcd.KeyFile}}"
timeout = "{{d .Etcd.Timeout}}"

# platform = "systemd": the units, through systemd's D-Bus API.
[systemd]
server_unit = "{{.Systemd.ServerUnit}}"
agent_unit = "{{.Systemd.AgentUnit}}"
# The agent unit's EnvironmentFile; K3S_URL is set in it before a start.
agent_env_file = "{{.Systemd.AgentEnvFile}}"
# The D-Bus address; "" means the system bus.
bus = "{{.Systemd.Bus}}"
job_timeout = "{{d .Systemd.JobTimeout}}"

# platform = "docker": the containers, through the Docker API.
[docker]
# The Docker daemon; "" means DOCKER_HOST or the local socket.
host = "{{.Docker.Host}}"
# The k3s image, loaded on the host (required with platform = "docker").
image = "{{.Docker.Image}}"
server_container = "{{.Docker.ServerContainer}}"
agent_container = "{{.Docker.AgentContainer}}"
server_args = {{q .Docker.ServerArgs}}
agent_args = {{q .Docker.AgentArgs}}
# source:target[:options]; the data volume is shared by both containers.
volumes = {{q .Docker.Volumes}}
network = "{{.Docker.Network}}"
# Given to both containers; the agent's also gets K3S_URL. Never the
# token (K3S_TOKEN), which docker inspect would show: mount a 0600 token
# file read-only (volumes) and pass --token-file in the args.
env = {{q .Docker.Env}}
privileged = {{.Docker.Privileged}}
cap_add = {{q .Docker.CapAdd}}
cap_drop = {{q .Docker.CapDrop}}
security_opt = {{q .Docker.SecurityOpt}}
tmpfs = {{q .Docker.Tmpfs}}
stop_timeout = "{{d .Docker.StopTimeout}}"
`))

// DefaultAgentTOML is the commented default agent configuration, with an
// example node and inventory.
func DefaultAgentTOML() []byte {
	var b bytes.Buffer
	if err := agentTemplate.Execute(&b, DefaultAgent()); err != nil {
		panic(fmt.Sprintf("render the default agent configuration: %v", err))
	}
	return b.Bytes()
}

func quoteList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// Kind says which configuration a file holds, by the keys only one of
// them has; "" when it cannot tell.
func Kind(data []byte) string {
	var probe map[string]any
	if err := decodeLoose(data, &probe); err != nil {
		return ""
	}
	if _, ok := probe["node_name"]; ok {
		return "agent"
	}
	for _, k := range []string{"platform", "servers", "role_file", "systemd", "docker"} {
		if _, ok := probe[k]; ok {
			return "agent"
		}
	}
	return "controller"
}
