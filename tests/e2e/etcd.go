package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fleet-role/fleet-role/api"
)

// Etcd is a client of the fleet's etcd cluster through every server's
// endpoint.
func (f *Fleet) Etcd() *clientv3.Client { return f.etcdThrough(f.servers()...) }

// etcdThrough is a client of the fleet's etcd cluster through the
// servers' endpoints.
func (f *Fleet) etcdThrough(servers ...*Host) *clientv3.Client {
	f.t.Helper()
	var eps []string
	for _, s := range servers {
		eps = append(eps, f.etcdURL(s.IP))
	}
	c, err := clientv3.New(f.etcdConfig(eps, 2*time.Second))
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { c.Close() })
	return c
}

// etcdURL is the client URL of the member at ip: the k3s double's plain
// http, real k3s's https (its client certificates, etcdTLS).
func (f *Fleet) etcdURL(ip string) string {
	if f.etcdTLS != nil {
		return "https://" + ip + ":2379"
	}
	return "http://" + ip + ":2379"
}

// etcdConfig is a client's configuration of the endpoints.
func (f *Fleet) etcdConfig(endpoints []string, dial time.Duration) clientv3.Config {
	return clientv3.Config{Endpoints: endpoints, DialTimeout: dial, TLS: f.etcdTLS, Logger: zap.NewNop()}
}

// Membership is etcd's member list as one server sees it.
type Membership struct {
	ClusterID uint64
	Voters    []string
	Learners  []string
}

