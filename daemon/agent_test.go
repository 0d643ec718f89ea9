package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/daemon/etcdclient"
	"github.com/fleet-role/fleet-role/platform"
	"github.com/fleet-role/fleet-role/platform/fake"
)

// fakeEtcd is the host's etcd member as the agent sees it.
type fakeEtcd struct {
	mu       sync.Mutex
	members  []etcdclient.Member
	moved    []string
	saved    int
	removals []string
	// others is the member list the other members give (MembersOf), nil
	// when they do not answer; asked are the endpoints of each call.
	others []etcdclient.Member
	asked  [][]string
}

func (e *fakeEtcd) MembersOf(_ context.Context, endpoints []string) ([]etcdclient.Member, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.asked = append(e.asked, endpoints)
	if e.others == nil {
		return nil, errors.New("etcd member list: context deadline exceeded")
	}
	return append([]etcdclient.Member(nil), e.others...), nil
}

func (e *fakeEtcd) Unanswering(context.Context, []etcdclient.Member, uint64) ([]string, error) {
	return nil, nil
}

// setOthers sets what the other members list.
func (e *fakeEtcd) setOthers(m []etcdclient.Member) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.others = m
}

func (e *fakeEtcd) Members(context.Context) ([]etcdclient.Member, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]etcdclient.Member(nil), e.members...), nil
}

func (e *fakeEtcd) Status(context.Context) (etcdclient.Status, error) {
	return etcdclient.Status{MemberID: 2, Leader: 1, RaftIndex: 912, RaftTerm: 3, DBSize: 1 << 20, DBSizeInUse: 1 << 19, Errors: []string{"NOSPACE"}}, nil
}

func (e *fakeEtcd) Read(context.Context) (time.Duration, error) { return time.Millisecond, nil }

func (e *fakeEtcd) MoveLeaderAway(_ context.Context, prefer string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.moved = append(e.moved, prefer)
	return "h1-0a1b2c3d", nil
}

func (e *fakeEtcd) Save(_ context.Context, dir, name string) (etcdclient.Snapshot, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.saved++
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return etcdclient.Snapshot{}, err
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("snapshot"), 0o600); err != nil {
		return etcdclient.Snapshot{}, err
	}
	sum := sha256.Sum256([]byte("snapshot"))
	return etcdclient.Snapshot{Path: path, Size: 8, SHA256: hex.EncodeToString(sum[:])}, nil
}

// RemoveMember removes a member as the etcd client does: never its own
// (ID 2), a member no longer listed counts as removed.
func (e *fakeEtcd) RemoveMember(_ context.Context, name string, id uint64) (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.removals = append(e.removals, fmt.Sprintf("%s/%x", name, id))
	for i, m := range e.members {
		if m.ID == id || id == 0 && m.Name == name {
			if m.ID == 2 {
				return false, etcdclient.ErrOwnMember
			}
			e.members = append(e.members[:i:i], e.members[i+1:]...)
			return true, nil
		}
	}
	return false, nil
}

// fixture is one host: its files in a temp dir, the fake platform, a fake
// API server holding its Node, and the agent running on them.
// fakeCore is the fake Clientset's core/v1 client, saying, as the
// Clientset itself does, that its watches send no initial events: an
// informer then lists and watches rather than waiting on a watch-list.
type fakeCore struct{ typedcorev1.CoreV1Interface }

func (fakeCore) IsWatchListSemanticsUnSupported() bool { return true }

type fixture struct {
	t       *testing.T
	dir     string
	cfg     config.Agent
	plat    *fake.Platform
	kube    *k8sfake.Clientset
	etcd    *fakeEtcd
	notes   chan string
	cancel  context.CancelFunc
	done    chan error
	patches atomic.Int32
	// registry takes the agent's metrics; nil for a new one.
	registry *prometheus.Registry
	agent    *Agent
	// realEtcd, when set, is the host's member instead of etcd.
	realEtcd Etcd
	// status is the last status line told to systemd (lastNote).
	status string
	// looks counts the reads of the server unit's state, a look's first
	// read: how often the agent looks at its host.
	looks atomic.Int64
}

// countingPlatform is the fake platform, counting the reads of the server
// unit's state.
type countingPlatform struct {
	*fake.Platform
	n *atomic.Int64
}

func (p countingPlatform) State(ctx context.Context, u platform.Unit) (platform.State, error) {
	if u == platform.Server {
		p.n.Add(1)
	}
	return p.Platform.State(ctx, u)
}

