package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/swapplan"
)

// fleet is the scenarios' fleet: three voters, the first the bootstrap
// host, a standby on the Docker platform, and an agent.
func fleet(t *testing.T, opts Options) *Fleet {
	if opts.Hosts == nil {
		opts.Hosts = []HostSpec{
			{Name: "v1", Role: swapplan.RoleVoter},
			{Name: "v2", Role: swapplan.RoleVoter},
			{Name: "v3", Role: swapplan.RoleVoter},
			{Name: "s1", Role: swapplan.RoleStandby, Docker: true},
			{Name: "a1", Role: swapplan.RoleAgent},
		}
	}
	opts.Log = t.Logf
	return Start(t, opts)
}

// swap asks for a manual swap and waits for its end.
func (f *Fleet) swap(t *testing.T, out, in string, timeout time.Duration) *swapplan.SwapResult {
	t.Helper()
	prev := f.Status().Last
	_, stderr, code := f.CLI("swap", out, in)
	require.Equal(t, 0, code, stderr)
	return f.waitEnd(t, prev, timeout)
}

// waitEnd waits for a swap to end after prev, the last one before.
func (f *Fleet) waitEnd(t *testing.T, prev *swapplan.SwapResult, timeout time.Duration) *swapplan.SwapResult {
	t.Helper()
	var st swapplan.Status
	f.Wait(timeout, "the swap ends", func() error {
		st = f.Status()
		if st.Last != nil && st.Swap == nil && (prev == nil || st.Last.ID != prev.ID) {
			return nil
		}
		return errorf("step %s: %s", st.Step, st.Reason)
	})
	return st.Last
}

func TestASwapInAndOutWithWritesThroughoutThenTheBootstrapHostPromotedAgain(t *testing.T) {
	f := fleet(t, Options{})
	c := f.Etcd()
	before, err := f.Members(c)
	require.NoError(t, err)
	f.StartController()

	w := f.StartWrites(c)
	res := f.swap(t, "v1", "s1", 4*time.Minute)
	count := w.Count()
	t.Logf("v1 out, s1 in: %s; writes: %s", res.Result, count)
	require.Equal(t, swapplan.ResultCompleted, res.Result, res.Reason)
	require.NoError(t, f.Check(c, before.ClusterID, swapplan.ResultCompleted))
	assert.Equal(t, 0, count.Failed, "no failed write with the leader moved")
	assert.False(t, count.Unanswered)
	assert.LessOrEqual(t, count.Longest, 2*ElectionTimeout)

	w = f.StartWrites(c)
	res = f.swap(t, "v2", "v1", 4*time.Minute)
	count = w.Count()
	t.Logf("v2 out, v1 (the bootstrap host) in again: %s; writes: %s", res.Result, count)
	require.Equal(t, swapplan.ResultCompleted, res.Result, res.Reason)
	require.NoError(t, f.Check(c, before.ClusterID, swapplan.ResultCompleted))
	assert.Equal(t, 0, count.Failed)
	assert.LessOrEqual(t, count.Longest, 2*ElectionTimeout)
}
