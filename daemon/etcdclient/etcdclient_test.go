package etcdclient_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/fleet-role/fleet-role/daemon/etcdclient"
	"github.com/fleet-role/fleet-role/tests/etcdtest"
)

func wrap(t *testing.T, m *etcdtest.Member) *etcdclient.Client {
	c, err := etcdclient.New(etcdclient.Config{Endpoint: m.Client, Timeout: 3 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func leaderOf(t *testing.T, ms []*etcdtest.Member) (*etcdtest.Member, []*etcdtest.Member) {
	st, err := wrap(t, ms[0]).Status(context.Background())
	require.NoError(t, err)
	var others []*etcdtest.Member
	var leader *etcdtest.Member
	for _, m := range ms {
		if m.E != nil && uint64(m.E.Server.MemberID()) == st.Leader {
			leader = m
		} else if m.E != nil {
			others = append(others, m)
		}
	}
	require.NotNil(t, leader)
	return leader, others
}

func TestMembersStatusAndAReadOfARealCluster(t *testing.T) {
	ms := etcdtest.Cluster(t, "h1", "h2", "h3")
	c := wrap(t, ms[1])
	ctx := context.Background()
	members, err := c.Members(ctx)
	require.NoError(t, err)
	var names []string
	for _, m := range members {
		names = append(names, m.Name)
		assert.False(t, m.Learner)
	}
	assert.ElementsMatch(t, []string{"h1-0a1b2c3d", "h2-0a1b2c3d", "h3-0a1b2c3d"}, names)
	st, err := c.Status(ctx)
	require.NoError(t, err)
	assert.Equal(t, uint64(ms[1].E.Server.MemberID()), st.MemberID)
	assert.NotZero(t, st.Leader)
	assert.Positive(t, st.DBSize)
	assert.Positive(t, st.DBSizeInUse)
	assert.LessOrEqual(t, st.DBSizeInUse, st.DBSize)
	assert.Positive(t, st.RaftIndex)
	assert.Positive(t, st.RaftTerm)
	assert.False(t, st.Learner)
	assert.Empty(t, st.Errors)
	d, err := c.Read(ctx)
	require.NoError(t, err)
	assert.Less(t, d, time.Second)
	assert.Equal(t, "h2", etcdclient.NodeOf(ms[1].Name))
}

func TestALearnerIsAddedPromotedOnceCaughtUpAndAMemberRemoved(t *testing.T) {
	ms := etcdtest.Cluster(t, "h1", "h2", "h3")
	ctx := context.Background()
	admin := etcdtest.Client(t, ms...)
	var err error
	for i := range 200 {
		_, err = admin.Put(ctx, fmt.Sprintf("k%03d", i), strings.Repeat("v", 100))
		require.NoError(t, err)
	}
	// k3s joins a new server as a learner.
	n, id := addLearner(t, admin, "s1", true)
	list, err := wrap(t, ms[0]).Members(ctx)
	require.NoError(t, err)
	learners := 0
	for _, m := range list {
		if m.Learner {
			learners++
			assert.Equal(t, n.Name, m.Name)
		}
	}
	assert.Equal(t, 1, learners)
	// The learner says so of itself, and follows a leader (what status's
	// catch-up and fleet-role members read).
	require.Eventually(t, func() bool {
		st, err := wrap(t, n).Status(ctx)
		return err == nil && st.Learner && st.Leader != 0 && st.RaftIndex > 0
		// Its embedded etcd starting and taking the leader's snapshot:
		// the 30 s the promotion below is given for the same catch-up.
	}, 30*time.Second, 100*time.Millisecond, "the learner's own status")
	// ... and promotes it once it caught up: etcd refuses before that.
	require.Eventually(t, func() bool {
		_, err := admin.MemberPromote(ctx, id)
		return err == nil
	}, 30*time.Second, 100*time.Millisecond)
	// The promoted member serves the cluster's calls once it has applied
	// its own promotion ("rpc not supported for learner" until then).
	require.Eventually(t, func() bool {
		list, err = wrap(t, n).Members(ctx)
		return err == nil
	}, 10*time.Second, 100*time.Millisecond)
	assert.Len(t, list, 4)
	for _, m := range list {
		assert.False(t, m.Learner, m.Name)
	}
	resp, err := etcdtest.Client(t, n).Get(ctx, "k199")
	require.NoError(t, err)
	assert.Len(t, resp.Kvs, 1, "the promoted member serves the data")

	// k3s removes a member; the others list it gone. Note: etcd refuses
	// ("unhealthy cluster") while a member that just joined is not yet
	// counted active; k3s tries again, and so does this.
	removeMember(t, admin, uint64(ms[2].E.Server.MemberID()))
	ms[2].Stop()
	list, err = wrap(t, n).Members(ctx)
	require.NoError(t, err)
	assert.Len(t, list, 3)
}

func removeMember(t *testing.T, c *clientv3.Client, id uint64) {
	var err error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		tried := err != nil
		_, err = c.MemberRemove(context.Background(), id)
		// "member not found" after a try that failed: that try removed it
		// and only its answer was lost.
		if err == nil || tried && errors.Is(err, rpctypes.ErrMemberNotFound) {
			return
		}
	}
	require.NoError(t, err, "remove member %x", id)
}

// writer puts a key every few milliseconds through a client of the given
// members, each write given twice the election timeout, and counts the
// writes that fail and the longest time from a failure to a success.
type writer struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	failedAt   time.Time
	worst      time.Duration
	slowest    time.Duration
	stop       chan struct{}
	done       chan struct{}
}

func write(t *testing.T, c *clientv3.Client) *writer {
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			select {
			case <-w.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*etcdtest.ElectionTimeout)
			start := time.Now()
			_, err := c.Put(ctx, fmt.Sprintf("w%06d", i), "x")
			took := time.Since(start)
			cancel()
			w.mu.Lock()
			w.slowest = max(w.slowest, took)
			if err != nil {
				w.failed.Add(1)
				if w.failedAt.IsZero() {
					w.failedAt = time.Now()
				}
			} else {
				w.ok.Add(1)
				if !w.failedAt.IsZero() {
					w.worst = max(w.worst, time.Since(w.failedAt))
					w.failedAt = time.Time{}
				}
			}
			w.mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return w
}

func (w *writer) end() (ok, failed int64, recovery time.Duration) {
	close(w.stop)
	<-w.done
	return w.ok.Load(), w.failed.Load(), w.worst
}

func (w *writer) slowestWrite() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.slowest.Round(time.Millisecond)
}