func newFixture(t *testing.T) *fixture {
	dir := t.TempDir()
	cfg := config.DefaultAgent()
	cfg.NodeName = "h2"
	cfg.DataDir = filepath.Join(dir, "k3s")
	cfg.RoleFile = filepath.Join(dir, "fleet-role", "role")
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.TokenFile = filepath.Join(dir, "state", "token")
	cfg.StagedFiles = []string{filepath.Join(dir, "etc", "config.yaml")}
	cfg.JoinFile = filepath.Join(dir, "etc", "config.yaml.d", "90-fleet-role.yaml")
	cfg.Servers = []config.Server{{Name: "h1", Address: "10.0.0.1"}, {Name: "h2", Address: "10.0.0.2"}, {Name: "h3", Address: "10.0.0.3"}}
	cfg.ResyncPeriod = 500 * time.Millisecond
	cfg.Debounce = 10 * time.Millisecond
	f := &fixture{
		t:    t,
		dir:  dir,
		cfg:  cfg,
		plat: fake.New(time.Now),
		kube: k8sfake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "h2", Annotations: map[string]string{}}}),
		etcd: &fakeEtcd{members: []etcdclient.Member{{ID: 1, Name: "h1-0a1b2c3d"}, {ID: 2, Name: "h2-0a1b2c3d"}, {ID: 3, Name: "h3-0a1b2c3d"}}},
	}
	f.kube.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if p, ok := a.(k8stesting.PatchAction); ok && strings.Contains(string(p.GetPatch()), api.AnnotationReport) {
			f.patches.Add(1) // the reports' patches, not the probes'
		}
		return false, nil, nil
	})
	return f
}

