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
// status and a timed linearizable read. A part that cannot be sampled
// says so in the sample; no call waits past the etcd client's timeout.
type prober struct {
	dir     string
	cfg     config.Probe
	period  time.Duration
	etcd    Etcd
	fsyncs  []time.Duration // the last cfg.History, oldest first
	file    *os.File
	payload []byte
}

const probeFile = ".fleet-role-probe"

func newProber(dir string, cfg config.Probe, period time.Duration, etcd Etcd) *prober {
	return &prober{dir: dir, cfg: cfg, period: period, etcd: etcd, payload: make([]byte, 512)}
}

func (p *prober) close() {
	if p.file != nil {
		p.file.Close()
		p.file = nil
	}
}

// disk makes the writes and keeps their latencies.
func (p *prober) disk() error {
	if p.file == nil {
		if err := os.MkdirAll(p.dir, 0o700); err != nil {
			return err
		}
		f, err := os.OpenFile(filepath.Join(p.dir, probeFile), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		p.file = f
	}
	for i := range p.cfg.Writes {
		start := time.Now()
		if _, err := p.file.WriteAt(p.payload, int64(i%8)*int64(len(p.payload))); err != nil {
			p.close()
			return err
		}
		if err := syscall.Fdatasync(int(p.file.Fd())); err != nil {
			p.close()
			return err
		}
		p.fsyncs = append(p.fsyncs, time.Since(start))
	}
	if over := len(p.fsyncs) - p.cfg.History; over > 0 {
		p.fsyncs = slices.Delete(p.fsyncs, 0, over)
	}
	return nil
}

// p99 is the 99th percentile of the kept fsync latencies, in ms.
func (p *prober) p99() float64 {
	if len(p.fsyncs) == 0 {
		return 0
	}
	s := slices.Clone(p.fsyncs)
	slices.Sort(s)
	i := (len(s)*99 + 99) / 100
	return float64(s[min(i, len(s))-1]) / float64(time.Millisecond)
}

// sample takes one sample at now; server says a server runs here. The
// etcd calls are made at once, side by side, and all of them within one
// period: a member that does not answer makes a sample that says so, on
// time, never a late one. Note: the controller tells a live agent from a
// silent one by its samples' times alone, so a sample that waited out
// each call's timeout in turn (three of them, 15 s by default, while a
// new server's etcd cannot start) made a live agent look dead.
func (p *prober) sample(ctx context.Context, now time.Time, server, staged bool) (api.Probe, []etcdclient.Member) {
	s := api.Probe{At: now.UTC(), Period: api.Duration(p.period), Staged: staged}
	var problems []string
	if err := p.disk(); err != nil {
		problems = append(problems, "disk: "+err.Error())
	}
	s.FsyncP99Ms = round(p.p99())
	healthy := s.FsyncP99Ms <= ms(p.cfg.FsyncLimit)
	var members []etcdclient.Member
	if server {
		e := p.etcdSample(ctx)
		members = e.members
		names := map[uint64]string{}
		for _, m := range members {
			names[m.ID] = m.Name
			s.Members = append(s.Members, api.Member{Name: m.Name, Learner: m.Learner, ID: strconv.FormatUint(m.ID, 16)})
		}
		for _, err := range []error{e.membersErr, e.statusErr, e.readErr} {
			if err != nil {
				problems = append(problems, err.Error())
			}
		}
		if e.statusErr == nil {
			s.Member, s.Leader = names[e.status.MemberID], names[e.status.Leader]
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

// etcdSample is what the local member answered within a sample.
type etcdSample struct {
	members    []etcdclient.Member
	membersErr error
	status     etcdclient.Status
	statusErr  error
	rtt        time.Duration
	readErr    error
}

// etcdSample asks the local member for its member list, its status and a
// timed read, side by side, each within the period at most; a call that
// has not answered by then is reported as such.
func (p *prober) etcdSample(ctx context.Context) etcdSample {
	ctx, cancel := context.WithTimeout(ctx, p.period)
	defer cancel()
	var e etcdSample
	var wg sync.WaitGroup
	wg.Go(func() { e.members, e.membersErr = p.etcd.Members(ctx) })
	wg.Go(func() { e.status, e.statusErr = p.etcd.Status(ctx) })
	wg.Go(func() { e.rtt, e.readErr = p.etcd.Read(ctx) })
	wg.Wait()
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
