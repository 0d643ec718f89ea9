package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fleet-role/fleet-role/daemon/etcdclient"
)

// registry reads every key under /registry/ through a server's client.
func registry(t *testing.T, c *clientv3.Client) map[string]string {
	t.Helper()
	// Note: not the apiservers' own leases (/registry/masterleases/),
	// which the servers running write and expire.
	resp, err := c.Get(context.Background(), "/registry/before/", clientv3.WithPrefix())
	require.NoError(t, err)
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	return got
}

func TestAClusterResetFromTheAgentsSnapshotBringsBackAClusterOfOneThatTheOthersJoinAgain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd members")
	}
	ctx := context.Background()
	dirA, dirB := t.TempDir(), t.TempDir()
	a, err := testServerIn(t, dirA, "srv-a", 30, config{ClusterInit: true, Token: "secret"})
	require.NoError(t, err)
	tickUntil(t, "the bootstrap server is ready", a.ready.Load, a)
	join := "https://" + a.o.nodeIP + ":6443"
	b, err := testServerIn(t, dirB, "srv-b", 31, config{Server: join, Token: "secret"})
	require.NoError(t, err)
	tickUntil(t, "the joined server votes and is ready", b.ready.Load, a, b)

	before := map[string]string{}
	for i := range 30 {
		k, v := fmt.Sprintf("/registry/before/k%02d", i), fmt.Sprintf("value-%d", i)
		_, err := a.cli.Put(ctx, k, v)
		require.NoError(t, err)
		before[k] = v
	}
	// The snapshot as the agent takes it: its etcd client's Save, into
	// k3s's snapshot directory.
	c, err := etcdclient.New(etcdclient.Config{Endpoint: clientURL(a.o.nodeIP), Timeout: 3 * time.Second})
	require.NoError(t, err)
	defer c.Close()
	snap, err := c.Save(ctx, filepath.Join(dirA, "server", "db", "snapshots"), "fleet-role-s1-1796113200")
	require.NoError(t, err)
	for i := range 10 {
		_, err := a.cli.Put(ctx, fmt.Sprintf("/registry/after/k%02d", i), "later")
		require.NoError(t, err)
	}
	_, err = a.cli.Put(ctx, "/registry/before/k00", "changed after the snapshot")
	require.NoError(t, err)
	_, err = a.cli.Delete(ctx, "/registry/before/k01")
	require.NoError(t, err)
	oldName := a.name
	a.close()
	b.close()

	o := testOptions(dirA, "srv-a", 30)
	log := slog.New(slog.DiscardHandler)
	reset := func(path string) error {
		return resetCluster(ctx, o, config{Token: "secret", ClusterReset: true, ClusterResetRestorePath: path}, log)
	}
	etcdDir := filepath.Join(dirA, "server", "db", "etcd")
	t.Run("a restore path that does not exist is refused and the datastore left alone", func(t *testing.T) {
		absent := filepath.Join(dirA, "absent")
		assert.EqualError(t, reset(absent), "etcd: snapshot path does not exist: "+absent)
		assert.DirExists(t, filepath.Join(etcdDir, "member"))
		assert.NoFileExists(t, resetFlagFile(dirA))
	})
	t.Run("a reset while a server URL is set is refused and the datastore left alone", func(t *testing.T) {
		err := resetCluster(ctx, o, config{Token: "secret", Server: "https://10.0.0.2:6443", ClusterReset: true, ClusterResetRestorePath: snap.Path}, log)
		assert.EqualError(t, err, "cannot perform cluster-reset while server URL is set - remove server from configuration before resetting")
		assert.DirExists(t, filepath.Join(etcdDir, "member"))
		assert.NoFileExists(t, resetFlagFile(dirA))
	})
	t.Run("a restore path that is a directory is refused", func(t *testing.T) {
		dir := filepath.Dir(snap.Path)
		assert.EqualError(t, reset(dir), "etcd: snapshot path must be a file, not a directory: "+dir)
		assert.DirExists(t, filepath.Join(etcdDir, "member"))
	})

	require.NoError(t, reset(snap.Path))
	old, err := filepath.Glob(etcdDir + "-old-*")
	require.NoError(t, err)
	assert.Len(t, old, 1, "the datastore before the restore is moved aside")
	assert.FileExists(t, resetFlagFile(dirA))
	name, err := os.ReadFile(filepath.Join(etcdDir, "name"))
	require.NoError(t, err)
	assert.NotEqual(t, oldName, string(name), "a reset makes the member a new name")
	assert.True(t, strings.HasPrefix(string(name), "srv-a-"))

	err = resetCluster(ctx, o, config{Token: "secret", ClusterReset: true}, log)
	require.Error(t, err, "a second reset without a restore path")
	assert.Contains(t, err.Error(), "Managed etcd cluster membership was previously reset")

	a, err = testServerIn(t, dirA, "srv-a", 30, config{ClusterInit: true, Token: "secret"})
	require.NoError(t, err, "started again without the flag")
	tickUntil(t, "the restored server is ready: its token's key came back with the snapshot", a.ready.Load, a)
	assert.NoFileExists(t, resetFlagFile(dirA), "a normal start clears the reset flag")
	list, err := a.cli.MemberList(ctx)
	require.NoError(t, err)
	require.Len(t, list.Members, 1)
	assert.Equal(t, string(name), list.Members[0].Name)
	assert.Equal(t, before, registry(t, a.cli), "exactly the keys written before the snapshot")

	// The other server's db set aside, it joins the restored one again.
	require.NoError(t, os.Rename(filepath.Join(dirB, "server", "db"), filepath.Join(dirB, "server", "db-before-restore")))
	b, err = testServerIn(t, dirB, "srv-b", 31, config{Server: join, Token: "secret"})
	require.NoError(t, err)
	tickUntil(t, "the other server votes again", b.ready.Load, a, b)
	assert.Equal(t, before, registry(t, b.cli))
}