// write writes the file whole, by a rename, as Ansible's template and
// the agent itself do: os.WriteFile truncates first, and the agent, woken
// by the truncation, could read the file empty, a role file that is
// corrupt for a moment.
func (f *fixture) write(path, content string) {
	f.t.Helper()
	require.NoError(f.t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(f.t, platform.WriteFileAtomic(path, []byte(content), 0o644))
}

func (f *fixture) staged()         { f.write(f.cfg.StagedFiles[0], "cluster-init: false\n") }
func (f *fixture) role(r string)   { f.write(f.cfg.RoleFile, r+"\n") }
func (f *fixture) etcdDir() string { return filepath.Join(f.cfg.DataDir, "server", "db", "etcd") }

// tombstone writes k3s's tombstone in the datastore, an empty file made
// in place as k3s makes it: by a rename (f.write), the fsync of the
// directory after it would race the agent moving that directory aside.
func (f *fixture) tombstone() {
	f.t.Helper()
	require.NoError(f.t, os.MkdirAll(f.etcdDir(), 0o755))
	require.NoError(f.t, os.WriteFile(filepath.Join(f.etcdDir(), "tombstone"), nil, 0o600))
}
func (f *fixture) datastore(name string) {
	f.write(filepath.Join(f.etcdDir(), "name"), name+"\n")
	f.write(filepath.Join(f.etcdDir(), "member", "snap", "db"), "x")
}

func (f *fixture) start() {
	f.t.Helper()
	f.notes = make(chan string, 100)
	var member Etcd = f.etcd
	if f.realEtcd != nil {
		member = f.realEtcd
	}
	a, err := New(Options{Config: f.cfg, Platform: countingPlatform{f.plat, &f.looks}, Kube: fakeCore{f.kube.CoreV1()}, Etcd: member,
		Notify: func(s string) error { f.notes <- s; return nil }, Registry: f.registry})
	require.NoError(f.t, err)
	f.agent = a
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel, f.done = cancel, make(chan error, 1)
	go func() { f.done <- a.Run(ctx) }()
	f.t.Cleanup(func() { f.stop() })
}

func (f *fixture) stop() {
	if f.cancel == nil {
		return
	}
	f.cancel()
	select {
	case err := <-f.done:
		assert.NoError(f.t, err, "an ended context is a clean exit")
	case <-time.After(10 * time.Second):
		f.t.Error("the agent did not stop")
	}
	f.cancel = nil
}

func (f *fixture) annotate(key, value string) {
	f.t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	_, err := f.kube.CoreV1().Nodes().Patch(context.Background(), "h2", types.MergePatchType, patch, metav1.PatchOptions{})
	require.NoError(f.t, err)
}

func (f *fixture) request(action string) api.Request {
	q := api.Request{Swap: "s1", Action: action, At: time.Now().UTC().Truncate(time.Second)}
	if action == api.RequestPromote {
		q.Voters = []string{"h3", "h1"}
	}
	b, _ := json.Marshal(q)
	f.annotate(api.AnnotationRequest, string(b))
	return q
}

// report is the report on the Node, nil if none.
func (f *fixture) report() *api.Report {
	n, err := f.kube.CoreV1().Nodes().Get(context.Background(), "h2", metav1.GetOptions{})
	require.NoError(f.t, err)
	v, ok := n.Annotations[api.AnnotationReport]
	if !ok {
		return nil
	}
	var r api.Report
	require.NoError(f.t, json.Unmarshal([]byte(v), &r))
	return &r
}

func (f *fixture) waitReport(action, state string) *api.Report {
	f.t.Helper()
	var r *api.Report
	require.Eventually(f.t, func() bool {
		r = f.report()
		return r != nil && r.Action == action && r.State == state
	}, 10*time.Second, 20*time.Millisecond, "no %s %s report; last %+v", action, state, r)
	return r
}

func (f *fixture) calls(op string, u platform.Unit) int {
	n := 0
	for _, c := range f.plat.Calls() {
		if c.Op == op && c.Unit == u {
			n++
		}
	}
	return n
}

func (f *fixture) events(reason string) []corev1.Event {
	list, err := f.kube.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	require.NoError(f.t, err)
	var out []corev1.Event
	for _, e := range list.Items {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

func (f *fixture) removedDirs() []string {
	m, _ := filepath.Glob(filepath.Join(f.cfg.DataDir, "server", "db", "etcd-removed-*"))
	return m
}

func TestAPromotionOfAStagedStandbyStartsTheServerAndReportsItsStart(t *testing.T) {
	f := newFixture(t)
	f.staged()
	f.role("agent")
	f.plat.Set(platform.Agent, true, time.Now().Add(-time.Hour))
	f.start()
	q := f.request(api.RequestPromote)
	r := f.waitReport(api.RequestPromote, api.StateDone)
	require.NotNil(t, r.StartedAt)
	st, _ := f.plat.State(context.Background(), platform.Server)
	assert.True(t, st.Active)
	assert.Equal(t, st.StartedAt.UTC(), r.StartedAt.UTC())
	assert.True(t, q.At.Equal(*r.RequestAt))
	agent, _ := f.plat.State(context.Background(), platform.Agent)
	assert.False(t, agent.Active)
	b, _ := os.ReadFile(f.cfg.RoleFile)
	assert.Equal(t, "server\n", string(b))
	b, err := os.ReadFile(f.cfg.JoinFile)
	require.NoError(t, err)
	assert.Contains(t, string(b), "\nserver: https://10.0.0.1:6443\n", "the server joins through the first live voter of the inventory")
	fi, err := os.Stat(f.cfg.JoinFile)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), fi.Mode().Perm(), "readable by k3s whatever user it runs as, as config.yaml is; it holds no secret")
}

func TestAPromotionJoinsTheLiveVoterAtTheHTTPSListenPortOfThisHostsK3sConfig(t *testing.T) {
	f := newFixture(t)
	f.write(f.cfg.StagedFiles[0], "token-file: /etc/token\nhttps-listen-port: 7443\n")
	f.role("agent")
	f.plat.Set(platform.Agent, true, time.Now().Add(-time.Hour))
	f.start()
	f.request(api.RequestPromote)
	f.waitReport(api.RequestPromote, api.StateDone)
	b, err := os.ReadFile(f.cfg.JoinFile)
	require.NoError(t, err)
	assert.Contains(t, string(b), "\nserver: https://10.0.0.1:7443\n")
}

func TestAPromotionIsRefusedAndNothingChangesWhileThisHostsK3sConfigCannotBeRead(t *testing.T) {
	f := newFixture(t)
	f.write(f.cfg.StagedFiles[0], "https-listen-port: seven\n")
	f.role("agent")
	f.plat.Set(platform.Agent, true, time.Now().Add(-time.Hour))
	f.start()
	f.request(api.RequestPromote)
	r := f.waitReport(api.RequestPromote, api.StateRefused)
	assert.Contains(t, r.Message, `https-listen-port "seven" is not a port`)
	assert.Contains(t, r.Message, f.cfg.StagedFiles[0])
	assert.Empty(t, f.plat.Calls(), "no unit started or stopped")
	b, _ := os.ReadFile(f.cfg.RoleFile)
	assert.Equal(t, "agent\n", string(b))
	assert.NoFileExists(t, f.cfg.JoinFile)
}

func TestAPromotionNamingNoLiveServerOfTheInventoryFailsBeforeTheServerStarts(t *testing.T) {
	f := newFixture(t)
	f.staged()
	f.role("agent")
	f.plat.Set(platform.Agent, true, time.Now().Add(-time.Hour))
	f.start()
	q := api.Request{Swap: "s1", Action: api.RequestPromote, At: time.Now().UTC().Truncate(time.Second), Voters: []string{"h2", "h9"}}
	b, _ := json.Marshal(q)
	f.annotate(api.AnnotationRequest, string(b))
	r := f.waitReport(api.RequestPromote, api.StateFailed)
	assert.Contains(t, r.Message, "no voter named is a server of the inventory")
	st, _ := f.plat.State(context.Background(), platform.Server)
	assert.False(t, st.Active, "no server starts without a live server to join")
	assert.NoFileExists(t, f.cfg.JoinFile)
}

func TestAPromoteOnAHostThatIsNotStagedIsRefusedAndNothingChanges(t *testing.T) {
	f := newFixture(t)
	f.role("agent")
	f.plat.Set(platform.Agent, true, time.Now().Add(-time.Hour))
	f.start()
	f.request(api.RequestPromote)
	r := f.waitReport(api.RequestPromote, api.StateRefused)
	assert.Contains(t, r.Message, "not staged")
	assert.Empty(t, f.plat.Calls(), "no unit started or stopped")
	b, _ := os.ReadFile(f.cfg.RoleFile)
	assert.Equal(t, "agent\n", string(b))
}

// stepDown puts the host where a step-down leaves it: the role file says
// agent, the server stopped, its datastore there, the report written.
func stepDown(t *testing.T, f *fixture) {
	f.staged()
	f.role("server")
	f.datastore("h2-0a1b2c3d")
	f.plat.Set(platform.Server, true, time.Now().Add(-time.Hour))
	f.start()
	f.request(api.RequestStepDown)
	f.waitReport(api.RequestStepDown, api.StateDone)
	b, _ := os.ReadFile(f.cfg.RoleFile)
	require.Equal(t, "agent\n", string(b))
	st, _ := f.plat.State(context.Background(), platform.Server)
	require.False(t, st.Active)
	require.Len(t, f.etcd.moved, 1, "leadership moved away before the server stopped")
}

func TestATombstoneWrittenFinishesTheDemotion(t *testing.T) {
	f := newFixture(t)
	f.etcd.members = []etcdclient.Member{{ID: 2, Name: "h2-0a1b2c3d"}, {ID: 3, Name: "h3-0a1b2c3d"}, {ID: 1, Name: "h1-0a1b2c3d", Learner: true}}
	stepDown(t, f)
	time.Sleep(100 * time.Millisecond)
	assert.Zero(t, f.calls("start", platform.Agent), "waiting for the member to be gone")
	f.tombstone()
	r := f.waitReport(api.ReportFinish, api.StateDone)
	require.NotNil(t, r.StartedAt)
	assert.Equal(t, "s1", r.Swap)
	assert.NoDirExists(t, f.etcdDir())
	assert.Len(t, f.removedDirs(), 1)
	assert.Equal(t, "https://10.0.0.3:6443", f.plat.URL(), "the first other server that votes: h1 was a learner")
	b, err := os.ReadFile(f.cfg.JoinFile)
	require.NoError(t, err)
	assert.Contains(t, string(b), "\nserver: https://10.0.0.3:6443\n", "k3s's agent reads config.yaml's server: over K3S_URL: the drop-in names the same")
}

func TestAFinishedDemotionsAgentJoinsAtTheHTTPSListenPortOfTheLastDropIn(t *testing.T) {
	f := newFixture(t)
	stepDown(t, f)
	f.write(f.cfg.StagedFiles[0], "https-listen-port: 7443\n")
	f.write(filepath.Join(filepath.Dir(f.cfg.JoinFile), "50-port.yaml"), "https-listen-port: 8443\n")
	f.tombstone()
	f.waitReport(api.ReportFinish, api.StateDone)
	assert.Equal(t, "https://10.0.0.1:8443", f.plat.URL())
	b, err := os.ReadFile(f.cfg.JoinFile)
	require.NoError(t, err)
	assert.Contains(t, string(b), "\nserver: https://10.0.0.1:8443\n")
}

func TestMemberGoneNamingTheSwapFinishesADemotionWhoseRemovedNodeNameNamesAnotherMember(t *testing.T) {
	f := newFixture(t)
	stepDown(t, f)
	f.annotate(api.AnnotationEtcdRemovedNodeName, "h2-99999999")
	time.Sleep(100 * time.Millisecond)
	assert.Zero(t, f.calls("start", platform.Agent))
	f.annotate(api.AnnotationMemberGone, "s1")
	f.waitReport(api.ReportFinish, api.StateDone)
	assert.Equal(t, "https://10.0.0.1:6443", f.plat.URL())
}

func TestARoleFileEditedByHandIsActedOn(t *testing.T) {
	f := newFixture(t)
	f.staged()
	f.role("agent")
	f.plat.Set(platform.Agent, true, time.Now().Add(-time.Hour))
	f.start()
	time.Sleep(100 * time.Millisecond)
	assert.Empty(t, f.plat.Calls())
	f.role("server")
	require.Eventually(t, func() bool {
		st, _ := f.plat.State(context.Background(), platform.Server)
		return st.Active
	}, 5*time.Second, 10*time.Millisecond)
	agent, _ := f.plat.State(context.Background(), platform.Agent)
	assert.False(t, agent.Active)
	f.role("agent")
	require.Eventually(t, func() bool {
		st, _ := f.plat.State(context.Background(), platform.Agent)
		return st.Active
	}, 5*time.Second, 10*time.Millisecond)
	st, _ := f.plat.State(context.Background(), platform.Server)
	assert.False(t, st.Active)
	assert.Nil(t, f.report(), "a hand edit is no swap: nothing to report")
}

func TestACorruptRoleFileIsReportedAndNothingIsDone(t *testing.T) {
	f := newFixture(t)
	f.staged()
	f.write(f.cfg.RoleFile, "sever\n")
	f.datastore("h2-0a1b2c3d")
	f.tombstone()
	f.plat.Set(platform.Server, true, time.Now().Add(-time.Hour))
	f.start()
	require.Eventually(t, func() bool { return len(f.events("CorruptRoleFile")) == 1 }, 5*time.Second, 20*time.Millisecond)
	assert.Contains(t, f.events("CorruptRoleFile")[0].Message, `found "sever"`)
	f.request(api.RequestPromote)
	r := f.waitReport(api.RequestPromote, api.StateRefused)
	assert.Contains(t, r.Message, "corrupt role file")
	time.Sleep(3 * f.cfg.ResyncPeriod)
	assert.Empty(t, f.plat.Calls(), "nothing done, tombstone or not")
	assert.Len(t, f.events("CorruptRoleFile"), 1, "told once, not every resync")
	assert.DirExists(t, f.etcdDir())
}

func TestAnAgentKilledMidFinishAndRestartedFinishesOnce(t *testing.T) {
	f := newFixture(t)
	stepDown(t, f)
	release := f.plat.Block("start", platform.Agent)
	f.tombstone()
	require.Eventually(t, func() bool { return len(f.removedDirs()) == 1 }, 5*time.Second, 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	f.stop() // killed while starting the agent unit
	release()
	agent, _ := f.plat.State(context.Background(), platform.Agent)
	require.False(t, agent.Active)
	require.Equal(t, api.RequestStepDown, f.report().Action, "no finish reported yet")

	before := f.patches.Load()
	f.start()
	r := f.waitReport(api.ReportFinish, api.StateDone)
	require.NotNil(t, r.StartedAt)
	time.Sleep(4 * f.cfg.ResyncPeriod)
	assert.Len(t, f.removedDirs(), 1, "the datastore moved once")
	assert.Equal(t, int32(1), f.patches.Load()-before, "the finish reported once")
	agent, _ = f.plat.State(context.Background(), platform.Agent)
	assert.True(t, agent.Active)
	assert.Equal(t, agent.StartedAt.UTC(), r.StartedAt.UTC())
}

func TestAReportThatCannotBeWrittenIsRetriedAndDeliveredOnceTheAPIAnswers(t *testing.T) {
	f := newFixture(t)
	f.role("server")
	f.plat.Set(platform.Server, true, time.Now().Add(-time.Hour))
	var down atomic.Bool
	down.Store(true)
	var failed atomic.Int32
	f.kube.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if p, ok := a.(k8stesting.PatchAction); ok && strings.Contains(string(p.GetPatch()), api.AnnotationReport) && down.Load() {
			failed.Add(1)
			return true, nil, errors.New("dial tcp 10.0.0.1:6443: connect: no route to host")
		}
		return false, nil, nil
	})
	f.start()
	f.request(api.RequestSnapshot)
	require.Eventually(t, func() bool { return failed.Load() >= 3 }, 10*time.Second, 10*time.Millisecond)
	assert.Nil(t, f.report())

	// The agent restarts while the API is still out of reach: the report
	// is on disk, and the snapshot is not taken again.
	f.stop()
	b, err := os.ReadFile(filepath.Join(f.cfg.StateDir, "agent-state.json"))
	require.NoError(t, err)
	assert.Contains(t, string(b), `"pending"`)
	f.start()
	time.Sleep(200 * time.Millisecond)
	down.Store(false)
	r := f.waitReport(api.RequestSnapshot, api.StateDone)
	require.NotNil(t, r.Snapshot)
	assert.True(t, r.Snapshot.Ready())
	assert.Equal(t, 1, f.etcd.saved)
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(filepath.Join(f.cfg.StateDir, "agent-state.json"))
		return !strings.Contains(string(b), `"pending"`)
	}, 5*time.Second, 20*time.Millisecond, "the delivered report is no longer kept")
}

