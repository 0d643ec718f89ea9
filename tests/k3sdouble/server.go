package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
)

// server is k3s's server as far as etcd goes: a real member, the
// leader's duties and, once ready, its controllers.
type server struct {
	o       options
	cfg     config
	log     *slog.Logger
	kube    kubernetes.Interface
	e       *embed.Etcd
	cli     *clientv3.Client
	name    string
	dir     string
	removed atomic.Bool
	// removal reads etcd's log for how its member learnt it was removed.
	removal *removalCore
	// ready: the member votes and the server's apiserver would run.
	ready atomic.Bool
	// serving: the member answered the last tick's linearizable member
	// list: it reaches a quorum, so its apiserver would answer.
	serving atomic.Bool
	// learners is the leader's record of each learner's progress.
	learners map[uint64]progress
	// stopControllers ends the leader-elected controllers.
	stopControllers context.CancelFunc
	// lastMonitor is the node lifecycle stand-in's last pass.
	lastMonitor time.Time
	// lastManage is the last pass that promoted learners and wrote
	// EtcdIsVoter, as the leader.
	lastManage time.Time
	closeOnce  sync.Once
	// api is the server's apiserver on :6443, told the state after each
	// tick; nil in tests that do not serve it.
	api *apiProxy
}

type etcdMember = etcdserverpb.Member

func clientURL(ip string) string { return "http://" + ip + ":2379" }
func peerURL(ip string) string   { return "http://" + ip + ":2380" }

// addressOf takes the host out of a k3s server URL (https://host:6443).
func addressOf(serverURL string) string {
	u, err := url.Parse(serverURL)
	if err != nil || u.Hostname() == "" {
		return ""
	}
	return u.Hostname()
}