func TestWritesGoOnThroughALeaderMoveAndAMemberRemoval(t *testing.T) {
	ms := etcdtest.Cluster(t, "h1", "h2", "h3", "h4")
	ctx := context.Background()
	leader, others := leaderOf(t, ms)
	w := write(t, etcdtest.Client(t, others...))
	time.Sleep(300 * time.Millisecond)

	// The step-down: leadership moved to the preferred healthy voter.
	prefer := etcdclient.NodeOf(others[1].Name)
	to, err := wrap(t, leader).MoveLeaderAway(ctx, prefer)
	require.NoError(t, err)
	assert.Equal(t, others[1].Name, to, "the preferred voter (the swap's candidate) leads")
	time.Sleep(300 * time.Millisecond)
	okMove, failedMove, recoverMove := w.end()
	slowMove := w.slowestWrite()
	to, err = wrap(t, others[0]).MoveLeaderAway(ctx, "")
	require.NoError(t, err)
	assert.Empty(t, to, "a member that does not lead moves nothing")

	// The removal of the member stepped down, no longer leading.
	w = write(t, etcdtest.Client(t, others...))
	time.Sleep(200 * time.Millisecond)
	removeMember(t, etcdtest.Client(t, others...), uint64(leader.E.Server.MemberID()))
	leader.Stop()
	time.Sleep(500 * time.Millisecond)
	okRemove, failedRemove, recoverRemove := w.end()
	slowRemove := w.slowestWrite()

	t.Logf("failed writes (each given %s): across the leader move %d of %d (slowest write %s, recovered within %s); "+
		"across the member removal %d of %d (slowest %s, recovered within %s)",
		2*etcdtest.ElectionTimeout, failedMove, okMove+failedMove, slowMove, recoverMove, failedRemove, okRemove+failedRemove, slowRemove, recoverRemove)
	// The goal is no failed write across the move; a write in flight as
	// leadership changes hands may still fail, and must be followed by a
	// success within twice the election timeout, which quorum lost never
	// meets.
	assert.LessOrEqual(t, failedMove, int64(1), "at most the write in flight fails across a leader move")
	assert.LessOrEqual(t, recoverMove, 2*etcdtest.ElectionTimeout)
	assert.Zero(t, failedRemove, "no write fails across the removal of a member that does not lead")
	assert.Positive(t, okMove)
	assert.Positive(t, okRemove)
}

