// Command k3sdouble stands in for k3s on the simulated fleet's hosts
// (tests/e2e, make demo), since k3s itself cannot be installed here. It
// runs as `k3s server` (k3s.service, or the server container) and as
// `k3s agent` (k3s-agent.service, or the agent container), over a real
// etcd member (go.etcd.io/etcd/server/v3/embed) and the real
// kube-apiserver, and does what fleet-role relies on k3s to do around
// etcd, no more forgiving than k3s. Each behaviour, and where k3s does it
// (k3s-io/k3s unless said otherwise):
//
//   - Configuration. /etc/rancher/k3s/config.yaml (--config) and its
//     drop-ins config.yaml.d/*.yaml|*.yml, read in name order, a later
//     file's key replacing an earlier one's ("key+" appends); then the
//     flags given (--token-file), which win over the files' keys; then the
//     environment: a key of the files wins over its K3S_* variable
//     (`server:` over K3S_URL, `token:` over K3S_TOKEN), and a token file
//     (`token-file:`, K3S_TOKEN_FILE) replaces the token. Servers and
//     agents read the same file. k3s: pkg/configfilearg (parser.go),
//     readConfigFile and dotDFiles; the flags' EnvVar in pkg/cli/cmds;
//     pkg/cli/agent and pkg/cli/server, Run (TokenFile).
//   - Start of a server. With a datastore (server/db/etcd/member), the
//     member restarts from it, whatever the config says. Without one and
//     without `server:`, a cluster-init server starts a new cluster of
//     one. Without one but with `server:` (cluster-init or not), it joins
//     through that one URL: no token is "K3S_TOKEN is required to join a
//     cluster"; a server that does not answer fails the start at once
//     ("failed to get CA certs"), exit 1, for the unit (Restart=always,
//     RestartSec=5s) or the container to start it again. k3s:
//     pkg/cluster/bootstrap.go, shouldBootstrapLoad;
//     pkg/cluster/managed.go, assignManagedDriver; pkg/clientaccess
//     (token.go), ParseAndValidateTokenForUser and getCACerts;
//     pkg/etcd/etcd.go, (*ETCD).Start and newCluster. The double's
//     "answers" is the named server's etcd answering its status call.
//   - Join. First the joining server's critical settings (k3s's
//     CriticalControlArgs: cluster-cidr, service-cidr, cluster-domain,
//     flannel-backend, secrets-encryption, disable: servicelb, ...; k3s's
//     defaults where unset) are compared with those the named server
//     gives: any difference refuses the join ("failed to validate server
//     configuration: critical configuration value mismatch between
//     servers"), exit 1; a server that gives none is not compared. k3s:
//     pkg/cluster/bootstrap.go, bootstrap and compareConfig; the double
//     keeps a ready server's settings in etcd under its address. Then
//     the member list comes from the named server (k3s: its
//     /db/info; the double asks that server's etcd); a member with this
//     node's name but another suffix refuses the join with "duplicate
//     node name found, please use a unique name for this node" and the
//     name file removed; an unnamed member at this address is this one
//     (added before a crash: not added again); otherwise it adds itself as
//     a learner (MemberAddAsLearner) and starts with state "existing".
//     Retried every second while etcd answers "too many learner members"
//     or "unhealthy cluster" or the member list cannot be had; any other
//     error ends the start, exit 1. k3s: pkg/etcd/etcd.go, (*ETCD).join,
//     (*ETCD).Start's retry, ClientURLs.
//   - The token. A new cluster records its token's key,
//     /bootstrap/<12 hex of sha256(password)>, in etcd; a server finding
//     another token's key there stops ("bootstrap data already found and
//     encrypted with different token"). A joining server whose token's key
//     is not in the named server's etcd is refused ("…/v1-k3s/server-
//     bootstrap: 401 Unauthorized"), exit 1. k3s: pkg/cluster/encrypt.go,
//     storageKey and keyHash; pkg/cluster/storage.go, save and
//     getBootstrapKeyFromStorage; pkg/cluster/bootstrap.go, httpBootstrap.
//     An agent needs `server:`/K3S_URL ("--server is required") and a
//     token ("--token is required"), exit 1 (k3s: pkg/cli/agent, Run).
//   - Agent configuration and the node password. Before its kubelet runs,
//     a server or an agent retrieves its configuration: an agent from the
//     server it names (its token's key must be there), and both present
//     the node password kept in /etc/rancher/node/password (created, 0600,
//     on the first start). The servers keep its hash in the Secret
//     kube-system/<node>.node-password.k3s (created if missing); another
//     password for that node is refused ("Node password rejected,
//     duplicate hostname or contents of '/etc/rancher/node/password' may
//     not match server node-passwd entry, try enabling a unique node name
//     with the --with-node-id flag"). Until it succeeds it logs "Waiting
//     to retrieve agent configuration; server is not ready: …" and retries
//     every 5s, its kubelet not running: the Node gets no heartbeat. k3s:
//     pkg/agent/config/config.go, Get, getNodeNamedCrt and
//     ensureNodePassword; pkg/nodepassword, Ensure (nodepassword.go) and
//     GetNodeAuthValidator (validate.go).
//   - The member's name: the Node's name, "-" and 8 hex digits, kept in
//     server/db/etcd/name from before the join and reused on a restart.
//     k3s: (*ETCD).setName, called from Register.
//   - Readiness. k3s's apiserver talks to its own member, and a learner
//     serves no linearizable request, so a server is "ready" (its
//     apiserver and controllers run) only once its member votes; the unit
//     is Type=notify and k3s says READY=1 then. A file
//     <data-dir>/server/never-ready or --never-ready keeps the double from
//     ever becoming ready (an apiserver that never comes up). Only a ready
//     server writes its Node's metadata, records the token's key, takes
//     part in the leader-elected controllers and writes EtcdIsVoter; and
//     only while its member reaches a quorum (its apiserver answers) does
//     it hold or renew an election Lease and act under it: a server cut
//     off loses its leadership at the renew deadline. k3s:
//     pkg/cli/server, Run (SdNotify after APIServerReady and ETCDReady);
//     pkg/etcd/etcd.go, (*ETCD).Test ("this server has not yet been
//     promoted from learner to voting member"); pkg/server/server.go,
//     startup of the controllers. An agent says READY=1 once its
//     configuration is retrieved (pkg/agent/run.go, Run).
//   - The apiserver on <node-ip>:6443. A server listens there from its
//     start, before its etcd (k3s: pkg/cluster/cluster.go,
//     (*Cluster).Start, initClusterAndHTTPS first). Until its member
//     votes (it is not ready, or never will be) every request is answered
//     at once with 503 "apiserver not ready" and "Connection: close" (k3s:
//     pkg/server/handlers/handlers.go, APIServer; pkg/util/api.go,
//     SendError). While it serves (ready, its member reaching a quorum)
//     requests go through to the test's kube-apiserver with the client's
//     own credentials, over TLS with that kube-apiserver's serving
//     certificate and key (--serving-cert, --serving-key), which name
//     "kubernetes" as every k3s server's certificate does. Once ready,
//     k3s never stops its apiserver: while its member reaches no quorum
//     (or its etcd stopped under it) a request is held, and forwarded if
//     the server serves again, else failed with 500 "etcdserver: request
//     timed out" once etcd's request timeout passed (5 s and two election
//     timeouts; etcd: server/config, (*ServerConfig).ReqTimeout); every
//     request in flight, watches among them, is cut the moment it stops
//     serving (kubernetes: the apiserver's etcd watches require a leader,
//     staging/src/k8s.io/apiserver/pkg/storage/etcd3/watcher.go,
//     newWatchChan; etcd ends them after three election timeouts without
//     one, server/etcdserver/api/v3rpc/interceptor.go, monitorLeader; the
//     watch cache then ends its clients' watches,
//     storage/cacher/cacher.go, (*Cacher).startCaching). A stopped unit
//     takes its listener with it: connections are refused.
//   - The kubernetes Service's endpoints. Every ready server, every
//     --endpoint-reconciler-interval (10s) while it serves, refreshes its
//     lease in etcd (/registry/masterleases/<node-ip>, TTL
//     --endpoint-reconciler-ttl, 15s), lists the leases and makes the
//     Endpoints and the EndpointSlice default/kubernetes list exactly
//     those addresses at 6443 (ready, port "https"; the Endpoints
//     labelled skip-mirror), never none. A stopped server's lease is not
//     removed (kube-apiserver removes its own on a clean shutdown): its
//     address drops out once the lease expired. kubernetes:
//     pkg/controlplane/reconcilers/lease.go, ReconcileEndpoints and
//     doReconcile; endpointsadapter.go; pkg/controlplane,
//     DefaultEndpointReconcilerInterval and DefaultEndpointReconcilerTTL.
//   - Metadata. A ready server keeps etcd.k3s.cattle.io/node-name and
//     node-address and the labels etcd and control-plane (not master, as v1.36.3 shows) on its
//     own Node, rewriting them when they differ. k3s:
//     pkg/etcd/metadata_controller.go, metadataHandler.handleSelf.
//   - Promotion. The etcd leader asks etcd to promote each learner; etcd
//     refuses one not in sync. A learner whose raft index has not grown
//     for --learner-stall (k3s: 5 minutes, learnerMaxStallTime) is
//     removed; one with no client URL (its etcd never started) has no
//     index to grow. Each --learner-tick (k3s: 15s, manageTickerTime),
//     when EtcdIsVoter is written too. k3s: manageLearners and
//     trackLearnerProgress.
//   - EtcdIsVoter. The etcd leader, once ready, writes the condition on
//     the Nodes labelled node-role.kubernetes.io/etcd=true, matching a
//     member to the Node whose node-name annotation is the member's name:
//     True/MemberNotLearner, False/MemberIsLearner, False/Unhealthy (the
//     member's status call fails), and False/NotAMember for a labelled
//     Node no member matches; a member no Node matches is skipped; an
//     unchanged condition has its heartbeat renewed every 5 minutes. k3s:
//     pkg/etcd/etcd.go, manageLearners and setEtcdStatusCondition.
//   - The removal annotation. On the one ready server holding the Lease
//     kube-system/k3s-etcd (wrangler's leader election: 45s lease, 30s
//     renew deadline, 2s retry, released on a clean stop), for each Node
//     carrying the etcd role label and the remove annotation: node-name
//     and node-address are needed first (a missing one is an error,
//     retried, whatever else is there); with removed-node-name set, one
//     that differs from node-name has removed-node-name and remove both
//     dropped, the removal not made (to be asked again), else nothing;
//     with remove = "true" (any case), the member whose name is node-name
//     and whose peer host is node-address is removed (no such member is
//     success), leadership handed first to the first other voter if it
//     leads (none: etcd's "not enough started members", and remove is
//     dropped), then removed-node-name is set to node-name and remove,
//     node-name and node-address are dropped (k3s v1.34.2 on; before, a
//     removal made left remove, and node-name was not needed first).
//     k3s v1.36.3: pkg/etcd/member_controller.go, etcdMemberHandler.sync;
//     pkg/etcd/etcd.go, RemovePeer and moveLeader; pkg/server/server.go
//     and wrangler's pkg/leader, RunOrDie.
//   - A deleted Node. The same server puts the finalizer
//     wrangler.cattle.io/managed-etcd-controller on every Node; a Node
//     being deleted that carries the etcd role label has the member its
//     node-name and node-address name removed (both needed: without, an
//     error, retried, and the Node stays), unless removed-node-name is
//     set and not empty (removed already); then the finalizer is dropped
//     and the Node goes. k3s: pkg/etcd/member_controller.go,
//     registerMemberHandlers (nodes.OnRemove) and
//     (*etcdMemberHandler).onRemove; wrangler: pkg/generic/remove.go.
//     Fidelity: k3s does it on the Node's watch event, the double at its
//     next --period pass.
//   - The tombstone. A running server whose peers say its member was
//     removed (rafthttp's "the member has been permanently removed from
//     the cluster": it was removed while away, or a peer answered before
//     it applied its own removal) writes server/db/etcd/tombstone, closes
//     etcd and idles, its kubelet still running. One that applies its own
//     removal, or whose etcd stops otherwise, writes none: etcd stops
//     ("etcd server stopped") and the process idles. The double reads
//     which from etcd's log (removalCore: etcd 3.7 keeps the error on a
//     channel its own run loop reads). On the next start, a tombstone
//     moves server/db/etcd aside to server/db/etcd-backup-<unix> and the
//     server joins again as a new member, or, with no `server:`, the start
//     fails ("tombstone file has been detected but --server is empty").
//     k3s: StartETCD (pkg/executor/embed/etcd) on
//     rafthttp.ErrMemberRemoved; (*ETCD).Register and
//     backupDirWithRetention.
//   - The kubelet. Server and agent alike renew the Node's Lease in
//     kube-node-lease, set Ready=True while they beat, and delete the Pods
//     being deleted on their cordoned Node, as a kubelet does once their
//     containers stopped. A stopped unit beats no more, and a server's
//     kubelet beats only while its own apiserver would answer: once its
//     member votes (k3s starts the apiserver on ETCDReadyChan), while etcd
//     runs and the member reaches a quorum. k3s: pkg/cli/server, run;
//     pkg/agent/run.go (the kubelet through the server's apiserver).
//     At its first beat of a start the kubelet registers its Node, with
//     its own labels and k3s's node-labels, or finds it registered; k3s
//     then puts its node-labels back on it (kubeletRole.register).
//   - Images. k3s's containerd imports the archives of agent/images at
//     its start and as they change (imageStore; docs/k3s-fidelity.md,
//     row 25).
//   - Node lifecycle. On the one ready server holding the Lease
//     kube-system/kube-controller-manager (15s/10s/2s, its defaults), every
//     5s, a Node whose kube-node-lease renewTime is older than
//     --node-monitor-grace-period (default 50s, Kubernetes' default since
//     1.32) has Ready set to Unknown, reason NodeStatusUnknown, "Kubelet
//     stopped posting node status.". kubernetes: pkg/controller/
//     nodelifecycle, (*Controller).tryUpdateNodeHealth; the default in
//     pkg/controller/nodelifecycle/config/v1alpha1/defaults.go
//     (kubernetes PR 126287).
//   - Cluster reset. `k3s server --cluster-reset` (`cluster-reset:`,
//     K3S_CLUSTER_RESET), refused while a server URL is set ("cannot
//     perform cluster-reset while server URL is set - …"; k3s:
//     pkg/cli/server, run), with --cluster-reset-restore-path=<file>:
//     the file must exist and not be a directory ("etcd: snapshot path
//     does not exist: …"); server/db/etcd is moved to etcd-old-<unix>,
//     the snapshot restored with etcdutl as this member alone, a new
//     member name made, server/db/reset-flag written and etcd started
//     with ForceNewCluster; once the member is alone, "Managed etcd
//     cluster membership has been reset, restart without --cluster-reset
//     flag now. …", exit 0. Without a restore path a reset is refused
//     while reset-flag exists; a normal start removes it. k3s:
//     pkg/cluster/managed.go, (*Cluster).start; pkg/etcd/etcd.go,
//     (*ETCD).Reset, Restore and newCluster.
//   - etcd timing: election timeout 5000 ms, heartbeat 500 ms
//     (--election-ms, --heartbeat-ms). k3s: (*ETCD).cluster.
//
// Not copied (simpler than k3s):
//   - TLS between members and clients (plain http on the host's own
//     address), the supervisor on :6443 (the double asks the named
//     server's etcd in its place: a server whose k3s runs but whose etcd
//     has not started yet counts as not answering), the bootstrap data
//     itself (only its key is written), the K10 token's CA hash check.
//   - The apiservers' storage: one kube-apiserver of the test's, over an
//     etcd of its own, stands behind every server's :6443 (so the
//     Kubernetes objects are not in the fleet's etcd and a restore brings
//     none back). The double's own Kubernetes calls go to it directly,
//     through the admin kubeconfig; what its own apiserver would not
//     allow is modelled by the double holding back the writes above.
//     The supervisor's /v1-k3s/ paths, /cacerts, /ping; client
//     certificates (the proxy passes bearer tokens, which is what
//     fleet-role's clients present). Containers and networking: the
//     image store holds names only, and no container runs from it.
//   - The agent's load balancer: k3s's agent keeps the servers it has
//     seen (agent/etc/k3s-agent-load-balancer.json) and on a restart
//     tries them all; the double's agent tries only the server it names.
//   - The node password hash: scrypt with a salt, but not k3s's encoding
//     of it; a server's own password is checked like an agent's (k3s may
//     defer that check and only raise an Event).
//   - The learner manager's 15s tick for promotions (the double looks
//     every --period; it writes EtcdIsVoter at the 15s tick, as k3s),
//     its progress kept in etcd (the double keeps it in memory).
//   - Node lifecycle: only Ready goes Unknown (not the other conditions),
//     no unreachable taint, no eviction; the lease age is taken from
//     renewTime against the double's clock (one machine), not from when
//     the controller saw it change.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

