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
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/fleet-role/fleet-role/swapplan"
)

// server is k3s's server as far as etcd goes: a real member, the
// leader's duties and the removal annotation.
type server struct {
	o       options
	log     *slog.Logger
	kube    kubernetes.Interface
	e       *embed.Etcd
	cli     *clientv3.Client
	name    string
	dir     string
	removed atomic.Bool
	// learners is the leader's record of each learner's progress.
	learners map[uint64]progress
}

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
	s := &server{o: o, log: log, kube: kube, dir: filepath.Join(o.dataDir, "server", "db", "etcd"), learners: map[uint64]progress{}}
	if _, err := os.Stat(filepath.Join(s.dir, "tombstone")); err == nil {
		backup := fmt.Sprintf("%s-backup-%d", s.dir, time.Now().Unix())
		if err := os.Rename(s.dir, backup); err != nil {
			return nil, err
		}
		log.Info("a tombstone: the datastore moved aside; joining as a new member", "to", backup)
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, err
	}
	initial, state := "", embed.ClusterStateFlagExisting
	if _, err := os.Stat(filepath.Join(s.dir, "member")); err == nil {
		name, err := os.ReadFile(filepath.Join(s.dir, "name"))
		if err != nil {
			return nil, fmt.Errorf("a datastore without its member's name: %w", err)
		}
		s.name = strings.TrimSpace(string(name))
		initial = s.name + "=" + peerURL(o.nodeIP)
		log.Info("restarting the member of the datastore", "member", s.name)
	} else {
		s.name = memberName(o.nodeName)
		var err error
		initial, state, err = s.join(ctx, cfg)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(s.dir, "name"), []byte(s.name+"\n"), 0o600); err != nil {
			return nil, err
		}
	}
	ec := embed.NewConfig()
	ec.Name, ec.Dir = s.name, s.dir
	cu, _ := url.Parse(clientURL(o.nodeIP))
	pu, _ := url.Parse(peerURL(o.nodeIP))
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	ec.InitialCluster, ec.ClusterState = initial, state
	ec.InitialClusterToken = "k3s-double"
	ec.ElectionMs = o.electionMs
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("start etcd: %w", err)
	}
	s.e = e
	s.cli, err = clientv3.New(clientv3.Config{Endpoints: []string{clientURL(o.nodeIP)}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		e.Close()
		return nil, err
	}
	log.Info("etcd member started", "member", s.name, "state", state)
	return s, nil
}

// memberName is k3s's: the node's name and 8 random hex digits.
func memberName(node string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return node + "-" + hex.EncodeToString(b)
}

