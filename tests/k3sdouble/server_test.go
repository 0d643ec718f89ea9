package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/kubernetes/fake"
)

// subnet is a loopback /24 of this process's for the members' addresses.
var subnet = fmt.Sprintf("127.88.%d", os.Getpid()%200+20)

// testServer starts the double's server part over a real etcd member at
// subnet.<host>, with the given config, as the unit would.
func testServer(t *testing.T, node string, host int, cfg config) (*server, error) {
	t.Helper()
	return testServerIn(t, t.TempDir(), node, host, cfg)
}

func testServerIn(t *testing.T, dir, node string, host int, cfg config) (*server, error) {
	t.Helper()
	o := testOptions(dir, node, host)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := startServer(ctx, o, cfg, fake.NewClientset(), slog.New(slog.DiscardHandler))
	if err == nil {
		t.Cleanup(s.close)
	}
	return s, err
}

// testOptions are a server's options at subnet.<host>, its data in dir,
// with the test's short timings.
func testOptions(dir, node string, host int) options {
	return options{role: "server", nodeName: node, nodeIP: fmt.Sprintf("%s.%d", subnet, host), dataDir: dir,
		period: 100 * time.Millisecond, electionMs: 1000, heartbeatMs: 100, learnerStall: time.Minute, learnerTick: 100 * time.Millisecond,
		leaseDuration: 4 * time.Second, renewDeadline: 3 * time.Second, retryPeriod: 500 * time.Millisecond,
		endpointInterval: 200 * time.Millisecond, endpointTTL: 2 * time.Second}
}

