// Package etcdtest runs real etcd members on loopback for the agent's
// tests: embedded, each named as k3s names a member (<node>-<8 hex>), with
// its own data directory and ports.
package etcdtest

import (
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fleet-role/fleet-role/tests/testhost"
)

// Tick and ElectionTimeout are the members' raft timing (etcd's
// --heartbeat-interval and --election-timeout), short for tests; an
// assertion on how long a cluster takes to recover takes its slack from
// ElectionTimeout.
const (
	Tick            = 50 * time.Millisecond
	ElectionTimeout = 500 * time.Millisecond
)

// Member is one member: its name, client and peer URLs, data directory,
// and the running server (nil while stopped).
type Member struct {
	Name, Client, Peer, Dir string
	E                       *embed.Etcd
}

// New makes a member of the node that is not started yet.
func New(t testing.TB, node string) *Member {
	t.Helper()
	return &Member{Name: node + "-0a1b2c3d", Client: freeURL(t), Peer: freeURL(t), Dir: t.TempDir()}
}

func freeURL(t testing.TB) string {
	t.Helper()
	p, err := testhost.FreePort()
	require.NoError(t, err)
	return fmt.Sprintf("http://127.0.0.1:%d", p)
}

// Start starts the member in the initial cluster given (name=peer,…) in
// the state given (embed.ClusterStateFlagNew or …Existing); it is stopped
// when the test ends.
func (m *Member) Start(t testing.TB, initialCluster, state string) {
	t.Helper()
	m.start(t, initialCluster, state, false)
}

// StartForceNew starts the member forgetting its peers, as k3s's
// --cluster-reset starts etcd (etcd's --force-new-cluster).
func (m *Member) StartForceNew(t testing.TB) {
	t.Helper()
	m.start(t, m.Name+"="+m.Peer, embed.ClusterStateFlagNew, true)
}

func (m *Member) start(t testing.TB, initialCluster, state string, forceNew bool) {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = m.Name, m.Dir
	cu, _ := url.Parse(m.Client)
	pu, _ := url.Parse(m.Peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster, cfg.ClusterState = initialCluster, state
	cfg.ForceNewCluster = forceNew
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.TickMs, cfg.ElectionMs = uint(Tick/time.Millisecond), uint(ElectionTimeout/time.Millisecond)
	e, err := embed.StartEtcd(cfg)
	require.NoError(t, err)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		t.Fatalf("member %s not ready", m.Name)
	}
	m.E = e
	t.Cleanup(m.Stop)
}

// Stop stops the member; it may be called again.
func (m *Member) Stop() {
	if m.E != nil {
		m.E.Close()
		m.E = nil
	}
}

// Cluster starts a new cluster of one member per node.
func Cluster(t testing.TB, nodes ...string) []*Member {
	t.Helper()
	var ms []*Member
	var initial []string
	for _, n := range nodes {
		m := New(t, n)
		ms = append(ms, m)
		initial = append(initial, m.Name+"="+m.Peer)
	}
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Go(func() { m.Start(t, strings.Join(initial, ","), embed.ClusterStateFlagNew) })
	}
	wg.Wait()
	return ms
}

// Client is a client of the running members given, closed when the test
// ends.
func Client(t testing.TB, ms ...*Member) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, m := range ms {
		if m.E != nil {
			eps = append(eps, m.Client)
		}
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}
