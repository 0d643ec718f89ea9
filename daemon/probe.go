package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/api/logkey"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/daemon/etcdclient"
	"github.com/fleet-role/fleet-role/platform"
)

// prober samples the host's health: small writes each followed by
// fdatasync in the data dir, as etcd's WAL writes, the p99 over the last
// writes; and on a server, through the local etcd, the member list, the
// status, a timed linearizable read and the member's own WAL fsync and
// backend commit histograms. The writes are made in a goroutine
// of their own, beside the etcd calls, and a sample waits for neither past
// its period: a part that cannot be sampled within it says so in the
// sample.
type prober struct {
	dir     string
	cfg     config.Probe
	period  time.Duration
	etcd    Etcd
	payload []byte
	// sync makes a write durable: fdatasync, as etcd's WAL does. Tests
	// make it slow, hang or fail.
	sync func(*os.File) error

	// mu guards what the writes' goroutine shares with the samples.
	mu sync.Mutex
	// fsyncs are the latencies of the last cfg.History writes returned,
	// oldest first.
	fsyncs []time.Duration
	file   *os.File
	closed bool
	// run is the writes last begun, nil before the first sample.
	run *writes
	// behind are the times at which samples found run's writes in flight
	// and began none of their own: each stands for cfg.Writes writes due
	// then and not made.
	behind []time.Time
}

// writes is one sample's writes, made in a goroutine of their own. done
// is closed once all of them have returned or one failed; ended, err,
// returned and since are guarded by the prober's mu.
type writes struct {
	began time.Time
	n     int
	done  chan struct{}
	ended bool
	err   error
	// returned is how many have returned; since is when the write in
	// progress began, or the next one was due: as the one before it
	// returned.
	returned int
	since    time.Time
	// told says a sample has said how they ended; the samples' alone.
	told bool
}

const probeFile = ".fleet-role-probe"

func newProber(dir string, cfg config.Probe, period time.Duration, etcd Etcd) *prober {
	return &prober{dir: dir, cfg: cfg, period: period, etcd: etcd, payload: make([]byte, 512), sync: fdatasync}
}

func fdatasync(f *os.File) error { return syscall.Fdatasync(int(f.Fd())) }

// close closes the probe's file, at once or, while writes are in flight,
// once they return: a hung disk does not hang the agent's stop.
func (p *prober) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.run == nil || p.run.ended {
		p.closeFile()
	}
}

// closeFile closes the file, with p.mu held.
func (p *prober) closeFile() {
	if p.file != nil {
		p.file.Close()
		p.file = nil
	}
}

// disk makes this sample's writes and waits for them until ctx ends, the
// end of the sample's period. Writes an earlier sample began that are
// still in flight are waited for instead, and none are begun beside them:
// a disk that hangs holds one goroutine of the probe's however many
// samples come, and each of them says the writes are still out. It returns
// what went wrong, and the latencies the p99 is over.
func (p *prober) disk(ctx context.Context) ([]error, []time.Duration) {
	var problems []error
	p.mu.Lock()
	prev := p.run
	p.mu.Unlock()
	if prev != nil && !prev.told {
		select {
		case <-prev.done: // ended since the sample that began them: say how
			prev.told = true
			if prev.err != nil {
				problems = append(problems, prev.err)
			}
		default:
			p.mu.Lock()
			p.behind = append(p.behind, time.Now())
			p.mu.Unlock()
			if err := p.wait(ctx, prev); err != nil {
				problems = append(problems, err)
			}
			return problems, p.latencies(time.Now())
		}
	}
	w := &writes{began: time.Now(), n: p.cfg.Writes, done: make(chan struct{})}
	w.since = w.began
	p.mu.Lock()
	p.run, p.behind = w, nil
	p.mu.Unlock()
	go p.write(w)
	if err := p.wait(ctx, w); err != nil {
		problems = append(problems, err)
	}
	return problems, p.latencies(time.Now())
}

// wait waits for w's writes until ctx ends, and says how they ended: their
// error, or that they have not all returned in time.
func (p *prober) wait(ctx context.Context, w *writes) error {
	select {
	case <-w.done:
	case <-ctx.Done():
		select {
		case <-w.done: // returned at the very end: in time
		default:
			p.mu.Lock()
			out := w.n - w.returned
			p.mu.Unlock()
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return ctx.Err()
			}
			return fmt.Errorf("the writes begun %s ago have not all returned within the probe period %s (%d of %d out)",
				time.Since(w.began).Round(time.Millisecond), p.period, out, w.n)
		}
	}
	w.told = true
	return w.err
}

// write makes w's writes, each followed by p.sync, and keeps each one's
// latency as it returns.
func (p *prober) write(w *writes) {
	err := p.writeAll(w)
	p.mu.Lock()
	w.ended, w.err = true, err
	if err != nil || p.closed {
		p.closeFile()
	}
	p.mu.Unlock()
	close(w.done)
}

