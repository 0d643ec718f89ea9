package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/clock"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/api/logkey"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/daemon/etcdclient"
	"github.com/fleet-role/fleet-role/daemon/k3sconfig"
	"github.com/fleet-role/fleet-role/platform"
	"github.com/fleet-role/fleet-role/role"
)

// Etcd is what the agent needs of its host's etcd member.
type Etcd interface {
	Members(ctx context.Context) ([]etcdclient.Member, error)
	Status(ctx context.Context) (etcdclient.Status, error)
	Read(ctx context.Context) (time.Duration, error)
	MoveLeaderAway(ctx context.Context, preferNode string) (string, error)
	Save(ctx context.Context, dir, name string) (etcdclient.Snapshot, error)
	// RemoveMember removes another host's member by name and/or ID (0:
	// none), idempotently, never this host's own nor past quorum.
	RemoveMember(ctx context.Context, name string, id uint64) (bool, error)
	// MembersOf lists the members as the members at the endpoints (other
	// hosts' client URLs) know them, linearizably.
	MembersOf(ctx context.Context, endpoints []string) ([]etcdclient.Member, error)
	// Unanswering names the members of the list, but local, that do not
	// answer on their client URL.
	Unanswering(ctx context.Context, members []etcdclient.Member, local uint64) ([]string, error)
}

// Options are the agent's parts. Clock, Log and Notify may be nil.
type Options struct {
	Config   config.Agent
	Platform platform.Platform
	// Kube is the core/v1 client: the agent's Node, its Events and its
	// ServiceAccount's tokens are all it reaches of the API.
	Kube  typedcorev1.CoreV1Interface
	Etcd  Etcd
	Clock clock.WithTicker
	Log   *slog.Logger
	// Notify sends a state to systemd (sd_notify); nil sends nothing.
	Notify func(state string) error
	// WatchdogInterval is systemd's watchdog interval; 0 means none.
	WatchdogInterval time.Duration
	// Registry takes the agent's metrics; nil makes a new one.
	Registry *prometheus.Registry
}

// Agent is the host daemon.
type Agent struct {
	cfg      config.Agent
	platform platform.Platform
	etcd     Etcd
	clock    clock.WithTicker
	log      *slog.Logger
	notify   func(string) error
	watchdog time.Duration
	host     host
	st       *store
	node     *nodeClient
	reports  *reporter
	// tokens renews the ServiceAccount token; nil when token_file is "".
	tokens  *tokenRenewer
	trigger chan struct{}
	// woken is when the first change not yet looked at arrived (unix ns).
	woken    atomic.Int64
	registry *prometheus.Registry
	metrics  *metrics
	// alive is when the loop last made progress, in UnixNano.
	alive atomic.Int64
	// problems already told as Events, so a bad annotation is told once.
	mu   sync.Mutex
	told map[string]string
	// status is the status line last sent to systemd; the loop's alone.
	status string
	// lastRole is the role file's last good word since the agent started
	// ("" before one); the loop's alone.
	lastRole api.HostRole
	// roleFault is what is wrong with the role file while it is corrupt,
	// for the probe to publish; nil while it is good or missing.
	roleFault atomic.Pointer[roleFault]
	// probeNow asks the probe loop for a sample now, out of its period.
	probeNow chan struct{}
	// nodeChanged is told of every change of the Node, for steps that a
	// newer instruction stops (preemptOn).
	nodeChanged chan struct{}
	// retry is the decision whose steps last failed; the loop's alone.
	retry *retry
	// asked is the voters' last answer on this host's member; the loop's
	// alone.
	asked membership
}

// roleFault is a corrupt role file and the role the host keeps meanwhile.
type roleFault struct {
	err  string
	kept api.HostRole
}