func TestLeadershipIsNotMovedToAVoterThatDoesNotAnswer(t *testing.T) {
	ms := etcdtest.Cluster(t, "h1", "h2", "h3")
	ctx := context.Background()
	leader, others := leaderOf(t, ms)
	dead := others[0]
	// Note: the stopped member still is a member; quorum holds with two.
	dead.Stop()
	to, err := wrap(t, leader).MoveLeaderAway(ctx, etcdclient.NodeOf(dead.Name))
	require.NoError(t, err)
	assert.Equal(t, others[1].Name, to, "the preferred voter does not answer: the other one")
}

func TestASnapshotIsVerifiedAndRestoresIntoAFreshMemberWithTheSameKeys(t *testing.T) {
	ms := etcdtest.Cluster(t, "h1", "h2", "h3")
	ctx := context.Background()
	admin := etcdtest.Client(t, ms...)
	want := map[string]string{}
	for i := range 300 {
		k, v := fmt.Sprintf("/registry/k%03d", i), fmt.Sprintf("value-%d", i)
		_, err := admin.Put(ctx, k, v)
		require.NoError(t, err)
		want[k] = v
	}
	// A linearizable read through the member waits until it applied every
	// write: its snapshot then holds them all.
	_, err := etcdtest.Client(t, ms[1]).Get(ctx, "/registry/k299")
	require.NoError(t, err)
	dir := t.TempDir()
	snap, err := wrap(t, ms[1]).Save(ctx, dir, "pre-swap.db")
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "pre-swap.db"), snap.Path)
	fi, err := os.Stat(snap.Path)
	require.NoError(t, err)
	assert.Equal(t, fi.Size(), snap.Size)
	assert.Len(t, snap.SHA256, 64)
	_, err = os.Stat(snap.Path + ".part")
	assert.True(t, os.IsNotExist(err), "no partial file left")

	// Restore it, as an operator would with etcdutl, into a fresh member.
	fresh := etcdtest.New(t, "r1")
	require.NoError(t, os.RemoveAll(fresh.Dir))
	err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath: snap.Path, Name: fresh.Name, OutputDataDir: fresh.Dir,
		PeerURLs: []string{fresh.Peer}, InitialCluster: fresh.Name + "=" + fresh.Peer, InitialClusterToken: "restored",
	})
	require.NoError(t, err)
	fresh.Start(t, fresh.Name+"="+fresh.Peer, embed.ClusterStateFlagExisting)
	resp, err := etcdtest.Client(t, fresh).Get(ctx, "/registry/", clientv3.WithPrefix())
	require.NoError(t, err)
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	assert.Equal(t, want, got)
}

// addLearner adds a member of the node as a learner, as k3s joins a new
// server, and starts it when start says so.
func addLearner(t *testing.T, admin *clientv3.Client, node string, start bool) (*etcdtest.Member, uint64) {
	ctx := context.Background()
	n := etcdtest.New(t, node)
	var added *clientv3.MemberAddResponse
	var err error
	require.Eventually(t, func() bool {
		added, err = admin.MemberAddAsLearner(ctx, []string{n.Peer})
		return err == nil
	}, 30*time.Second, 200*time.Millisecond, "add a learner")
	if start {
		var initial []string
		for _, m := range added.Members {
			name := m.Name
			if m.ID == added.Member.ID {
				name = n.Name
			}
			initial = append(initial, name+"="+m.PeerURLs[0])
		}
		n.Start(t, strings.Join(initial, ","), embed.ClusterStateFlagExisting)
	}
	return n, added.Member.ID
}

