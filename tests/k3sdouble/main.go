// Command k3sdouble stands in for k3s on the simulated fleet's hosts
// (tests/e2e, make demo), since k3s itself cannot be installed here. It
// runs as `k3s server` (k3s.service, or the server container) and as
// `k3s agent` (k3s-agent.service, or the agent container), over a real
// etcd member (go.etcd.io/etcd/server/v3/embed) and the real
// kube-apiserver, and does what fleet-role relies on k3s to do around
// etcd. Each behaviour, and where k3s does it (k3s-io/k3s):
//
//   - Join. A server with no datastore adds itself to the cluster of the
//     server it is given as a learner (MemberAddAsLearner), retrying every
//     second while etcd refuses a second learner, then starts its member
//     with state "existing"; with no server to join, a cluster-init server
//     starts a cluster of one. k3s: pkg/etcd/etcd.go, (*ETCD).Start, join
//     and newCluster. k3s joins through its one `server:` URL, usually a
//     fixed registration address in front of every server; the double has
//     none and tries that URL, then each server of --join, in turn, and a
//     cluster-init server starts a cluster only when none of them answers.
//   - The member's name: the Node's name, "-" and 8 hex digits, kept in
//     server/db/etcd/name and reused on a restart. k3s: (*ETCD).setName.
//   - Promotion. The leader asks etcd to promote every learner each
//     period; etcd refuses a learner not yet in sync with the leader.
//     k3s: manageLearners and trackLearnerProgress (every 15s there; the
//     double looks every --period). One learner at a time is etcd's own
//     limit. A learner whose raft index (its status) has not grown for
//     --learner-stall (k3s: 5 minutes, learnerMaxStallTime) is removed.
//   - EtcdIsVoter. The leader writes the condition on every Node that
//     carries the etcd role label or a member name: True/MemberNotLearner
//     for a voter, False/MemberIsLearner for a learner, False/Unhealthy
//     when the member's status call fails, False/NotAMember when no
//     member is the Node's. k3s: setEtcdStatusCondition, from
//     manageLearners.
//   - The removal annotation. A server acts on etcd.k3s.cattle.io/remove
//     = "true": it removes the member named by etcd.k3s.cattle.io/node-name
//     (matched by peer address for a learner that never started), then
//     sets removed-node-name to that name and drops node-name and
//     node-address. k3s: pkg/etcd/member_controller.go,
//     etcdMemberHandler.sync and RemovePeer. k3s runs that controller on
//     its one leader-elected server; the double runs it on every server
//     but the one whose Node it is, so a removal never depends on the
//     member being removed.
//   - The tombstone. A running server whose member was removed writes
//     server/db/etcd/tombstone, closes etcd and idles, its kubelet still
//     running. On the next start it moves server/db/etcd aside to
//     server/db/etcd-backup-<unix> and joins again as a new member. k3s:
//     StartETCD (pkg/executor/embed/etcd) on ErrMemberRemoved, and
//     (*ETCD).Register's backupDirWithRetention.
//   - Metadata. A server writes etcd.k3s.cattle.io/node-name and
//     node-address and the server role labels (etcd, control-plane,
//     master) on its own Node. k3s: metadataHandler.handleSelf
//     (pkg/etcd/metadata_controller.go) and setNodeLabelsAndAnnotations
//     (pkg/server/server.go).
//   - The kubelet. Server and agent alike renew the Node's Lease in
//     kube-node-lease (every second, where a kubelet takes 10s), keep the
//     Ready condition true while they run, and delete the Pods being
//     deleted on their cordoned Node, as a kubelet does once their
//     containers stopped.
//
// Not copied: TLS between members and clients (plain http on the host's
// own address), the supervisor and its token, the API server k3s serves
// (the test's kube-apiserver stands for it), containers and networking.
// The Nodes are created by the test, as a first kubelet start would.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"
)

// config is what k3s reads from /etc/rancher/k3s/config.yaml that the
// double needs.
type config struct {
	Server      string `json:"server"`
	ClusterInit bool   `json:"cluster-init"`
}

type options struct {
	role         string
	nodeName     string
	nodeIP       string
	dataDir      string
	configFile   string
	kubeconfig   string
	join         []string
	period       time.Duration
	electionMs   uint
	learnerStall time.Duration
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
	fs.StringVar(&o.configFile, "config", "/etc/rancher/k3s/config.yaml", "k3s's config file")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "/etc/k3s-double/kubeconfig", "the API server")
	join := fs.String("join", "", "comma-separated addresses of the servers to join through")
	fs.DurationVar(&o.period, "period", 500*time.Millisecond, "how often the double looks at etcd and the Nodes")
	fs.UintVar(&o.electionMs, "election-ms", 1000, "etcd's election timeout")
	fs.DurationVar(&o.learnerStall, "learner-stall", 5*time.Minute, "how long a learner's raft index may stand still before the leader removes it")
	_ = fs.Parse(os.Args[2:])
	if *join != "" {
		o.join = strings.Split(*join, ",")
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("node", o.nodeName, "role", o.role)
	if err := run(o, log); err != nil {
		log.Error("k3s double stopped", "err", err)
		os.Exit(1)
	}
}

func run(o options, log *slog.Logger) error {
	if o.nodeName == "" || o.nodeIP == "" {
		return errors.New("--node-name and --node-ip are required")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	k := &kubeletRole{c: kube, node: o.nodeName, log: log}
	if o.role == "agent" {
		log.Info("agent running", "K3S_URL", os.Getenv("K3S_URL"))
		k.loop(ctx, o.period, nil)
		return nil
	}
	var cfg config
	if data, err := os.ReadFile(o.configFile); err == nil {
		if err := yaml.Unmarshal(data, &cfg); err != nil {
			return fmt.Errorf("%s: %w", o.configFile, err)
		}
	} else if !os.IsNotExist(err) {
		return err
	}
	s, err := startServer(ctx, o, cfg, kube, log)
	if err != nil {
		return err
	}
	defer s.close()
	k.loop(ctx, o.period, s)
	return nil
}