// New assembles an agent; nothing runs until Run.
func New(o Options) (*Agent, error) {
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Notify == nil {
		o.Notify = func(string) error { return nil }
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	st, err := openStore(o.Config.StateDir)
	if err != nil {
		return nil, err
	}
	log := o.Log.With(logkey.Component, "agent", logkey.Node, o.Config.NodeName)
	a := &Agent{
		cfg:      o.Config,
		platform: o.Platform,
		etcd:     o.Etcd,
		clock:    o.Clock,
		log:      log,
		notify:   o.Notify,
		watchdog: o.WatchdogInterval,
		host: host{roleFile: o.Config.RoleFile, dataDir: o.Config.DataDir, staged: o.Config.StagedFiles, keep: o.Config.KeepRemoved, joinFile: o.Config.JoinFile,
			k3sFile: o.Config.K3sConfigFile(), k3sArgs: o.Config.K3sServerArgs()},
		st:          st,
		node:        newNodeClient(o.Kube, o.Config.NodeName, log),
		trigger:     make(chan struct{}, 1),
		probeNow:    make(chan struct{}, 1),
		nodeChanged: make(chan struct{}, 1),
		told:        map[string]string{},
		registry:    o.Registry,
		metrics:     newMetrics(o.Registry),
	}
	a.reports = newReporter(st, a.node.annotate, log.With(logkey.Part, "reporter"))
	if o.Config.TokenFile != "" {
		a.tokens = newTokenRenewer(o.Config.TokenFile, o.Kube, o.Clock, log.With(logkey.Part, "token"))
	}
	return a, nil
}

// poke asks the loop for a look.
func (a *Agent) poke() {
	a.woken.CompareAndSwap(0, a.clock.Now().UnixNano())
	select {
	case a.trigger <- struct{}{}:
	default:
	}
}

// Handler serves /metrics and /healthz.
func (a *Agent) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(a.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return mux
}

// Run runs the agent until ctx ends; an ended ctx is a clean exit. It
// tells systemd READY after the first full look, pings its watchdog while
// the loop makes progress, and tells it STOPPING on the way out.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if a.cfg.ListenAddress != "" {
		l, err := net.Listen("tcp", a.cfg.ListenAddress)
		if err != nil {
			return fmt.Errorf("listen on %s: %w", a.cfg.ListenAddress, err)
		}
		srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(l) }()
		defer srv.Close()
	}
	onNode := func() {
		a.poke()
		select {
		case a.nodeChanged <- struct{}{}:
		default:
		}
	}
	if err := a.node.start(ctx, onNode); err != nil {
		return err
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	w := &watcher{
		dirs: []string{
			filepath.Dir(a.cfg.RoleFile),
			a.cfg.DataDir,
			filepath.Join(a.cfg.DataDir, "server"),
			a.host.dbDir(),
			a.host.etcdDir(),
		},
		debounce: a.cfg.Debounce,
		trigger:  func() { a.metrics.fileEvent.Inc(); a.poke() },
		log:      a.log,
	}
	wg.Go(func() { w.run(ctx) })
	wg.Go(func() { a.reports.run(ctx) })
	wg.Go(func() { a.probeLoop(ctx) })
	if a.tokens != nil {
		wg.Go(func() { a.tokens.run(ctx) })
	}
	if a.watchdog > 0 {
		wg.Go(func() { a.pingWatchdog(ctx) })
	}

	resync := a.clock.NewTicker(a.cfg.ResyncPeriod)
	defer resync.Stop()
	ready := false
	a.alive.Store(a.clock.Now().UnixNano())
	for {
		a.reconcile(ctx)
		a.alive.Store(a.clock.Now().UnixNano())
		if !ready && a.node.synced() {
			ready = true
			_ = a.notify("READY=1")
			a.log.Info("ready", logkey.Platform, a.cfg.Platform)
		}
		var again clock.Timer
		var retry <-chan time.Time
		if r := a.retry; r != nil && r.next.After(a.clock.Now()) {
			again = a.clock.NewTimer(r.next.Sub(a.clock.Now()))
			retry = again.C()
		}
		select {
		case <-ctx.Done():
			_ = a.notify("STOPPING=1")
			a.log.Info("stopping")
			return nil
		case <-a.trigger:
		case <-resync.C():
		case <-retry:
		}
		if again != nil {
			again.Stop()
		}
	}
}

