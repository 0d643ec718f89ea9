package etcdclient_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/daemon/etcdclient"
	"github.com/fleet-role/fleet-role/tests/etcdtest"
)

func TestTheMembersLatencyHistogramsAreReadFromItsMetricsAndGrowWithItsWrites(t *testing.T) {
	ms := etcdtest.Cluster(t, "v1")
	c := wrap(t, ms[0])
	ctx := context.Background()
	before, err := c.Latencies(ctx)
	require.NoError(t, err)
	require.NotNil(t, before.WALFsync)
	require.NotNil(t, before.BackendCommit)
	assert.NotEmpty(t, before.WALFsync.Buckets, "etcd's buckets, +Inf left out")
	assert.Equal(t, 0.001, before.WALFsync.Buckets[0].LE, "etcd's first bound: 1 ms")
	require.NoError(t, before.WALFsync.Validate())
	require.NoError(t, before.BackendCommit.Validate())

	cl := etcdtest.Client(t, ms[0])
	for i := range 20 {
		_, err := cl.Put(ctx, fmt.Sprintf("k%d", i), "v")
		require.NoError(t, err)
	}
	after, err := c.Latencies(ctx)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, after.WALFsync.Count, before.WALFsync.Count+20, "a WAL fsync a put at least")
	assert.Greater(t, after.WALFsync.Sum, before.WALFsync.Sum)
	assert.GreaterOrEqual(t, after.WALFsync.Count, after.WALFsync.Buckets[len(after.WALFsync.Buckets)-1].Count, "the +Inf bucket holds every one")
}

func TestLatenciesOfAMemberThatDoesNotAnswerSayWhy(t *testing.T) {
	ms := etcdtest.Cluster(t, "v1")
	c, err := etcdclient.New(etcdclient.Config{Endpoint: ms[0].Client, Timeout: 200 * time.Millisecond})
	require.NoError(t, err)
	defer c.Close()
	ms[0].Stop()
	_, err = c.Latencies(context.Background())
	assert.ErrorContains(t, err, "etcd metrics: ")
}