type options struct {
	role              string
	nodeName          string
	nodeIP            string
	dataDir           string
	configFile        string
	tokenFile         string
	kubeconfig        string
	passwordFile      string
	period            time.Duration
	electionMs        uint
	heartbeatMs       uint
	learnerStall      time.Duration
	learnerTick       time.Duration
	neverReady        bool
	monitorGrace      time.Duration
	leaseDuration     time.Duration
	renewDeadline     time.Duration
	retryPeriod       time.Duration
	configRetryPeriod time.Duration
	clusterReset      bool
	restorePath       string
	servingCert       string
	servingKey        string
	endpointInterval  time.Duration
	endpointTTL       time.Duration
}

func main() {
	if len(os.Args) < 2 || (os.Args[1] != "server" && os.Args[1] != "agent") {
		fmt.Fprintln(os.Stderr, "usage: k3s server|agent [flags]")
		os.Exit(2)
	}
	o := options{role: os.Args[1]}
	fs := flag.NewFlagSet("k3s "+o.role, flag.ExitOnError)
	fs.StringVar(&o.nodeName, "node-name", "", "this host's Node")
	fs.StringVar(&o.nodeIP, "node-ip", "", "this host's address; etcd listens on :2379 and :2380 there")
	fs.StringVar(&o.dataDir, "data-dir", "/var/lib/rancher/k3s", "k3s's data dir")
	fs.StringVar(&o.configFile, "config", envOr("K3S_CONFIG_FILE", "/etc/rancher/k3s/config.yaml"), "k3s's config file; its drop-ins are in <file>.d")
	fs.StringVar(&o.tokenFile, "token-file", "", "a file holding the cluster's token (k3s: --token-file); wins over the config file's token-file:")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "/etc/k3s-double/kubeconfig", "the API server")
	fs.StringVar(&o.passwordFile, "node-password-file", "/etc/rancher/node/password", "the node password (k3s: /etc/rancher/node/password)")
	fs.DurationVar(&o.period, "period", 500*time.Millisecond, "how often the double looks at etcd and the Nodes")
	fs.UintVar(&o.electionMs, "election-ms", 5000, "etcd's election timeout (k3s: 5000)")
	fs.UintVar(&o.heartbeatMs, "heartbeat-ms", 500, "etcd's heartbeat interval (k3s: 500)")
	fs.DurationVar(&o.learnerStall, "learner-stall", 5*time.Minute, "how long a learner's raft index may stand still before the leader removes it")
	fs.DurationVar(&o.learnerTick, "learner-tick", manageTickerTime, "how often the etcd leader tries to promote each learner, tracks its progress and writes EtcdIsVoter (k3s: 15s)")
	fs.BoolVar(&o.neverReady, "never-ready", false, "never become ready, as a server whose apiserver never comes up (also: the file <data-dir>/server/never-ready)")
	fs.DurationVar(&o.monitorGrace, "node-monitor-grace-period", 50*time.Second, "how old a Node's heartbeat may be before its Ready turns Unknown")
	fs.DurationVar(&o.leaseDuration, "leader-lease-duration", 45*time.Second, "the k3s-etcd Lease's duration (wrangler: 45s)")
	fs.DurationVar(&o.renewDeadline, "leader-renew-deadline", 30*time.Second, "the k3s-etcd Lease's renew deadline (wrangler: 30s)")
	fs.DurationVar(&o.retryPeriod, "leader-retry-period", 2*time.Second, "the k3s-etcd Lease's retry period (wrangler: 2s)")
	fs.DurationVar(&o.configRetryPeriod, "config-retry-period", 5*time.Second, "how often the agent part retries retrieving its configuration (k3s: 5s)")
	fs.BoolVar(&o.clusterReset, "cluster-reset", false, "forget all peers and become the sole member of a new cluster, then exit (k3s: --cluster-reset)")
	fs.StringVar(&o.restorePath, "cluster-reset-restore-path", "", "the snapshot a cluster reset restores (k3s: --cluster-reset-restore-path)")
	fs.StringVar(&o.servingCert, "serving-cert", "/etc/k3s-double/apiserver.crt", "the serving certificate of the server's apiserver on <node-ip>:6443 (the test's kube-apiserver's own)")
	fs.StringVar(&o.servingKey, "serving-key", "/etc/k3s-double/apiserver.key", "its key")
	fs.DurationVar(&o.endpointInterval, "endpoint-reconciler-interval", 10*time.Second, "how often a serving server refreshes its lease and the kubernetes endpoints (kube-apiserver: 10s)")
	fs.DurationVar(&o.endpointTTL, "endpoint-reconciler-ttl", 15*time.Second, "the lease's TTL (kube-apiserver: 15s)")
	_ = fs.Parse(os.Args[2:])
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", o.nodeName, "role", o.role)
	if err := run(o, log); err != nil {
		log.Error("k3s double stopped", "err", err)
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func run(o options, log *slog.Logger) error {
	if o.nodeName == "" || o.nodeIP == "" {
		return errors.New("--node-name and --node-ip are required")
	}
	cli := map[string]string{}
	if o.tokenFile != "" {
		cli["token-file"] = o.tokenFile
	}
	if o.clusterReset {
		cli["cluster-reset"] = "true"
	}
	if o.restorePath != "" {
		cli["cluster-reset-restore-path"] = o.restorePath
	}
	cfg, err := loadConfig(o.configFile, cli, os.Getenv)
	if err != nil {
		return err
	}
	rc, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	// Note: the lease reconciler writes the deprecated Endpoints, as
	// kube-apiserver's own does, whose loopback client logs no warning.
	rc.WarningHandler = rest.NoWarnings{}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	k := &kubeletRole{c: kube, node: o.nodeName, log: log, labels: cfg.NodeLabels, images: newImageStore(o.dataDir, log.With("part", "containerd"))}
	if o.role == "agent" {
		if cfg.Server == "" {
			return errors.New("--server is required")
		}
		if cfg.Token == "" {
			return errors.New("--token is required")
		}
		log.Info("agent starting", "server", cfg.Server)
		if !retrieveConfig(ctx, o, log, func() error { return agentConfig(ctx, o, cfg, kube) }) {
			return nil
		}
		notifyReady(log)
		k.loop(ctx, o.period)
		return nil
	}
	if cfg.ClusterReset {
		return resetCluster(ctx, o, cfg, log)
	}
	// k3s's supervisor listens on :6443 before its datastore starts.
	target, transport, err := upstreamOf(rc)
	if err != nil {
		return err
	}
	api := newAPIProxy(target, transport, etcdRequestTimeout(o.electionMs), log.With("part", "apiserver"))
	if err := listenAPI(ctx, net.JoinHostPort(o.nodeIP, strconv.Itoa(apiPort)), o.servingCert, o.servingKey, api, log); err != nil {
		return err
	}
	s, err := startServer(ctx, o, cfg, kube, log)
	if err != nil {
		return err
	}
	defer s.close()
	s.api = api
	k.serves = s.serves
	go func() {
		if retrieveConfig(ctx, o, log, func() error { return ensureNodePassword(ctx, kube, o) }) {
			k.loop(ctx, o.period)
		}
	}()
	return s.loop(ctx)
}

// retrieveConfig calls get until it succeeds, every --config-retry-period,
// as k3s's agent retrieves its configuration (pkg/agent/config, Get). It
// says false when ctx ended first.
func retrieveConfig(ctx context.Context, o options, log *slog.Logger, get func() error) bool {
	for {
		err := get()
		if err == nil {
			return true
		}
		log.Info("Waiting to retrieve agent configuration; server is not ready", "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(o.configRetryPeriod):
		}
	}
}