// say sets the agent's status line, which `systemctl status
// fleet-role-agent` shows, to what the agent does or waits for, when that
// changed (sd_notify's STATUS=).
func (a *Agent) say(status string) {
	if status == a.status {
		return
	}
	a.status = status
	_ = a.notify("STATUS=" + status)
}

// pingWatchdog pings systemd's watchdog at half its interval, as long as
// the loop has made progress within the interval plus the longest a look
// may take.
func (a *Agent) pingWatchdog(ctx context.Context) {
	t := a.clock.NewTicker(a.watchdog / 2)
	defer t.Stop()
	stall := a.watchdog + a.cfg.ResyncPeriod + 10*time.Minute
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			if a.clock.Since(time.Unix(0, a.alive.Load())) < stall {
				_ = a.notify("WATCHDOG=1")
			}
		}
	}
}

// tell records a warning Event on the Node, and logs it, once per problem
// value.
func (a *Agent) tell(key, reason, msg string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.told[key] == msg {
		return
	}
	a.told[key] = msg
	a.log.Warn("warning event recorded", logkey.Event, reason, logkey.Message, msg)
	a.node.event(true, reason, "%s", msg)
}

func (a *Agent) untell(key string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.told, key)
}

// keeps says which role the host keeps while its role file is corrupt:
// Note: nothing is done on the host meanwhile (role.Decide), so its units
// stay as the last good role left them.
func (a *Agent) keeps() string {
	if a.lastRole == "" {
		return ""
	}
	return "; the host keeps its last good role, " + string(a.lastRole)
}

// setRoleFault sets what is wrong with the role file (nil: nothing) and,
// when that changed, asks the probe loop to publish it at once.
func (a *Agent) setRoleFault(rf *roleFault) {
	old := a.roleFault.Swap(rf)
	if (old == nil) == (rf == nil) && (old == nil || *old == *rf) {
		return
	}
	select {
	case a.probeNow <- struct{}{}:
	default:
	}
}

// look gathers the facts of the host.
func (a *Agent) look(ctx context.Context) (role.Facts, error) {
	var f role.Facts
	r, missing, err := a.host.readRole()
	switch {
	case err != nil:
		f.RoleErr = err
		a.setRoleFault(&roleFault{err: err.Error(), kept: a.lastRole})
		a.tell("role", api.EventCorruptRoleFile, err.Error()+": not acted on until it is mended"+a.keeps())
	default:
		f.Role, f.RoleMissing = r, missing
		if !missing {
			a.lastRole = r
		}
		a.setRoleFault(nil)
		a.untell("role")
	}
	f.NodeRead = a.node.synced()
	if n := a.node.node(); n != nil {
		ann := n.Annotations
		f.RemovedNodeName = ann[api.AnnotationEtcdRemovedNodeName]
		f.MemberGoneSwap = ann[api.AnnotationMemberGone]
		if v, ok := ann[api.AnnotationRequest]; ok {
			var q api.Request
			err := json.Unmarshal([]byte(v), &q)
			if err == nil {
				err = q.Validate()
			}
			if err != nil {
				a.tell("request", api.EventBadRequest, fmt.Sprintf("annotation %s: %v: ignored", api.AnnotationRequest, err))
			} else {
				a.untell("request")
				f.Request = &q
			}
		}
	}
	s := a.st.get()
	f.Handled = s.Handled
	f.Finished = s.Finished
	f.KnowsVoters = slices.ContainsFunc(s.Voters, func(v string) bool { return v != a.cfg.NodeName })
	f.Datastore, f.Tombstone, f.Member = a.host.datastore()
	// Note: read at every look, as k3s reads it at every start: Ansible
	// or its operator may change it while the agent runs.
	if k3s, err := k3sconfig.Read(a.cfg.K3sConfigFile(), a.cfg.K3sServerArgs()); err != nil {
		f.K3sConfigErr = err
	} else {
		f.ServerPort = k3s.HTTPSPort
	}
	for _, u := range platform.Units {
		st, err := a.platform.State(ctx, u)
		if err != nil {
			return f, fmt.Errorf("read the %s unit: %w", u, err)
		}
		unit := role.Unit{Active: st.Active, StartedAt: st.StartedAt, Enabled: st.Enabled}
		if u == platform.Server {
			f.Server = unit
		} else {
			f.Agent = unit
		}
	}
	if ok, _ := a.host.stagedFiles(); ok {
		installed, err := a.platform.Installed(ctx, platform.Server)
		if err != nil {
			return f, err
		}
		f.Staged = installed
	}
	f.Unlisted = a.unlisted(ctx, f)
	return f, nil
}