func TestABadRequestIsReportedAndIgnoredAndTheAgentGoesOn(t *testing.T) {
	f := newFixture(t)
	f.role("server")
	f.plat.Set(platform.Server, true, time.Now().Add(-time.Hour))
	f.start()
	f.annotate(api.AnnotationRequest, `{"swap":"s1","action":"reboot","at":"2026-11-30T12:00:00Z"}`)
	require.Eventually(t, func() bool { return len(f.events("BadRequest")) == 1 }, 5*time.Second, 20*time.Millisecond)
	assert.Contains(t, f.events("BadRequest")[0].Message, `"reboot" is not one of`)
	f.annotate(api.AnnotationRequest, `{not json`)
	require.Eventually(t, func() bool { return len(f.events("BadRequest")) == 2 }, 5*time.Second, 20*time.Millisecond)
	assert.Empty(t, f.plat.Calls())
	f.request(api.RequestSnapshot)
	f.waitReport(api.RequestSnapshot, api.StateDone)
}

// note is the next state the agent sent to systemd, its status lines
// left out; "" when none came in 5s.
func (f *fixture) note() string {
	for {
		select {
		case n := <-f.notes:
			if !strings.HasPrefix(n, "STATUS=") {
				return n
			}
		case <-time.After(5 * time.Second):
			return ""
		}
	}
}