func names(t *testing.T, c *etcdclient.Client) []string {
	list, err := c.Members(context.Background())
	require.NoError(t, err)
	var out []string
	for _, m := range list {
		out = append(out, m.Name)
	}
	return out
}

func TestAVoterRemovesACandidatesLearnerWhoseServerStoppedAndARemovalAskedAgainIsDone(t *testing.T) {
	ms := etcdtest.Cluster(t, "h1", "h2", "h3")
	admin := etcdtest.Client(t, ms...)
	ctx := context.Background()
	n, id := addLearner(t, admin, "s1", true)
	c := wrap(t, ms[1])
	require.Eventually(t, func() bool { return slices.Contains(names(t, c), n.Name) }, 10*time.Second, 100*time.Millisecond)
	n.Stop() // the candidate stepped down; its apiserver never came up

	removed, err := c.RemoveMember(ctx, n.Name, id)
	require.NoError(t, err)
	assert.True(t, removed)
	assert.ElementsMatch(t, []string{"h1-0a1b2c3d", "h2-0a1b2c3d", "h3-0a1b2c3d"}, names(t, c))

	removed, err = c.RemoveMember(ctx, n.Name, id)
	require.NoError(t, err, "a member already gone counts as removed")
	assert.False(t, removed)
	removed, err = c.RemoveMember(ctx, n.Name, 0)
	require.NoError(t, err, "by name alone too")
	assert.False(t, removed)
}

func TestAVoterRemovesALearnerThatNeverStartedByItsID(t *testing.T) {
	ms := etcdtest.Cluster(t, "h1", "h2", "h3")
	admin := etcdtest.Client(t, ms...)
	_, id := addLearner(t, admin, "s1", false)
	c := wrap(t, ms[0])
	assert.Contains(t, names(t, c), "", "etcd lists a learner that never started without a name")
	removed, err := c.RemoveMember(context.Background(), "", id)
	require.NoError(t, err)
	assert.True(t, removed)
	assert.Len(t, names(t, c), 3)
}

func TestRemoveMemberRefusesWhatWouldHarmTheCluster(t *testing.T) {
	ms := etcdtest.Cluster(t, "h1", "h2", "h3")
	ctx := context.Background()
	c := wrap(t, ms[0])
	own := uint64(ms[0].E.Server.MemberID())
	h2 := uint64(ms[1].E.Server.MemberID())
	for _, tc := range []struct {
		name   string
		member string
		id     uint64
		want   error
	}{
		{"a host never removes its own member, by name", "h1-0a1b2c3d", 0, etcdclient.ErrOwnMember},
		{"a host never removes its own member, by ID", "", own, etcdclient.ErrOwnMember},
		{"an ID whose member carries another name is refused", "h3-0a1b2c3d", h2, etcdclient.ErrAmbiguous},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.RemoveMember(ctx, tc.member, tc.id)
			assert.ErrorIs(t, err, tc.want)
			assert.Len(t, names(t, c), 3, "nothing removed")
		})
	}
	t.Run("a voter is not removed while the voters left that answer are not a quorum", func(t *testing.T) {
		ms[2].Stop()
		_, err := c.RemoveMember(ctx, "h2-0a1b2c3d", h2)
		assert.ErrorIs(t, err, etcdclient.ErrNoQuorum)
		assert.ErrorContains(t, err, "1 of 2 voters left answer, 2 needed")
		assert.Len(t, names(t, c), 3, "nothing removed")
	})
}

func TestAFailedSnapshotLeavesNoFileBehind(t *testing.T) {
	ms := etcdtest.Cluster(t, "h1")
	ctx := context.Background()
	c, err := etcdclient.New(etcdclient.Config{Endpoint: ms[0].Client, Timeout: 2 * time.Second, SnapshotTimeout: time.Nanosecond})
	require.NoError(t, err)
	defer c.Close()
	dir := t.TempDir()
	_, err = c.Save(ctx, dir, "fleet-role-s1-100")
	require.Error(t, err, "the snapshot's time is up before it is whole")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, entries, "neither the snapshot nor its partial file")
}