func (p *prober) writeAll(w *writes) error {
	f, err := p.open()
	if err != nil {
		return err
	}
	for i := range w.n {
		start := time.Now()
		p.mu.Lock()
		w.since = start
		p.mu.Unlock()
		if _, err := f.WriteAt(p.payload, int64(i%8)*int64(len(p.payload))); err != nil {
			return err
		}
		if err := p.sync(f); err != nil {
			return fmt.Errorf("fdatasync %s: %w", f.Name(), err)
		}
		took := time.Since(start)
		p.mu.Lock()
		w.returned++
		w.since = time.Now()
		p.fsyncs = append(p.fsyncs, took)
		if over := len(p.fsyncs) - p.cfg.History; over > 0 {
			p.fsyncs = slices.Delete(p.fsyncs, 0, over)
		}
		p.mu.Unlock()
	}
	return nil
}

// open opens the probe's file once; the writes' goroutine alone opens it,
// since opening may block on the disk as a write does.
func (p *prober) open() (*os.File, error) {
	p.mu.Lock()
	f := p.file
	p.mu.Unlock()
	if f != nil {
		return f, nil
	}
	if err := os.MkdirAll(p.dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(p.dir, probeFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.file = f
	p.mu.Unlock()
	return f, nil
}

// latencies are those of the last cfg.History writes at now, oldest first:
// the writes returned, then, while writes are in flight, each write not
// returned (the one in progress and those waiting behind it, its own
// sample's and those of the samples since) at least as slow as it has
// been so far. Note: etcd's WAL appends wait behind a hung fdatasync in
// the same way; and counting the hung write alone would hide it, once the
// history is full, in the one write in a hundred a p99 leaves out.
func (p *prober) latencies(now time.Time) []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := slices.Clone(p.fsyncs)
	if w := p.run; w != nil && !w.ended {
		for range w.n - w.returned {
			l = append(l, now.Sub(w.since))
		}
		for _, due := range p.behind {
			for range p.cfg.Writes {
				l = append(l, now.Sub(due))
			}
		}
	}
	if over := len(l) - p.cfg.History; over > 0 {
		l = l[over:]
	}
	return l
}

// p99 is the 99th percentile of latencies, zero for none: with fewer than
// a hundred, the slowest.
func p99(latencies []time.Duration) time.Duration {
	if len(latencies) == 0 {
		return 0
	}
	s := slices.Clone(latencies)
	slices.Sort(s)
	i := (len(s)*99 + 99) / 100
	return s[min(i, len(s))-1]
}

// sample takes one sample at now; server says a server runs here. The
// disk's writes and the etcd calls are made at once, side by side, and a
// sample waits for them one period at most: a disk or a member that does
// not answer makes a sample that says so, on time, never a late one.
// Note: the controller tells a live agent from a silent one by its
// samples' times alone, so a sample that waited out each etcd call's
// timeout in turn (three of them, 15 s by default, while a new server's
// etcd cannot start), or a write a throttled disk held for seconds, made a
// live agent look dead, where its disk is what is unfit.
func (p *prober) sample(ctx context.Context, now time.Time, server, staged bool) (api.Probe, []etcdclient.Member) {
	ctx, cancel := context.WithTimeout(ctx, p.period)
	defer cancel()
	s := api.Probe{At: now.UTC(), Period: api.Duration(p.period), Staged: staged}
	var e etcdSample
	var wg sync.WaitGroup
	if server {
		wg.Go(func() { e = p.etcdSample(ctx) })
	}
	diskErrs, latencies := p.disk(ctx)
	wg.Wait()
	var problems []string
	for _, err := range diskErrs {
		problems = append(problems, "disk: "+err.Error())
	}
	// Note: the fsync p99 is a figure, not the agent's judgement: the
	// controller's verdicts set the one limit it is judged by, and judge
	// a voter by its member's own latencies instead.
	s.FsyncP99Ms = round(ms(p99(latencies)))
	healthy := true
	var members []etcdclient.Member
	if server {
		members = e.members
		names := map[uint64]string{}
		for _, m := range members {
			names[m.ID] = m.Name
			s.Members = append(s.Members, api.Member{Name: m.Name, Learner: m.Learner, ID: strconv.FormatUint(m.ID, 16), PeerURLs: m.PeerURLs})
		}
		s.Unreachable = e.unreachable
		for _, err := range []error{e.membersErr, e.statusErr, e.readErr} {
			if err != nil {
				problems = append(problems, err.Error())
			}
		}
		if e.statusErr == nil {
			st := e.status
			s.Member, s.Leader = names[st.MemberID], names[st.Leader]
			s.Etcd = &api.EtcdStatus{ID: strconv.FormatUint(st.MemberID, 16), Learner: st.Learner, RaftIndex: st.RaftIndex, RaftTerm: st.RaftTerm,
				Leader: strconv.FormatUint(st.Leader, 16),
				DBSize: st.DBSize, DBSizeInUse: st.DBSizeInUse, Errors: st.Errors}
		}
		if e.latencies != nil {
			s.EtcdLatencies = e.latencies
		}
		if e.readErr == nil {
			s.RTTMs = round(ms(e.rtt))
			healthy = healthy && e.rtt <= p.cfg.ReadLimit
		}
	}
	s.Error = strings.Join(problems, "; ")
	s.Healthy = healthy && len(problems) == 0
	return s, members
}

// latencyReader is an Etcd that reads its member's latency histograms
// (etcdclient.Client does). Note: a member whose histograms cannot be
// read is no fault of the host: the sample says why in its
// EtcdLatencies, not its Error, and no verdict is made on them.
type latencyReader interface {
	Latencies(ctx context.Context) (api.EtcdLatencies, error)
}

// etcdSample is what the local member answered within a sample.
type etcdSample struct {
	members    []etcdclient.Member
	membersErr error
	status     etcdclient.Status
	statusErr  error
	rtt        time.Duration
	readErr    error
	// latencies are the member's latency histograms, or why they were
	// not read; nil from an Etcd that does not read them.
	latencies *api.EtcdLatencies
	// unreachable are the other members that did not answer.
	unreachable []string
}

// etcdSample asks the local member for its member list, its status and a
// timed read, side by side, each until ctx ends, the end of the sample's
// period; a call that has not answered by then is reported as such.
func (p *prober) etcdSample(ctx context.Context) etcdSample {
	var e etcdSample
	var wg sync.WaitGroup
	wg.Go(func() { e.members, e.membersErr = p.etcd.Members(ctx) })
	wg.Go(func() { e.status, e.statusErr = p.etcd.Status(ctx) })
	wg.Go(func() { e.rtt, e.readErr = p.etcd.Read(ctx) })
	if lr, ok := p.etcd.(latencyReader); ok {
		wg.Go(func() {
			l, err := lr.Latencies(ctx)
			if err != nil {
				l = api.EtcdLatencies{Error: err.Error()}
			}
			e.latencies = &l
		})
	}
	wg.Wait()
	if e.membersErr == nil && e.statusErr == nil {
		// Note: its own failure is not the sample's: the list and the
		// status it needs were had.
		e.unreachable, _ = p.etcd.Unanswering(ctx, e.members, e.status.MemberID)
	}
	late := func(err error) error {
		if err != nil && ctx.Err() != nil {
			return fmt.Errorf("%w (etcd did not answer within the probe period %s)", err, p.period)
		}
		return err
	}
	e.membersErr, e.statusErr, e.readErr = late(e.membersErr), late(e.statusErr), late(e.readErr)
	return e
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// probeLoop samples the host every probe period, and at once when the role
// file turns corrupt or is mended, and writes the sample on the Node; a
// sample that cannot be written is dropped, the next one comes.
func (a *Agent) probeLoop(ctx context.Context) {
	dir := a.cfg.DataDir
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		dir = a.cfg.StateDir
	}
	p := newProber(dir, a.cfg.Probe, a.cfg.ProbePeriod, a.etcd)
	defer p.close()
	t := a.clock.NewTicker(a.cfg.ProbePeriod)
	defer t.Stop()
	for {
		a.probeOnce(ctx, p)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		case <-a.probeNow:
		}
	}
}