func TestTheAgentTellsSystemdReadyAfterTheFirstLookAndStoppingOnTheWayOut(t *testing.T) {
	f := newFixture(t)
	f.role("agent")
	f.start()
	assert.Equal(t, "READY=1", f.note())
	f.stop()
	assert.Equal(t, "STOPPING=1", f.note())
}

func TestTheAgentsStatusLineSaysWhatItDoesOnceEachTimeItChanges(t *testing.T) {
	f := newFixture(t)
	f.role("agent")
	f.start()
	first := <-f.notes
	assert.Equal(t, "STATUS=the role file says agent and no datastore is left: the agent runs", first,
		"the status line comes with the first look, before READY=1")
	assert.Equal(t, "READY=1", <-f.notes)
	f.role("server")
	f.staged()
	var next []string
	require.Eventually(t, func() bool {
		select {
		case n := <-f.notes:
			next = append(next, n)
		default:
		}
		return slices.Contains(next, "STATUS=the role file says server: the server runs")
	}, 5*time.Second, 10*time.Millisecond, "notes: %q", next)
	// Resyncs that find the same make no more.
	time.Sleep(3 * f.cfg.ResyncPeriod)
	assert.Empty(t, f.notes, "the same status is not sent again")
}

func TestAVoterAskedToRemoveACandidatesMemberRemovesItAndReportsDone(t *testing.T) {
	f := newFixture(t)
	f.role("server")
	f.datastore("h2-0a1b2c3d")
	f.plat.Set(platform.Server, true, time.Now().Add(-time.Hour))
	f.etcd.members = append(f.etcd.members, etcdclient.Member{ID: 0x8e9e05c52164694d, Name: "c1-0a1b2c3d", Learner: true})
	f.start()
	q := api.Request{Swap: "s1", Action: api.RequestRemoveMember, At: time.Now().UTC().Truncate(time.Second),
		Member: "c1-0a1b2c3d", MemberID: "8e9e05c52164694d"}
	b, _ := json.Marshal(q)
	f.annotate(api.AnnotationRequest, string(b))
	r := f.waitReport(api.RequestRemoveMember, api.StateDone)
	assert.True(t, r.Answers(&q))
	assert.Equal(t, []string{"c1-0a1b2c3d/8e9e05c52164694d"}, f.etcd.removals, "once")
	members, _ := f.etcd.Members(context.Background())
	assert.Len(t, members, 3)
	assert.Equal(t, 0, f.calls("stop", platform.Server), "the server keeps running")
}

