//go:build linux

package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/daemon/etcdclient"
	"github.com/fleet-role/fleet-role/platform"
	"github.com/fleet-role/fleet-role/tests/etcdtest"
	"github.com/fleet-role/fleet-role/tests/testhost"
)

// agentOf makes the fixture's agent talk to a real member: the agent's
// own etcd client, as `fleet-role agent` makes it.
func agentOf(t *testing.T, f *fixture, m *etcdtest.Member) {
	t.Helper()
	c, err := etcdclient.New(etcdclient.Config{Endpoint: m.Client, Timeout: 3 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	f.realEtcd = c
}

// keys reads every key under /registry/ through the member.
func keys(t *testing.T, c *clientv3.Client) map[string]string {
	t.Helper()
	resp, err := c.Get(context.Background(), "/registry/", clientv3.WithPrefix())
	require.NoError(t, err)
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	return got
}

// clusterReset restores a snapshot into a fresh host's datastore and
// starts its member as a cluster of one, as `k3s server --cluster-reset
// --cluster-reset-restore-path=<file>` does. k3s-io/k3s pkg/etcd/etcd.go:
// (*ETCD).Reset stats the file (a missing file or a directory is an
// error) and calls (*ETCD).Restore, which restores with etcdutl's
// snapshot.NewV3(...).Restore into <data-dir>/server/db/etcd, the WAL in
// its member/wal, the member's name, its peer URL and an initial cluster
// of that member alone; Reset then starts etcd by newCluster(ctx, true):
// state "new" and ForceNewCluster. Restore also checks the snapshot's
// appended sha256 (etcdutl's default), so a copy that is not whole is
// refused, as k3s refuses it.
func clusterReset(t *testing.T, file string, m *etcdtest.Member) {
	t.Helper()
	fi, err := os.Stat(file)
	require.NoError(t, err, "etcd: snapshot path does not exist")
	require.False(t, fi.IsDir(), "etcd: snapshot path must be a file, not a directory")
	require.NoError(t, os.RemoveAll(m.Dir))
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath:   file,
		Name:           m.Name,
		OutputDataDir:  m.Dir,
		OutputWALDir:   filepath.Join(m.Dir, "member", "wal"),
		PeerURLs:       []string{m.Peer},
		InitialCluster: m.Name + "=" + m.Peer,
	})
	require.NoError(t, err)
	m.StartForceNew(t)
}

func sha256Of(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func TestTheSnapshotTheAgentTookAndItsCopyRestoreAsK3sResetsAClusterWithTheKeysWrittenBeforeItAndNoneAfter(t *testing.T) {
	ms := etcdtest.Cluster(t, "h1", "h2", "h3")
	ctx := context.Background()
	admin := etcdtest.Client(t, ms[0])
	before := map[string]string{}
	for i := range 50 {
		k, v := fmt.Sprintf("/registry/before/k%02d", i), fmt.Sprintf("value-%d", i)
		_, err := admin.Put(ctx, k, v)
		require.NoError(t, err)
		before[k] = v
	}
	// A linearizable read through h2's member waits until it applied
	// every write: its snapshot then holds them all.
	_, err := etcdtest.Client(t, ms[1]).Get(ctx, "/registry/before/k49")
	require.NoError(t, err)

	f := newFixture(t)
	f.cfg.SnapshotCopyDir = filepath.Join(f.dir, "backup", "h2")
	require.NoError(t, os.MkdirAll(f.cfg.SnapshotCopyDir, 0o700))
	f.role("server")
	f.plat.Set(platform.Server, true, time.Now().Add(-time.Hour))
	agentOf(t, f, ms[1])
	f.start()
	f.request(api.RequestSnapshot)
	r := f.waitReport(api.RequestSnapshot, api.StateDone)
	require.True(t, r.Snapshot.Ready(), "%+v", r.Snapshot)
	f.stop()

	// The cluster goes on after the snapshot: new keys, a key changed and
	// one deleted, none of which the restore may bring back.
	for i := range 20 {
		_, err := admin.Put(ctx, fmt.Sprintf("/registry/after/k%02d", i), "later")
		require.NoError(t, err)
	}
	_, err = admin.Put(ctx, "/registry/before/k00", "changed after the snapshot")
	require.NoError(t, err)
	_, err = admin.Delete(ctx, "/registry/before/k01")
	require.NoError(t, err)

	assert.Equal(t, filepath.Join(f.cfg.DataDir, "server", "db", "snapshots", filepath.Base(r.Snapshot.Path)), r.Snapshot.Path)
	assert.Equal(t, filepath.Join(f.cfg.SnapshotCopyDir, filepath.Base(r.Snapshot.Path)), r.Snapshot.Copy)
	assert.Equal(t, r.Snapshot.SHA256, sha256Of(t, r.Snapshot.Path), "the report names the file's sha256")
	assert.Equal(t, r.Snapshot.SHA256, sha256Of(t, r.Snapshot.Copy), "the copy is the snapshot, byte for byte")

	// The voter is lost: the copy off it is what a new host restores.
	for name, file := range map[string]string{"the copy off the host": r.Snapshot.Copy, "the snapshot on the voter": r.Snapshot.Path} {
		t.Run(name, func(t *testing.T) {
			fresh := etcdtest.New(t, "r1")
			clusterReset(t, file, fresh)
			c := etcdtest.Client(t, fresh)
			list, err := c.MemberList(ctx)
			require.NoError(t, err)
			require.Len(t, list.Members, 1, "a cluster of one")
			assert.Equal(t, fresh.Name, list.Members[0].Name)
			assert.Equal(t, before, keys(t, c), "exactly the keys written before the snapshot")
			_, err = c.Put(ctx, "/registry/restored", "yes")
			require.NoError(t, err, "the restored cluster takes writes")
		})
	}
}

// smallDisk mounts a tmpfs of 256 KiB on dir: a disk that a snapshot of
// the test's etcd fills. It skips, with the error, where mounting is not
// allowed, and fails instead under CI=true.
func smallDisk(t *testing.T, dir string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(dir, 0o700))
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=256k"); err != nil {
		testhost.Unavailable(t, "mount -t tmpfs -o size=256k tmpfs %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("umount %s: %v", dir, err)
		}
	})
}