// tickUntil ticks the servers until cond holds.
func tickUntil(t *testing.T, what string, cond func() bool, servers ...*server) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		for _, s := range servers {
			require.NoError(t, s.tick(context.Background()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestTheServersStartAsK3sDoes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd members")
	}
	a, err := testServer(t, "srv-a", 10, config{ClusterInit: true, Token: "secret"})
	require.NoError(t, err, "cluster-init with no server starts a new cluster")
	tickUntil(t, "the bootstrap server is ready", a.ready.Load, a)
	join := "https://" + a.o.nodeIP + ":6443"

	t.Run("a server with another token is refused", func(t *testing.T) {
		_, err := testServer(t, "srv-b", 11, config{Server: join, Token: "other"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "v1-k3s/server-bootstrap: 401 Unauthorized")
	})
	t.Run("a server with no token is refused", func(t *testing.T) {
		_, err := testServer(t, "srv-b", 11, config{Server: join})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "K3S_TOKEN is required to join a cluster")
	})
	t.Run("a server whose server does not answer fails at once", func(t *testing.T) {
		began := time.Now()
		_, err := testServer(t, "srv-b", 11, config{Server: "https://" + subnet + ".99:6443", Token: "secret"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "failed to get CA certs")
		assert.Less(t, time.Since(began), 10*time.Second)
	})

	t.Run("a server whose critical settings differ from its server's is refused", func(t *testing.T) {
		_, err := testServer(t, "srv-b", 11, config{Server: join, Token: "secret", Critical: map[string]string{"cluster-cidr": "10.52.0.0/16"}})
		require.Error(t, err)
		assert.ErrorIs(t, err, errCriticalMismatch)
		assert.Contains(t, err.Error(), "failed to validate server configuration: critical configuration value mismatch between servers")
	})

	b, err := testServer(t, "srv-b", 11, config{Server: join, Token: "secret", ClusterInit: true})
	require.NoError(t, err, "cluster-init and server both set: the server is joined")
	assert.False(t, b.ready.Load(), "a learner is not ready")
	tickUntil(t, "the joined server votes and is ready", b.ready.Load, a, b)
	list, err := a.cli.MemberList(context.Background())
	require.NoError(t, err)
	assert.Len(t, list.Members, 2)
	blist, err := b.cli.MemberList(context.Background())
	require.NoError(t, err)
	assert.Equal(t, list.Header.ClusterId, blist.Header.ClusterId, "one cluster")

	t.Run("a server whose join failed before etcd wrote its WAL joins again at its next start, finding its unstarted member", func(t *testing.T) {
		// As after etcd's "member count is unequal": the learner added,
		// member/ made, no wal/ in it.
		dir := t.TempDir()
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "server", "db", "etcd", "member", "snap"), 0o700))
		var err error
		var added *clientv3.MemberAddResponse
		require.Eventually(t, func() bool {
			// etcd refuses a member while one joined of late is not
			// active long enough (its strict reconfiguration check, some
			// seconds at these 1 s elections); 30 s is the outer limit
			// tickUntil gives too.
			added, err = a.cli.MemberAddAsLearner(context.Background(), []string{peerURL(subnet + ".16")})
			return err == nil
		}, 30*time.Second, 200*time.Millisecond, "add the learner: %v", err)
		f, err := testServerIn(t, dir, "srv-f", 16, config{Server: join, Token: "secret"})
		require.NoError(t, err, "joined again, not started as an existing member")
		assert.Equal(t, added.Member.ID, uint64(f.e.Server.MemberID()), "the member added before, not another")
		tickUntil(t, "the member votes", func() bool { return !f.e.Server.IsLearner() }, a, b, f)
		f.close()
		_, err = a.cli.MemberRemove(context.Background(), added.Member.ID)
		require.NoError(t, err)
	})

	t.Run("another incarnation of a member's node is refused as a duplicate, its name file removed", func(t *testing.T) {
		dir := t.TempDir()
		_, err := testServerIn(t, dir, "srv-b", 12, config{Server: join, Token: "secret"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "duplicate node name found, please use a unique name for this node")
		assert.NoFileExists(t, filepath.Join(dir, "server", "db", "etcd", "name"))
	})

	// Note: which comes first is a race in etcd, and so in k3s: the
	// member applying its own removal, or a peer refusing its messages.
	t.Run("a member removed while it runs stops, with a tombstone only when a peer told it first", func(t *testing.T) {
		c, err := testServer(t, "srv-e", 15, config{Server: join, Token: "secret"})
		require.NoError(t, err)
		tickUntil(t, "the member votes", func() bool { return !c.e.Server.IsLearner() }, a, b, c)
		_, err = a.cli.MemberRemove(context.Background(), uint64(c.e.Server.MemberID()))
		require.NoError(t, err)
		tickUntil(t, "etcd stops under it", c.removed.Load, a, b, c)
		self, peer := c.removal.self.Load(), c.removal.peer.Load()
		assert.True(t, self || peer, "it learnt it was removed one way or the other")
		_, err = os.Stat(filepath.Join(c.dir, "tombstone"))
		assert.Equal(t, peer, err == nil, "a tombstone only when a peer said so first (applied its own removal first: %t)", self)
	})

	t.Run("a member removed while it was stopped is told by its peers once started again, and writes its tombstone", func(t *testing.T) {
		dir := t.TempDir()
		d, err := testServerIn(t, dir, "srv-d", 14, config{Server: join, Token: "secret"})
		require.NoError(t, err)
		tickUntil(t, "the member votes", func() bool { return !d.e.Server.IsLearner() }, a, b, d)
		id := uint64(d.e.Server.MemberID())
		d.close()
		_, err = a.cli.MemberRemove(context.Background(), id)
		require.NoError(t, err)

		d, err = testServerIn(t, dir, "srv-d", 14, config{Server: join, Token: "secret"})
		require.NoError(t, err, "its datastore restarts the member")
		tickUntil(t, "a peer tells it it was removed", d.removed.Load, a, b, d)
		assert.FileExists(t, filepath.Join(d.dir, "tombstone"))
		d.close()

		_, err = testServerIn(t, dir, "srv-d", 14, config{Token: "secret", ClusterInit: true})
		require.Error(t, err, "with no server to join, k3s refuses the tombstone")
		assert.Contains(t, err.Error(), "tombstone file has been detected but --server is empty")
		assert.FileExists(t, filepath.Join(d.dir, "tombstone"), "the datastore is left as it was")
	})

	t.Run("a server that never becomes ready votes but stays unready", func(t *testing.T) {
		c, err := testServer(t, "srv-c", 13, config{Server: join, Token: "secret"})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(c.o.dataDir, "server", "never-ready"), nil, 0o600))
		tickUntil(t, "the member votes", func() bool { return !c.e.Server.IsLearner() }, a, b, c)
		for range 5 {
			require.NoError(t, c.tick(context.Background()))
		}
		assert.False(t, c.ready.Load())
	})

}