func startServer(ctx context.Context, o options, cfg config, kube kubernetes.Interface, log *slog.Logger) (*server, error) {
	s := &server{o: o, cfg: cfg, log: log, kube: kube, dir: filepath.Join(o.dataDir, "server", "db", "etcd"), learners: map[uint64]progress{}}
	// k3s: (*ETCD).Register: the tombstone moves the datastore aside, and
	// only with a server to join.
	if _, err := os.Stat(filepath.Join(s.dir, "tombstone")); err == nil {
		if cfg.Server == "" {
			return nil, errors.New("tombstone file has been detected but --server is empty: backup and delete ${datadir}/server/db to create a new cluster, or set --server to rejoin the cluster")
		}
		backup := fmt.Sprintf("%s-backup-%d", s.dir, time.Now().Unix())
		if err := os.Rename(s.dir, backup); err != nil {
			return nil, err
		}
		log.Info("tombstone file has been detected, removing data dir to rejoin the cluster", "to", backup)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	if err := s.setName(); err != nil {
		return nil, err
	}
	initial, state := "", embed.ClusterStateFlagExisting
	// k3s: pkg/etcd/etcd.go, (*ETCD).IsInitialized stats walDir,
	// <data-dir>/server/db/etcd/member/wal. A join that failed before etcd
	// wrote its WAL (etcd's "member count is unequal" while a peer has not
	// applied the learner's addition yet) leaves member/ without wal/: the
	// next start joins again, finding its unstarted member.
	_, statErr := os.Stat(filepath.Join(s.dir, "member", "wal"))
	switch {
	case statErr == nil:
		initial = s.name + "=" + peerURL(o.nodeIP)
		log.Info("Starting etcd for existing cluster member", "member", s.name)
	case cfg.Server == "" && cfg.ClusterInit:
		// k3s: shouldBootstrapLoad: "not initialized, not joining - must be
		// initializing (cluster-init)"; then (*ETCD).newCluster.
		if s.cfg.Token == "" {
			if err := s.generateToken(); err != nil {
				return nil, err
			}
		}
		initial, state = s.name+"="+peerURL(o.nodeIP), embed.ClusterStateFlagNew
		log.Info("Starting etcd for new cluster", "member", s.name)
	case cfg.Server == "":
		return nil, errors.New("no datastore, no server to join and no cluster-init: the double runs no other datastore")
	default:
		var err error
		if initial, err = s.join(ctx); err != nil {
			return nil, err
		}
	}
	if s.cfg.Token == "" {
		if data, err := os.ReadFile(filepath.Join(o.dataDir, "server", "token")); err == nil {
			s.cfg.Token = strings.TrimSpace(string(data))
		}
	}
	if err := s.startEtcd(initial, state, false); err != nil {
		return nil, err
	}
	// k3s: pkg/cluster/managed.go, (*Cluster).start: "Starting the
	// managed database will clear the reset-flag if set".
	if err := os.Remove(resetFlagFile(o.dataDir)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.close()
		return nil, err
	}
	return s, nil
}

// startEtcd starts the member and its client; forceNew makes it forget
// its peers (etcd's --force-new-cluster). k3s: (*ETCD).cluster.
func (s *server) startEtcd(initial, state string, forceNew bool) error {
	ec := embed.NewConfig()
	ec.Name, ec.Dir = s.name, s.dir
	cu, _ := url.Parse(clientURL(s.o.nodeIP))
	pu, _ := url.Parse(peerURL(s.o.nodeIP))
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	ec.InitialCluster, ec.ClusterState = initial, state
	ec.InitialClusterToken = "k3s-double"
	ec.ForceNewCluster = forceNew
	ec.ElectionMs, ec.TickMs = s.o.electionMs, s.o.heartbeatMs
	s.removal = newRemovalCore()
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.New(s.removal))
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return fmt.Errorf("start etcd: %w", err)
	}
	s.e = e
	s.cli, err = clientv3.New(clientv3.Config{Endpoints: []string{clientURL(s.o.nodeIP)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.Close()
		return err
	}
	s.log.Info("etcd member started", "member", s.name, "state", state)
	return nil
}

// setName reads the member's name from server/db/etcd/name, or makes one
// (the Node's name, "-", 8 hex digits) and writes it. k3s:
// (*ETCD).setName.
func (s *server) setName() error {
	file := filepath.Join(s.dir, "name")
	if data, err := os.ReadFile(file); err == nil {
		s.name = strings.TrimSpace(string(data))
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	s.name = s.o.nodeName + "-" + hex.EncodeToString(b)
	return os.WriteFile(file, []byte(s.name), 0o600)
}

// generateToken makes a new cluster's token when none is given, kept in
// <data-dir>/server/token as k3s keeps it.
func (s *server) generateToken() error {
	file := filepath.Join(s.o.dataDir, "server", "token")
	if data, err := os.ReadFile(file); err == nil {
		s.cfg.Token = strings.TrimSpace(string(data))
		return nil
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	s.cfg.Token = hex.EncodeToString(b)
	return os.WriteFile(file, []byte(s.cfg.Token+"\n"), 0o600)
}

// join adds this host as a learner to the cluster of its one server URL.
// It fails at once when that server does not answer or refuses the
// token, or on a duplicate name; it retries every second while etcd has
// too many learners or is unhealthy, or the member list cannot be had.
// k3s: pkg/cluster/bootstrap.go, shouldBootstrapLoad; pkg/etcd/etcd.go,
// (*ETCD).Start and join.
func (s *server) join(ctx context.Context) (string, error) {
	if s.cfg.Token == "" {
		return "", errors.New("K3S_TOKEN is required to join a cluster")
	}
	address := addressOf(s.cfg.Server)
	if address == "" {
		//lint:ignore ST1005 k3s's own words
		return "", fmt.Errorf("Invalid server url, failed to parse: %s", s.cfg.Server)
	}
	for {
		initial, err := s.joinOnce(ctx, address)
		switch {
		case err == nil:
			return initial, nil
		case errors.Is(err, rpctypes.ErrTooManyLearners), errors.Is(err, rpctypes.ErrUnhealthy):
			s.log.Info("Waiting for other members to finish joining etcd cluster", "err", err)
		case errors.Is(err, errMemberList), errors.Is(err, errNoBootstrap):
			s.log.Info("Waiting to retrieve etcd cluster member list", "err", err)
		default:
			return "", fmt.Errorf("etcd cluster join failed: %w", err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

var errMemberList = errors.New("failed to get MemberList from server")

func (s *server) joinOnce(ctx context.Context, address string) (string, error) {
	if err := tokenKnownBy(ctx, address, s.cfg.Token); err != nil {
		if errors.Is(err, errTokenUnknown) {
			return "", fmt.Errorf("https://%s:6443/v1-k3s/server-bootstrap: 401 Unauthorized", address)
		}
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{clientURL(address)}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "", fmt.Errorf("%w: %v", errMemberList, err)
	}
	defer cli.Close()
	if err := s.compareConfig(cctx, cli, address); err != nil {
		return "", fmt.Errorf("failed to validate server configuration: %w", err)
	}
	lctx, lcancel := context.WithTimeout(cctx, 2*time.Second)
	list, err := cli.MemberList(lctx)
	lcancel()
	if err != nil {
		return "", fmt.Errorf("%w: %v", errMemberList, err)
	}
	var cluster []string
	add := true
	for _, m := range list.Members {
		for _, p := range m.PeerURLs {
			u, err := url.Parse(p)
			if err != nil {
				return "", err
			}
			if m.Name == "" && u.Hostname() == s.o.nodeIP {
				m.Name = s.name // an unstarted member at this address is this one
			}
			if m.Name == s.name && u.Hostname() == s.o.nodeIP {
				add = false
			}
		}
		if len(m.PeerURLs) > 0 {
			cluster = append(cluster, m.Name+"="+m.PeerURLs[0])
		}
		if duplicateName(m.Name, s.name, s.o.nodeName) {
			if err := os.Remove(filepath.Join(s.dir, "name")); err != nil {
				s.log.Error("Failed to remove etcd name file", "err", err)
			}
			return "", errors.New("duplicate node name found, please use a unique name for this node")
		}
	}
	if add {
		s.log.Info("Adding member to etcd cluster", "member", s.name, "peer", peerURL(s.o.nodeIP), "cluster", cluster)
		if _, err := cli.MemberAddAsLearner(cctx, []string{peerURL(s.o.nodeIP)}); err != nil {
			return "", err
		}
		cluster = append(cluster, s.name+"="+peerURL(s.o.nodeIP))
	}
	s.log.Info("Starting etcd to join cluster with members", "cluster", cluster)
	return strings.Join(cluster, ","), nil
}

// criticalKey is where the double keeps a ready server's critical
// settings, by its address.
func criticalKey(address string) string { return "/k3s-double/critical-config/" + address }

var errCriticalMismatch = errors.New("critical configuration value mismatch between servers")

// compareConfig compares this server's critical settings with those of
// the server it joins: any that differs refuses the join; a server that
// gives none is not compared. k3s: pkg/cluster/bootstrap.go, bootstrap
// and compareConfig ("Skipping cluster configuration validation" when the
// server's configuration cannot be had).
func (s *server) compareConfig(ctx context.Context, cli *clientv3.Client, address string) error {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	resp, err := cli.Get(cctx, criticalKey(address))
	if err != nil || len(resp.Kvs) == 0 {
		s.log.Warn("Skipping cluster configuration validation", "err", err)
		return nil
	}
	var theirs map[string]string
	if err := json.Unmarshal(resp.Kvs[0].Value, &theirs); err != nil {
		return err
	}
	var mismatched []string
	for k, v := range s.cfg.Critical {
		if theirs[k] != v {
			mismatched = append(mismatched, k)
		}
	}
	if len(mismatched) == 0 {
		return nil
	}
	slices.Sort(mismatched)
	for _, k := range mismatched {
		s.log.Warn("critical configuration mismatched: " + k)
	}
	return errCriticalMismatch
}

// stopped says etcd stopped under the double: its member was removed.
func (s *server) stopped() bool {
	select {
	case <-s.e.Server.StopNotify():
		return true
	default:
		return false
	}
}

// close stops the server; it may be called again.
func (s *server) close() {
	s.closeOnce.Do(func() {
		if s.stopControllers != nil {
			s.stopControllers()
		}
		s.cli.Close()
		if !s.removed.Load() {
			s.e.Close()
		}
	})
}

// neverReady is the fault switch: a server whose apiserver never comes up.
func (s *server) neverReady() bool {
	if s.o.neverReady {
		return true
	}
	_, err := os.Stat(filepath.Join(s.o.dataDir, "server", "never-ready"))
	return err == nil
}

// loop runs the server's ticks until ctx ends or a fatal error.
func (s *server) loop(ctx context.Context) error {
	t := time.NewTicker(s.o.period)
	defer t.Stop()
	for {
		if err := s.tick(ctx); err != nil {
			return err
		}
		if s.api != nil {
			s.api.set(s.apiState())
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// tick is one look at etcd and the Nodes.
func (s *server) tick(ctx context.Context) error {
	if s.removed.Load() {
		return nil // k3s idles on its tombstone until it is restarted
	}
	switch {
	case s.removal.peer.Load():
		s.tombstone("a peer says this member was removed")
		return nil
	case s.stopped():
		// k3s: "etcd server stopped", and no tombstone: a member that
		// applied its own removal, or stopped for any other reason.
		s.halt()
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := s.cli.MemberList(cctx)
	s.serving.Store(err == nil)
	if err != nil {
		return nil // a member that cannot reach a quorum waits
	}
	id := uint64(s.e.Server.MemberID())
	if !s.ready.Load() && !s.e.Server.IsLearner() && !s.neverReady() {
		if err := s.becomeReady(cctx); err != nil {
			return err
		}
	}
	// Note: at k3s's own tick, not each pass: a learner in sync waits
	// for it to be promoted, and a swap's end which takes a removed
	// member's Node out of the etcd role between two ticks leaves its
	// EtcdIsVoter as k3s leaves it.
	if uint64(s.e.Server.Leader()) == id && time.Since(s.lastManage) >= s.o.learnerTick {
		s.lastManage = time.Now()
		s.promote(cctx, resp.Members)
		if s.ready.Load() {
			s.voterConditions(cctx, resp.Members)
		}
	}
	if s.ready.Load() {
		s.writeMetadata(cctx)
	}
	return nil
}

// becomeReady is the server's apiserver and controllers coming up once
// its member votes: the token's key saved (or checked), READY=1, the
// leader-elected controllers. k3s: pkg/cluster/cluster.go, Start (Save
// once the datastore is ready); pkg/cluster/storage.go, save and
// getBootstrapKeyFromStorage.
func (s *server) becomeReady(ctx context.Context) error {
	key, err := bootstrapKey(s.cfg.Token)
	if err != nil {
		return err
	}
	resp, err := s.cli.Get(ctx, "/bootstrap/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil // not yet: tried again next tick
	}
	switch {
	case len(resp.Kvs) > 1:
		return errors.New("found multiple bootstrap keys in storage")
	case len(resp.Kvs) == 1 && string(resp.Kvs[0].Key) != key:
		return errors.New("bootstrap data already found and encrypted with different token")
	case len(resp.Kvs) == 0:
		if _, err := s.cli.Put(ctx, key, "bootstrap data (the k3s double keeps only the key)"); err != nil {
			return nil
		}
	}
	// k3s serves its critical settings on /v1-k3s/config for a joining
	// server to compare (pkg/server/router.go, configHandler); the
	// double keeps them in etcd under the server's address.
	crit, _ := json.Marshal(s.cfg.Critical)
	if _, err := s.cli.Put(ctx, criticalKey(s.o.nodeIP), string(crit)); err != nil {
		return nil
	}
	s.ready.Store(true)
	s.log.Info("k3s is up and running", "member", s.name)
	notifyReady(s.log)
	cctx, cancel := context.WithCancel(context.Background())
	s.stopControllers = cancel
	go s.leaderElected(cctx, "k3s-etcd", s.o.leaseDuration, s.o.renewDeadline, s.o.retryPeriod, s.memberController)
	go s.leaderElected(cctx, "kube-controller-manager", 15*time.Second, 10*time.Second, 2*time.Second, s.nodeLifecycle)
	go s.endpointReconciler(cctx)
	return nil
}

// serves says the server's apiserver would answer: k3s started it (the
// member votes), etcd runs and the member reaches a quorum. k3s:
// pkg/cli/server, run (the apiserver once ETCDReadyChan closes).
func (s *server) serves() bool {
	return s.ready.Load() && s.serving.Load() && !s.removed.Load()
}

// halt is etcd stopped under k3s without a tombstone: its controllers
// stop, and the process idles, its unit still running, until it is
// restarted. k3s: StartETCD (pkg/executor/embed/etcd), "etcd server
// stopped".
func (s *server) halt() {
	if s.removed.Swap(true) {
		return
	}
	s.log.Warn("etcd server stopped", "member", s.name)
	if s.stopControllers != nil {
		s.stopControllers()
	}
	s.e.Close()
}

func (s *server) tombstone(why string) {
	if s.removed.Swap(true) {
		return
	}
	s.log.Warn("this member was removed; writing the tombstone", "why", why)
	if s.stopControllers != nil {
		s.stopControllers()
	}
	_ = os.WriteFile(filepath.Join(s.dir, "tombstone"), nil, 0o600)
	s.e.Close()
}

// progress is a learner's raft index and since when it has not grown.
type progress struct {
	index uint64
	since time.Time
}

// promote asks etcd to promote each learner; etcd refuses one that is
// not in sync yet. A learner whose raft index has not grown for
// --learner-stall is removed. k3s: trackLearnerProgress.
func (s *server) promote(ctx context.Context, members []*etcdMember) {
	for _, m := range members {
		if !m.IsLearner {
			delete(s.learners, m.ID)
			continue
		}
		if _, err := s.cli.MemberPromote(ctx, m.ID); err == nil {
			s.log.Info("Promoted learner", "member", m.Name)
			delete(s.learners, m.ID)
			continue
		}
		var index uint64
		for _, ep := range m.ClientURLs {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			st, err := s.cli.Status(cctx, ep)
			cancel()
			if err == nil {
				index = st.RaftAppliedIndex
				break
			}
		}
		p, ok := s.learners[m.ID]
		if !ok || index > p.index {
			s.learners[m.ID] = progress{index: index, since: time.Now()}
			continue
		}
		if time.Since(p.since) > s.o.learnerStall {
			if _, err := s.cli.MemberRemove(ctx, m.ID); err == nil {
				s.log.Warn("Removed learner from etcd cluster", "member", m.Name, "peer", m.PeerURLs, "stalled", time.Since(p.since).Round(time.Second))
				delete(s.learners, m.ID)
			}
		}
	}
}