// reconcile is one look: gather, decide, act, report.
func (a *Agent) reconcile(ctx context.Context) {
	f, err := a.look(ctx)
	if err != nil {
		a.log.Error("cannot look at the host; nothing is done", logkey.Err, err)
		a.say("cannot look at the host; nothing is done: " + err.Error())
		return
	}
	d := role.Decide(f)
	why := d.Why
	if f.RoleErr != nil {
		why += a.keeps()
	}
	key := decisionKey(d)
	if r := a.retry; r != nil && r.key == key && a.clock.Now().Before(r.next) {
		a.say(r.say(why))
		return
	}
	if r := a.retry; r != nil && r.key != key && !a.clock.Now().Before(r.next) {
		a.retry = nil // another decision now, and the wait is over: forgotten
	}
	a.say(why)
	woke := a.woken.Swap(0)
	if len(d.Steps) == 0 && d.Report == nil {
		return
	}
	log := a.log.With(logkey.Action, d.Do, logkey.Swap, f.CurrentSwap())
	log.Info("decision made", logkey.Steps, d.Steps, logkey.Reason, d.Why)
	start := a.clock.Now()
	if woke != 0 && woke <= start.UnixNano() {
		a.metrics.reaction.Observe(start.Sub(time.Unix(0, woke)).Seconds())
	}
	stepCtx, stop := ctx, context.CancelFunc(func() {})
	if preemptible(d) && len(d.Steps) > 0 {
		stepCtx, stop = a.preemptOn(ctx, f)
	}
	done, err := a.carryOut(stepCtx, d, f)
	preempted := errors.Is(context.Cause(stepCtx), errPreempted)
	stop()
	if ctx.Err() != nil {
		return // stopped midway: the next run takes it up again
	}
	if preempted && err != nil {
		// Note: not a failure: the next look carries out what came.
		log.Info("steps stopped for a newer instruction", logkey.Err, err)
		a.poke()
		return
	}
	took := a.clock.Since(start).Round(time.Millisecond)
	a.metrics.took.Observe(took.Seconds())
	action := d.Do
	if action == "" {
		action = "report" // a report of what is already so
	}
	switch {
	case err != nil:
		a.metrics.actions.WithLabelValues(action, "failed").Inc()
		next := a.failed(key, err)
		log.Error("step failed", logkey.Err, err, logkey.Took, took, logkey.Attempt, a.retry.attempts, logkey.RetryIn, next.Sub(a.clock.Now()).Round(time.Millisecond))
	default:
		if len(d.Steps) > 0 {
			a.retry = nil
		}
		a.metrics.actions.WithLabelValues(action, "done").Inc()
		if len(d.Steps) > 0 {
			log.Info("steps carried out", logkey.Took, took)
		}
	}
	if d.Report == nil {
		return
	}
	rep := a.report(d.Report, done, err)
	if err := a.st.update(func(s *api.AgentState) {
		s.Pending = rep
		if q := d.Report.Answers; q != nil {
			s.Handled = &api.Request{Swap: q.Swap, Action: q.Action, At: q.At}
		}
		if rep.Action == api.ReportFinish && rep.State == api.StateDone {
			s.Finished = rep.Swap
		}
	}); err != nil {
		log.Error("cannot keep the report; it is made again on the next look", logkey.Err, err)
		return
	}
	a.reports.poke()
}