// bigEtcd is a member of one holding about 1 MiB of values: its snapshot
// does not fit on a smallDisk.
func bigEtcd(t *testing.T) *etcdtest.Member {
	t.Helper()
	m := etcdtest.Cluster(t, "h2")[0]
	c := etcdtest.Client(t, m)
	value := strings.Repeat("x", 8<<10)
	for i := range 128 {
		_, err := c.Put(context.Background(), fmt.Sprintf("/registry/big/k%03d", i), value)
		require.NoError(t, err)
	}
	return m
}

// ours lists the entries of dir that are fleet-role's snapshots or their
// partial files.
func oursIn(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, name := range names(t, dir) {
		if strings.HasPrefix(name, snapshotPrefix) {
			out = append(out, name)
		}
	}
	return out
}

// stateOf reads the agent's state file, which must parse.
func stateOf(t *testing.T, f *fixture) api.AgentState {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.cfg.StateDir, api.AgentStateFile))
	require.NoError(t, err)
	var s api.AgentState
	require.NoError(t, json.Unmarshal(b, &s), "the state file parses: %s", b)
	return s
}

// snapshotFails has the fixture's agent, a server's on the member m, take
// a snapshot, and returns its report, which says it failed.
func snapshotFails(t *testing.T, f *fixture, m *etcdtest.Member) *api.Report {
	t.Helper()
	f.role("server")
	f.plat.Set(platform.Server, true, time.Now().Add(-time.Hour))
	agentOf(t, f, m)
	f.start()
	f.request(api.RequestSnapshot)
	r := f.waitReport(api.RequestSnapshot, api.StateFailed)
	f.stop()
	t.Log(r.Message)
	return r
}

func TestASnapshotThatFillsTheDiskIsReportedFailedAndLeavesNoPartialFileNorABrokenStateFile(t *testing.T) {
	m := bigEtcd(t)
	f := newFixture(t)
	// One disk holds k3s's data dir, with its snapshots, and the agent's
	// state, as /var/lib does on a host.
	disk := filepath.Join(f.dir, "disk")
	smallDisk(t, disk)
	f.cfg.DataDir = filepath.Join(disk, "k3s")
	f.cfg.StateDir = filepath.Join(disk, "fleet-role")
	f.write(filepath.Join(f.cfg.StateDir, api.AgentStateFile), `{"voters": ["h2"], "finished": "s0"}`)
	r := snapshotFails(t, f, m)

	assert.Contains(t, r.Message, "no space left on device")
	assert.Nil(t, r.Snapshot, "no snapshot to restore from is named")
	assert.Empty(t, oursIn(t, filepath.Join(f.cfg.DataDir, "server", "db", "snapshots")), "no snapshot, whole or partial")
	s := stateOf(t, f)
	assert.Equal(t, "s0", s.Finished, "what the state held is kept")
	assert.Equal(t, []string{"h2"}, s.Voters)
	require.NotNil(t, s.Handled)
	assert.Equal(t, "s1", s.Handled.Swap, "the request is answered")
}

func TestASnapshotWhoseCopyFillsTheDiskOffTheHostIsReportedFailedAndLeavesNoPartialCopy(t *testing.T) {
	m := bigEtcd(t)
	f := newFixture(t)
	f.cfg.SnapshotCopyDir = filepath.Join(f.dir, "backup")
	smallDisk(t, f.cfg.SnapshotCopyDir)
	r := snapshotFails(t, f, m)

	assert.Contains(t, r.Message, "no space left on device")
	assert.Contains(t, r.Message, "copy the snapshot to "+f.cfg.SnapshotCopyDir)
	assert.Nil(t, r.Snapshot, "a snapshot without its copy is not ready")
	assert.Empty(t, oursIn(t, f.cfg.SnapshotCopyDir), "no copy, whole or partial")
	local := oursIn(t, filepath.Join(f.cfg.DataDir, "server", "db", "snapshots"))
	require.Len(t, local, 1, "the snapshot on the host is whole and kept, pruned as any other")
	assert.Regexp(t, ours, local[0])
	assert.NotContains(t, local[0], ".part")
	s := stateOf(t, f)
	require.NotNil(t, s.Handled)
	assert.Equal(t, "s1", s.Handled.Swap)
}