// join adds this host as a learner to the cluster of the first server
// that answers, or, on a cluster-init server that finds none, starts a
// cluster of one.
func (s *server) join(ctx context.Context, cfg config) (initial, state string, err error) {
	var through []string
	if a := addressOf(cfg.Server); a != "" && a != s.o.nodeIP {
		through = append(through, a)
	}
	for _, a := range s.o.join {
		if a != s.o.nodeIP && !slices.Contains(through, a) {
			through = append(through, a)
		}
	}
	for attempt := 0; ; attempt++ {
		for _, a := range through {
			initial, err := s.addLearner(ctx, a)
			if err == nil {
				s.log.Info("joined as a learner", "member", s.name, "through", a)
				return initial, embed.ClusterStateFlagExisting, nil
			}
			s.log.Info("not joined yet", "through", a, "err", err)
		}
		if cfg.ClusterInit && attempt >= 1 {
			s.log.Info("cluster-init: no cluster answers; starting one", "member", s.name)
			return s.name + "=" + peerURL(s.o.nodeIP), embed.ClusterStateFlagNew, nil
		}
		if len(through) == 0 && !cfg.ClusterInit {
			return "", "", errors.New("no server to join: set server: in the config or --join")
		}
		select {
		case <-ctx.Done():
			return "", "", ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (s *server) addLearner(ctx context.Context, address string) (string, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{clientURL(address)}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return "", err
	}
	defer cli.Close()
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := cli.MemberAddAsLearner(cctx, []string{peerURL(s.o.nodeIP)})
	if err != nil {
		return "", err
	}
	var initial []string
	for _, m := range resp.Members {
		name := m.Name
		if m.ID == resp.Member.ID {
			name = s.name
		}
		for _, p := range m.PeerURLs {
			initial = append(initial, name+"="+p)
		}
	}
	return strings.Join(initial, ","), nil
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

func (s *server) close() {
	s.cli.Close()
	if !s.removed.Load() {
		s.e.Close()
	}
}

// tick is one look at etcd and the Nodes; it says whether the server goes on.
func (s *server) tick(ctx context.Context, nodes []corev1.Node) {
	if s.removed.Load() {
		return // k3s idles on its tombstone until it is restarted
	}
	if s.stopped() {
		s.tombstone("etcd stopped")
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	resp, err := s.cli.MemberList(cctx)
	if err != nil {
		return // a member that cannot reach a quorum waits
	}
	id := uint64(s.e.Server.MemberID())
	self := false
	for _, m := range resp.Members {
		self = self || m.ID == id
	}
	if !self {
		s.tombstone("this member is not in the member list")
		return
	}
	if uint64(s.e.Server.Leader()) == id {
		s.promote(cctx, resp.Members)
		s.voterConditions(cctx, nodes, resp.Members)
	}
	s.removals(cctx, nodes, resp.Members)
}

func (s *server) tombstone(why string) {
	if s.removed.Swap(true) {
		return
	}
	s.log.Warn("this member was removed; writing the tombstone", "why", why)
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
// --learner-stall is removed.
func (s *server) promote(ctx context.Context, members []*etcdMember) {
	for _, m := range members {
		if !m.IsLearner {
			delete(s.learners, m.ID)
			continue
		}
		if _, err := s.cli.MemberPromote(ctx, m.ID); err == nil {
			s.log.Info("learner promoted", "member", m.Name)
			delete(s.learners, m.ID)
			continue
		}
		var index uint64
		if len(m.ClientURLs) > 0 {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			if st, err := s.cli.Status(cctx, m.ClientURLs[0]); err == nil {
				index = st.RaftAppliedIndex
			}
			cancel()
		}
		p, ok := s.learners[m.ID]
		if !ok || index > p.index {
			s.learners[m.ID] = progress{index: index, since: time.Now()}
			continue
		}
		if time.Since(p.since) >= s.o.learnerStall {
			if _, err := s.cli.MemberRemove(ctx, m.ID); err == nil {
				s.log.Warn("a stalled learner removed", "member", m.Name, "peer", m.PeerURLs, "stalled", time.Since(p.since).Round(time.Second))
				delete(s.learners, m.ID)
			}
		}
	}
}

type etcdMember = etcdserverpb.Member

// AnnotationNodeAddress is k3s's: the address of the Node's member.
const AnnotationNodeAddress = "etcd.k3s.cattle.io/node-address"

// matches says the member is the one the Node's annotations name: by
// name, or for a learner that never started (no name yet) by its peer
// URL.
func matches(m *etcdMember, n *corev1.Node) bool {
	name := n.Annotations[swapplan.AnnotationEtcdNodeName]
	if name != "" && m.Name == name {
		return true
	}
	addr := n.Annotations[AnnotationNodeAddress]
	return m.Name == "" && addr != "" && slices.Contains(m.PeerURLs, peerURL(addr))
}

// voterConditions writes EtcdIsVoter on the Nodes of members and of
// servers, when it changes.
func (s *server) voterConditions(ctx context.Context, nodes []corev1.Node, members []*etcdMember) {
	for i := range nodes {
		n := &nodes[i]
		name := n.Annotations[swapplan.AnnotationEtcdNodeName]
		if name == "" && n.Labels[swapplan.LabelEtcd] != "true" {
			continue
		}
		status, reason, message := corev1.ConditionFalse, swapplan.ReasonNotAMember, "no member of this Node's"
		for _, m := range members {
			if !matches(m, n) {
				continue
			}
			status, reason, message = corev1.ConditionTrue, swapplan.ReasonMemberNotLearner, "a voter"
			if m.IsLearner {
				status, reason, message = corev1.ConditionFalse, swapplan.ReasonMemberIsLearner, "a learner"
			}
			if err := s.healthy(ctx, m); err != nil {
				status, reason, message = corev1.ConditionFalse, swapplan.ReasonUnhealthy, err.Error()
			}
		}
		if c := condition(n, swapplan.ConditionEtcdIsVoter); c != nil && c.Status == status && c.Reason == reason {
			continue
		}
		now := metav1.Now()
		patchConditions(ctx, s.kube, n.Name, corev1.NodeCondition{Type: swapplan.ConditionEtcdIsVoter, Status: status, Reason: reason,
			Message: message, LastHeartbeatTime: now, LastTransitionTime: now})
	}
}

// healthy asks the member for its status, as k3s's getETCDStatus does.
func (s *server) healthy(ctx context.Context, m *etcdMember) error {
	if len(m.ClientURLs) == 0 {
		return errors.New("the member has not started")
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := s.cli.Status(cctx, m.ClientURLs[0])
	if err == nil && len(st.Errors) > 0 {
		err = errors.New(strings.Join(st.Errors, "; "))
	}
	return err
}

// removals removes the member of a Node annotated for removal, from any
// server but that Node's own.
func (s *server) removals(ctx context.Context, nodes []corev1.Node, members []*etcdMember) {
	for _, n := range nodes {
		if n.Name == s.o.nodeName || n.Annotations[swapplan.AnnotationEtcdRemove] != "true" {
			continue
		}
		name := n.Annotations[swapplan.AnnotationEtcdNodeName]
		if name == "" {
			continue
		}
		for _, m := range members {
			if matches(m, &n) {
				if _, err := s.cli.MemberRemove(ctx, m.ID); err != nil {
					s.log.Warn("member not removed", "member", name, "err", err)
					return
				}
				s.log.Info("member removed", "node", n.Name, "member", name)
			}
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{
			swapplan.AnnotationEtcdRemovedNodeName: name, swapplan.AnnotationEtcdNodeName: nil, AnnotationNodeAddress: nil}}})
		if _, err := s.kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			s.log.Warn("removal not recorded on the Node", "node", n.Name, "err", err)
		}
	}
}