// outcome is what the steps left: the units' starts and the snapshot.
type outcome struct {
	serverStart, agentStart time.Time
	snapshot                *api.SnapshotFile
}

// carryOut runs the steps in order, stopping at the first that fails.
func (a *Agent) carryOut(ctx context.Context, d role.Decision, f role.Facts) (outcome, error) {
	var out outcome
	out.serverStart, out.agentStart = f.Server.StartedAt, f.Agent.StartedAt
	for _, step := range d.Steps {
		a.alive.Store(a.clock.Now().UnixNano())
		if err := a.step(ctx, step, f, &out); err != nil {
			return out, fmt.Errorf("%s: %w", step, err)
		}
	}
	return out, nil
}

func (a *Agent) step(ctx context.Context, step role.Step, f role.Facts, out *outcome) error {
	switch step {
	case role.WriteServerRole:
		return a.host.writeRole(api.HostServer)
	case role.WriteAgentRole:
		return a.host.writeRole(api.HostAgent)
	case role.StopAgent:
		out.agentStart = time.Time{}
		return a.platform.Stop(ctx, platform.Agent)
	case role.StopServer:
		out.serverStart = time.Time{}
		return a.platform.Stop(ctx, platform.Server)
	case role.StartServer:
		t, err := a.platform.Start(ctx, platform.Server, platform.StartOptions{})
		out.serverStart = t
		return err
	case role.WriteJoin:
		return a.writeJoin(f)
	case role.StartAgent:
		if f.K3sConfigErr != nil {
			return f.K3sConfigErr
		}
		url, err := role.AgentServerURL(a.inventory(), a.cfg.NodeName, a.st.get().Voters, f.ServerPort)
		if err != nil {
			return err
		}
		// Note: k3s's agent reads config.yaml too, whose `server:` wins
		// over K3S_URL; the drop-in names the same server, over it.
		if err := a.host.writeJoin(url); err != nil {
			return err
		}
		t, err := a.platform.Start(ctx, platform.Agent, platform.StartOptions{ServerURL: url})
		out.agentStart = t
		return err
	case role.MoveLeader:
		a.rememberVoters(ctx)
		prefer := ""
		if f.Request != nil {
			prefer = f.Request.Leader
		}
		to, err := a.etcd.MoveLeaderAway(ctx, prefer)
		switch {
		case errors.Is(err, etcdclient.ErrNoTransferee):
			a.log.Warn("leadership stays: no other started voter", logkey.Err, err)
		case err != nil:
			// Note: the step-down goes on; the others elect a leader when
			// this member stops, at the cost of an election's pause.
			a.log.Warn("leadership not moved away; stopping the server anyway", logkey.Err, err)
		case to != "":
			a.log.Info("leadership moved away", logkey.To, to)
		}
		return nil
	case role.MoveDatastore:
		to, err := a.host.moveDatastore(a.clock.Now())
		if to != "" {
			a.log.Info("datastore moved aside", logkey.To, to)
		}
		return err
	case role.RemoveMember:
		q := f.Request
		var id uint64
		if q.MemberID != "" {
			v, err := strconv.ParseUint(q.MemberID, 16, 64)
			if err != nil {
				return fmt.Errorf("member ID %q: %w", q.MemberID, err)
			}
			id = v
		}
		removed, err := a.etcd.RemoveMember(ctx, q.Member, id)
		if err != nil {
			return err
		}
		a.log.Info("etcd member removed", logkey.Member, q.Member, logkey.MemberID, q.MemberID, logkey.WasListed, removed)
		return nil
	case role.TakeSnapshot:
		dir := filepath.Join(a.host.dbDir(), "snapshots")
		name := snapshotName(f.CurrentSwap(), a.clock.Now())
		snap, err := a.etcd.Save(ctx, dir, name)
		if err != nil {
			return err
		}
		// Note: the snapshot is pruned with the older ones whether its
		// copy is made or not: it is whole, and a snapshot asked again
		// is a new one.
		defer a.prune(dir, name)
		a.log.Info("snapshot taken", logkey.File, snap.Path)
		file := &api.SnapshotFile{Path: snap.Path, Size: snap.Size, SHA256: snap.SHA256}
		if to := a.cfg.SnapshotCopyDir; to != "" {
			// Note: the snapshot is not reported ready until its copy
			// off the host is whole: the copy is there for when this
			// host is lost, and a swap is the time it may be.
			copied, err := copySnapshot(snap, to)
			if err != nil {
				return err
			}
			defer a.prune(to, name)
			file.Copy = copied
			a.log.Info("snapshot copied", logkey.File, copied)
		}
		out.snapshot = file
		return nil
	}
	return fmt.Errorf("unknown step %q", step)
}