func TestAVoterAskedToRemoveItsOwnMemberByIDReportsFailedAndRemovesNothing(t *testing.T) {
	f := newFixture(t)
	f.role("server")
	f.datastore("h2-0a1b2c3d")
	f.plat.Set(platform.Server, true, time.Now().Add(-time.Hour))
	f.start()
	q := api.Request{Swap: "s1", Action: api.RequestRemoveMember, At: time.Now().UTC().Truncate(time.Second), MemberID: "2"}
	b, _ := json.Marshal(q)
	f.annotate(api.AnnotationRequest, string(b))
	r := f.waitReport(api.RequestRemoveMember, api.StateFailed)
	assert.Contains(t, r.Message, "this host's own")
	members, _ := f.etcd.Members(context.Background())
	assert.Len(t, members, 3)
}

func TestASnapshotIsNamedForK3sAndTheOlderOfOursArePruned(t *testing.T) {
	f := newFixture(t)
	f.cfg.KeepSnapshots = 2
	f.role("server")
	f.plat.Set(platform.Server, true, time.Now().Add(-time.Hour))
	dir := filepath.Join(f.cfg.DataDir, "server", "db", "snapshots")
	for _, name := range []string{"etcd-snapshot-h2-100", "fleet-role-old-100", "fleet-role-old-300", "fleet-role-old-200"} {
		f.write(filepath.Join(dir, name), "x")
	}
	f.start()
	f.request(api.RequestSnapshot)
	r := f.waitReport(api.RequestSnapshot, api.StateDone)
	require.NotNil(t, r.Snapshot)
	assert.Regexp(t, `/server/db/snapshots/fleet-role-s1-[0-9]+$`, r.Snapshot.Path)
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	assert.ElementsMatch(t, []string{"etcd-snapshot-h2-100", "fleet-role-old-300", filepath.Base(r.Snapshot.Path)}, left)
}