// A demoted host's member is gone for as long as it stays a standby, then
// comes back when it is promoted again, maybe days later: its agent must
// reach it again at once, not after gRPC's reconnect backoff, which grows
// to two minutes while nothing answers (a promotion's join would be judged
// on samples that cannot list members meanwhile). Note: the member is down
// long enough for gRPC's default backoff (1 s × 1.6ⁿ, jittered) to pass a
// minute between attempts.
func TestAMemberBackAfterMinutesDownIsReachedAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("the member stays down for 80 s")
	}
	m := etcdtest.New(t, "h1")
	m.Start(t, m.Name+"="+m.Peer, embed.ClusterStateFlagNew)
	c := wrap(t, m)
	_, err := c.Members(context.Background())
	require.NoError(t, err)
	m.Stop()
	time.Sleep(80 * time.Second)
	m.Start(t, m.Name+"="+m.Peer, embed.ClusterStateFlagNew)
	back := time.Now()
	var took time.Duration
	require.Eventually(t, func() bool {
		_, err := c.Members(context.Background())
		took = time.Since(back)
		return err == nil
	}, time.Minute, 100*time.Millisecond)
	t.Logf("members listed %s after the member was back", took.Round(time.Millisecond))
	assert.Less(t, took, 10*time.Second, "the member is reached within a reconnect's short wait")
}

func TestMembersOfAsksTheOtherMembersWhenTheLocalOneIsGone(t *testing.T) {
	ms := etcdtest.Cluster(t, "h1", "h2", "h3")
	c := wrap(t, ms[2])
	ctx := context.Background()
	others := []string{ms[0].Client, ms[1].Client}
	members, err := c.MembersOf(ctx, others)
	require.NoError(t, err)
	require.Len(t, members, 3)
	var own etcdclient.Member
	for _, m := range members {
		if m.Name == ms[2].Name {
			own = m
		}
	}
	require.NotZero(t, own.ID)
	require.NotEmpty(t, own.PeerURLs, "a member is listed with its peer URLs, as a learner not started yet is listed by them alone")

	ms[2].Stop()
	_, err = wrap(t, ms[0]).RemoveMember(ctx, "", own.ID)
	require.NoError(t, err)
	members, err = c.MembersOf(ctx, others)
	require.NoError(t, err)
	assert.Len(t, members, 2)
	for _, m := range members {
		assert.NotEqual(t, own.ID, m.ID, "the removed member is not listed")
	}
	_, err = c.Members(ctx)
	assert.Error(t, err, "the local member, stopped, answers nothing")

	ms[0].Stop()
	ms[1].Stop()
	start := time.Now()
	_, err = c.MembersOf(ctx, others)
	assert.ErrorContains(t, err, "etcd member list")
	assert.Less(t, time.Since(start), 3*time.Second+2*time.Second, "within the client's timeout")
}

func TestAMemberStoppedIsNamedUnansweringByTheOthersAndNoMemberElseIs(t *testing.T) {
	ms := etcdtest.Cluster(t, "h1", "h2", "h3")
	ctx := context.Background()
	c := wrap(t, ms[0])
	members, err := c.Members(ctx)
	require.NoError(t, err)
	local := uint64(ms[0].E.Server.MemberID())
	none, err := c.Unanswering(ctx, members, local)
	require.NoError(t, err)
	assert.Empty(t, none, "every member answers")

	ms[2].Stop()
	got, err := c.Unanswering(ctx, members, local)
	require.NoError(t, err)
	assert.Equal(t, []string{ms[2].Name}, got)
	// Through another member, the same one.
	got, err = wrap(t, ms[1]).Unanswering(ctx, members, uint64(ms[1].E.Server.MemberID()))
	require.NoError(t, err)
	assert.Equal(t, []string{ms[2].Name}, got)
}