// prune keeps the newest keep_snapshots of fleet-role's snapshots in dir
// and the one just taken. Note: a prune that fails does not fail the
// snapshot, which is whole; the next snapshot prunes again.
func (a *Agent) prune(dir, kept string) {
	removed, err := pruneSnapshots(dir, a.cfg.KeepSnapshots, kept)
	if len(removed) > 0 {
		a.log.Info("older snapshots removed", logkey.File, dir, logkey.Removed, removed, logkey.Keep, a.cfg.KeepSnapshots)
	}
	if err != nil {
		a.log.Warn("older snapshots not all removed", logkey.File, dir, logkey.Err, err)
	}
}

func (a *Agent) inventory() []role.InventoryServer {
	servers := make([]role.InventoryServer, len(a.cfg.Servers))
	for i, s := range a.cfg.Servers {
		servers[i] = role.InventoryServer{Name: s.Name, Address: s.Address}
	}
	return servers
}

// writeJoin writes the k3s config drop-in that makes this host's server
// join through a live voter: the voters of the promotion asked, kept as
// the voters last seen, else those last seen.
func (a *Agent) writeJoin(f role.Facts) error {
	voters := a.st.get().Voters
	if q := f.Request; q != nil && q.Action == api.RequestPromote && len(q.Voters) > 0 {
		voters = q.Voters
		if !slices.Equal(voters, a.st.get().Voters) {
			if err := a.st.update(func(s *api.AgentState) { s.Voters = slices.Clone(voters) }); err != nil {
				return err
			}
		}
	}
	if f.K3sConfigErr != nil {
		return f.K3sConfigErr
	}
	url, err := role.ServerJoinURL(a.inventory(), a.cfg.NodeName, voters, f.ServerPort)
	if err != nil {
		return fmt.Errorf("derive the server to join: %w", err)
	}
	if err := a.host.writeJoin(url); err != nil {
		return err
	}
	a.log.Info("join written", logkey.Server, url, logkey.File, a.cfg.JoinFile)
	return nil
}

// rememberVoters keeps the nodes whose members vote, for the server a
// demoted agent joins.
func (a *Agent) rememberVoters(ctx context.Context) {
	members, err := a.etcd.Members(ctx)
	if err != nil {
		a.log.Warn("voters not read", logkey.Err, err)
		return
	}
	a.keepVoters(members)
}

// report builds the report of a decision from what its steps did.
func (a *Agent) report(r *role.Report, done outcome, err error) *api.Report {
	rep := &api.Report{Swap: r.Swap, Action: r.Action, State: r.State, Message: r.Message, At: a.clock.Now().UTC()}
	if q := r.Answers; q != nil {
		at := q.At
		rep.RequestAt = &at
	}
	if err != nil {
		rep.State, rep.Message = api.StateFailed, err.Error()
		return rep
	}
	var start time.Time
	switch r.Action {
	case api.RequestPromote:
		start = done.serverStart
	case api.ReportFinish:
		start = done.agentStart
	}
	if !start.IsZero() {
		s := start.UTC()
		rep.StartedAt = &s
	}
	rep.Snapshot = done.snapshot
	return rep
}