func (a *Agent) probeOnce(ctx context.Context, p *prober) {
	server := false
	if st, err := a.platform.State(ctx, platform.Server); err == nil {
		server = st.Active
	}
	staged := false
	if ok, _ := a.host.stagedFiles(); ok {
		staged, _ = a.platform.Installed(ctx, platform.Server)
	}
	s, members := p.sample(ctx, a.clock.Now(), server, staged)
	s.K3sConfig = a.host.k3sConfig()
	if rf := a.roleFault.Load(); rf != nil {
		s.RoleFileError, s.KeptRole = rf.err, rf.kept
	}
	a.metrics.sampled(s)
	if len(members) > 0 {
		a.keepVoters(members)
	}
	// Note: the cluster lists this host's member: a voters' list without
	// it later says it was removed (unlisted).
	a.keepListed(s.Member)
	b, err := json.Marshal(s)
	if err != nil {
		return
	}
	if err := a.node.annotate(ctx, api.AnnotationProbe, string(b)); err != nil && !errors.Is(err, context.Canceled) {
		a.log.Warn("probe sample not written", logkey.Err, err)
	}
}

// keepVoters keeps the nodes whose members vote, for the server a
// demoted agent joins.
func (a *Agent) keepVoters(members []etcdclient.Member) {
	var voters []string
	for _, m := range members {
		if !m.Learner && m.Name != "" {
			voters = append(voters, etcdclient.NodeOf(m.Name))
		}
	}
	slices.Sort(voters)
	if slices.Equal(voters, a.st.get().Voters) {
		return
	}
	if err := a.st.update(func(s *api.AgentState) { s.Voters = voters }); err != nil {
		a.log.Warn("voters not kept", logkey.Err, err)
	}
}