// Members reads the member list from the first server that answers: one
// endpoint at a time, since a paused member holds a request until it
// times out.
func (f *Fleet) Members() (Membership, error) {
	var errs []error
	for _, h := range f.servers() {
		m, err := f.membersFrom(h)
		if err == nil {
			return m, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", h.Name, err))
	}
	return Membership{}, errors.Join(errs...)
}

func (f *Fleet) membersFrom(h *Host) (Membership, error) {
	if h.etcd == nil {
		c, err := clientv3.New(f.etcdConfig([]string{f.etcdURL(h.IP)}, time.Second))
		if err != nil {
			return Membership{}, err
		}
		h.etcd = c
		f.t.Cleanup(func() { c.Close() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := h.etcd.MemberList(ctx)
	if err != nil {
		return Membership{}, err
	}
	m := Membership{ClusterID: resp.Header.ClusterId}
	for _, x := range resp.Members {
		if x.IsLearner {
			m.Learners = append(m.Learners, x.Name)
		} else {
			m.Voters = append(m.Voters, x.Name)
		}
	}
	slices.Sort(m.Voters)
	return m, nil
}

// Writes writes a new key every few milliseconds until Count, one write
// at a time, timing each: a write that stalls hurts its users as much as
// one that fails, so the slowest write, failed or not, is counted beside
// the failed ones. Every key a write was acknowledged for is read back
// once the writes stop: an acknowledged write that is gone is lost.
type Writes struct {
	put      func(ctx context.Context, i int) error
	readBack func(ctx context.Context) (map[int]bool, error)
	timeout  time.Duration
	// after is what a write after the writes stopped is given.
	after   time.Duration
	stop    chan struct{}
	done    chan struct{}
	mu      sync.Mutex
	next    int
	acked   []int
	failed  int
	slowest time.Duration
	at      time.Time // when the slowest write was started
	// slowestOK is the longest a write that succeeded took.
	slowestOK time.Duration
	last      bool // the last write failed
	errs      []string
	tooks     []time.Duration // each of errs took
	began     []time.Time     // when each of errs began
	count     *WriteCount
}

// StartWrites starts writing to etcd, each write a key of its own under
// a prefix of this run's, its value its number; each write is given
// etcd's request timeout and an election timeout more before it counts
// as failed (writeTimeout), so that a write which stalls past the bounds
// writesAcross holds is measured, not cut off, and one etcd holds until
// its own request timeout ends with etcd's error, not the client's.
func (f *Fleet) StartWrites(c *clientv3.Client) *Writes { return f.startEtcdWrites(c, c) }

// startEtcdWrites writes through c and reads the writes back through
// read.
func (f *Fleet) startEtcdWrites(c, read *clientv3.Client) *Writes {
	prefix := fmt.Sprintf("/e2e/writes/%d/", time.Now().UnixNano())
	return f.startWrites(func(ctx context.Context, i int) error {
		_, err := c.Put(ctx, fmt.Sprintf("%s%08d", prefix, i), strconv.Itoa(i))
		return err
	}, func(ctx context.Context) (map[int]bool, error) {
		resp, err := read.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			return nil, err
		}
		got := map[int]bool{}
		for _, kv := range resp.Kvs {
			i, err := strconv.Atoi(strings.TrimPrefix(string(kv.Key), prefix))
			if err != nil || string(kv.Value) != strconv.Itoa(i) {
				return nil, fmt.Errorf("%s holds %q", kv.Key, kv.Value)
			}
			got[i] = true
		}
		return got, nil
	})
}

func (f *Fleet) startWrites(put func(ctx context.Context, i int) error, readBack func(ctx context.Context) (map[int]bool, error)) *Writes {
	w := &Writes{put: put, readBack: readBack, timeout: f.reqTimeout() + f.electionTimeout(), after: 2 * f.electionTimeout(),
		stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	f.t.Cleanup(w.Stop)
	return w
}

// reqTimeout is etcd's request timeout at the fleet's election timeout:
// how long a member holds a write it took before it fails it
// ("etcdserver: request timed out"): 5 s, and two election timeouts for
// an election (etcd server/config, (*ServerConfig).ReqTimeout). k3s's:
// 15 s.
func (f *Fleet) reqTimeout() time.Duration { return 5*time.Second + 2*f.electionTimeout() }

func (w *Writes) run() {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
		w.write(w.timeout)
	}
}

// write makes the next write, given timeout, and counts it.
func (w *Writes) write(timeout time.Duration) error {
	w.mu.Lock()
	i := w.next
	w.next++
	w.mu.Unlock()
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	err := w.put(ctx, i)
	cancel()
	took := time.Since(began)
	w.mu.Lock()
	defer w.mu.Unlock()
	if took > w.slowest {
		w.slowest, w.at = took, began
	}
	w.last = err != nil
	if err != nil {
		w.failed++
		if len(w.errs) < 20 {
			w.errs = append(w.errs, fmt.Sprintf("%s after %s", err, took.Round(time.Millisecond)))
			w.tooks = append(w.tooks, took)
			w.began = append(w.began, began)
		}
	} else {
		w.acked = append(w.acked, i)
		w.slowestOK = max(w.slowestOK, took)
	}
	return err
}

// Stop stops writing.
func (w *Writes) Stop() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// WriteCount is what a run of writes saw.
type WriteCount struct {
	OK, Failed int
	// Slowest is the longest any one write took, failed or not; At is
	// when it started.
	Slowest time.Duration
	At      time.Time
	// SlowestOK is the longest a write that succeeded took.
	SlowestOK time.Duration
	// Unanswered is set when the last write failed.
	Unanswered bool
	// Errors are the failed writes' errors, each with how long it took,
	// the first 20; Took, how long each took; Began, when each began.
	Errors []string
	Took   []time.Duration
	Began  []time.Time
	// After is the error of one more write, made once the writes
	// stopped: nil when the cluster took it.
	After error
	// Lost are the writes acknowledged, that one made after them
	// included, whose keys the read back after them did not find;
	// ReadBack is why the read failed, if it did.
	Lost     []int
	ReadBack error
}

func (c WriteCount) String() string {
	s := fmt.Sprintf("%d writes, %d failed, slowest %s (at %s), slowest that succeeded %s", c.OK+c.Failed, c.Failed,
		c.Slowest.Round(time.Millisecond), c.At.Format("15:04:05.000"), c.SlowestOK.Round(time.Millisecond))
	if c.Unanswered {
		s += ", the last write failed"
	}
	if len(c.Errors) > 0 {
		s += " (" + strings.Join(c.Errors, "; ") + ")"
	}
	if c.After != nil {
		s += fmt.Sprintf("; the write after them failed: %v", c.After)
	}
	switch {
	case c.ReadBack != nil:
		s += fmt.Sprintf("; reading them back failed: %v", c.ReadBack)
	case len(c.Lost) > 0:
		s += fmt.Sprintf("; %d acknowledged writes lost, the first %d", len(c.Lost), c.Lost[0])
	default:
		s += "; every acknowledged write read back"
	}
	return s
}

// Count stops the writes, makes one more (WriteCount.After), reads back
// every write acknowledged and counts them. A second call returns the
// first's count.
func (w *Writes) Count() WriteCount {
	w.Stop()
	if w.count != nil {
		return *w.count
	}
	// Note: the write after is not among those counted before it.
	w.mu.Lock()
	c := WriteCount{OK: len(w.acked), Failed: w.failed, Slowest: w.slowest, At: w.at, SlowestOK: w.slowestOK, Unanswered: w.last,
		Errors: slices.Clone(w.errs), Took: slices.Clone(w.tooks), Began: slices.Clone(w.began)}
	w.mu.Unlock()
	c.After = w.write(w.after)
	ctx, cancel := context.WithTimeout(context.Background(), w.after)
	defer cancel()
	got, err := w.readBack(ctx)
	c.ReadBack = err
	w.mu.Lock()
	for _, i := range w.acked {
		if err == nil && !got[i] {
			c.Lost = append(c.Lost, i)
		}
	}
	w.mu.Unlock()
	w.count = &c
	return c
}

// Check is what must hold after every scenario: the etcd cluster is the
// one the fleet started with, its members are the voters' and vote (as
// many as it started with after a swap that completed or rolled back),
// no Node is left cordoned by a swap, the Lease is free and status.json
// says the result.
func (f *Fleet) Check(result string) error {
	m, err := f.Members()
	if err != nil {
		return err
	}
	if m.ClusterID != f.clusterID {
		return fmt.Errorf("etcd's cluster ID is %x, not %x", m.ClusterID, f.clusterID)
	}
	if len(m.Learners) > 0 {
		return fmt.Errorf("learners left: %v", m.Learners)
	}
	if (result == api.ResultCompleted || result == api.ResultRolledBack) && len(m.Voters) != f.voters {
		return fmt.Errorf("etcd has %d voters %v after a swap %s, the fleet had %d", len(m.Voters), m.Voters, result, f.voters)
	}
	nodes, err := f.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err
	}
	var voters []string
	for _, n := range nodes.Items {
		if _, ok := n.Annotations[api.AnnotationCordonedBy]; ok || n.Spec.Unschedulable {
			return fmt.Errorf("%s is left cordoned (cordoned-by %q)", n.Name, n.Annotations[api.AnnotationCordonedBy])
		}
		if n.Labels[api.LabelRole] == api.RoleVoter {
			voters = append(voters, n.Annotations[api.AnnotationEtcdNodeName])
		}
	}
	slices.Sort(voters)
	if !slices.Equal(voters, m.Voters) {
		return fmt.Errorf("etcd's voters %v are not the voter Nodes' members %v", m.Voters, voters)
	}
	if l := f.Lease(); l != nil && l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity != "" {
		return fmt.Errorf("the Lease is held by %s", *l.Spec.HolderIdentity)
	}
	st := f.Status()
	if st.Swap != nil {
		return fmt.Errorf("a swap is under way: %s at %s", st.Swap.ID, st.Step)
	}
	if result != "" && (st.Last == nil || st.Last.Result != result) {
		return fmt.Errorf("status.json's last swap is %+v, not %s", st.Last, result)
	}
	return nil
}