func TestTheAgentsMetricsCountItsSamplesItsActionsAndItsFileEvents(t *testing.T) {
	f := newFixture(t)
	f.staged()
	f.role("agent")
	f.plat.Set(platform.Agent, true, time.Now().Add(-time.Hour))
	reg := prometheus.NewRegistry()
	f.registry = reg
	f.start()
	f.request(api.RequestPromote)
	f.waitReport(api.RequestPromote, api.StateDone)
	value := func(name string, labels map[string]string) float64 {
		families, err := reg.Gather()
		require.NoError(t, err)
		for _, fam := range families {
			if fam.GetName() != name {
				continue
			}
		metric:
			for _, m := range fam.GetMetric() {
				for _, l := range m.GetLabel() {
					if labels[l.GetName()] != l.GetValue() {
						continue metric
					}
				}
				switch {
				case m.Counter != nil:
					return m.GetCounter().GetValue()
				case m.Gauge != nil:
					return m.GetGauge().GetValue()
				case m.Histogram != nil:
					return float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
		return -1
	}
	require.Eventually(t, func() bool {
		return value("fleet_role_agent_actions_total", map[string]string{"action": "promote", "outcome": "done"}) == 1
	},
		5*time.Second, 10*time.Millisecond)
	assert.GreaterOrEqual(t, value("fleet_role_agent_reaction_seconds", nil), 1.0, "the request that woke it")
	assert.GreaterOrEqual(t, value("fleet_role_agent_action_seconds", nil), 1.0)
	assert.GreaterOrEqual(t, value("fleet_role_agent_file_events_total", nil), 1.0, "the role file it wrote")
	// A busy disk may make a sample unhealthy: the result is not asserted,
	// only that the sample was counted and its figures set.
	require.Eventually(t, func() bool {
		for _, result := range []string{"healthy", "unhealthy"} {
			if value("fleet_role_agent_probe_samples_total", map[string]string{"result": result}) >= 1 {
				return true
			}
		}
		return false
	}, 5*time.Second, 10*time.Millisecond)
	// The gauge is exported; what it says of a sample is
	// TestTheProbeGaugesFollowEachSampleInjectedAndTheSamplesAreCountedByResult's.
	assert.NotEqual(t, -1.0, value("fleet_role_agent_probe_healthy", nil), "the gauge is exported")
	assert.Greater(t, value("fleet_role_agent_probe_fsync_p99_seconds", nil), 0.0)

	srv := httptest.NewServer(f.agent.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	assert.Contains(t, string(body), `fleet_role_agent_actions_total{action="promote",outcome="done"} 1`, "served as scraped")
}

// probe is the probe sample on the Node, nil if none.
func (f *fixture) probe() *api.Probe {
	n, err := f.kube.CoreV1().Nodes().Get(context.Background(), "h2", metav1.GetOptions{})
	require.NoError(f.t, err)
	v, ok := n.Annotations[api.AnnotationProbe]
	if !ok {
		return nil
	}
	var p api.Probe
	require.NoError(f.t, json.Unmarshal([]byte(v), &p))
	return &p
}

// statusLines are the status lines the agent sent to systemd so far.
func (f *fixture) statusLines(seen *[]string) []string {
	for {
		select {
		case n := <-f.notes:
			if s, ok := strings.CutPrefix(n, "STATUS="); ok {
				*seen = append(*seen, s)
			}
		default:
			return *seen
		}
	}
}

func TestGarbageOverAGoodRoleFileKeepsTheLastGoodRoleAndSaysSoUntilItIsMended(t *testing.T) {
	f := newFixture(t)
	f.role("server")
	f.datastore("h2-0a1b2c3d")
	f.plat.Set(platform.Server, true, time.Now().Add(-time.Hour))
	f.start()
	require.Eventually(t, func() bool { p := f.probe(); return p != nil }, 5*time.Second, 20*time.Millisecond)
	assert.Empty(t, f.probe().RoleFileError)
	var lines []string

	f.write(f.cfg.RoleFile, "\xff\xfe\x00garbage\n")
	require.Eventually(t, func() bool { p := f.probe(); return p != nil && p.RoleFileError != "" }, 5*time.Second, 20*time.Millisecond,
		"the probe publishes the corrupt role file at once, not a probe period later")
	p := f.probe()
	assert.Contains(t, p.RoleFileError, "corrupt role file")
	assert.Equal(t, api.HostServer, p.KeptRole)
	require.Eventually(t, func() bool { return len(f.events(api.EventCorruptRoleFile)) == 1 }, 5*time.Second, 20*time.Millisecond)
	assert.Contains(t, f.events(api.EventCorruptRoleFile)[0].Message, "the host keeps its last good role, server")
	corrupt := "the role file " + f.cfg.RoleFile + `: corrupt role file: want "server" or "agent", found "\xff\xfe\x00garbage": nothing is done until it is mended; the host keeps its last good role, server`
	require.Eventually(t, func() bool { return slices.Contains(f.statusLines(&lines), corrupt) }, 5*time.Second, 20*time.Millisecond,
		"status lines: %q", lines)

	// A tombstone would have a host whose role file says agent finish a
	// demotion; with a corrupt one, nothing is done.
	f.tombstone()
	time.Sleep(3 * f.cfg.ResyncPeriod)
	assert.Empty(t, f.plat.Calls(), "no step from garbage: the server runs on")
	assert.Len(t, f.events(api.EventCorruptRoleFile), 1, "told once, not every resync")
	require.NoError(t, os.Remove(filepath.Join(f.etcdDir(), "tombstone")))

	f.role("server")
	require.Eventually(t, func() bool { p := f.probe(); return p != nil && p.RoleFileError == "" }, 5*time.Second, 20*time.Millisecond,
		"mending the file clears it from the probe")
	assert.Empty(t, f.probe().KeptRole)
	require.Eventually(t, func() bool {
		l := f.statusLines(&lines)
		return l[len(l)-1] == "the role file says server: the server runs"
	}, 5*time.Second, 20*time.Millisecond, "status lines: %q", lines)
	assert.Empty(t, f.plat.Calls())

	f.write(f.cfg.RoleFile, "agnet\n")
	require.Eventually(t, func() bool { return len(f.events(api.EventCorruptRoleFile)) == 2 }, 5*time.Second, 20*time.Millisecond,
		"garbage again after a mend is told again")
}

func TestTheProbePublishesTheStagedK3sServerConfigsCriticalSettings(t *testing.T) {
	f := newFixture(t)
	f.role("agent")
	f.write(filepath.Join(f.dir, "etc", "config.yaml"), "cluster-cidr: 10.44.0.0/16\ntoken: K10"+testCAHash+"::server:s3cr3tpassw0rd\n")
	f.start()
	require.Eventually(t, func() bool { p := f.probe(); return p != nil && p.K3sConfig != nil }, 5*time.Second, 20*time.Millisecond)
	c := f.probe().K3sConfig
	assert.Empty(t, c.Error)
	assert.Equal(t, "10.44.0.0/16", c.Critical["cluster-cidr"])
	assert.Equal(t, testCAHash, c.TokenCAHash)
	n, err := f.kube.CoreV1().Nodes().Get(context.Background(), "h2", metav1.GetOptions{})
	require.NoError(t, err)
	assert.NotContains(t, n.Annotations[api.AnnotationProbe], "s3cr3t", "the token's password is never published")
}
