// Package systemd is the platform of native hosts: k3s's units are systemd
// units (k3s.service, k3s-agent.service), driven through systemd's D-Bus
// API. A unit's start is read from ActiveEnterTimestamp while it runs and
// recorded in the state dir, since systemd forgets it once a stopped unit
// is unloaded.
//
// Start enables the unit and Stop disables it, as `systemctl enable` and
// `systemctl disable` do, so that what starts at boot follows the role:
// k3s's install script enables k3s.service (or k3s-agent.service) with
// WantedBy=multi-user.target. A unit without an [Install] section
// ("static") has nothing to enable: systemd makes no change, that is no
// error, and its State says Enabled false.
package systemd

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	sd "github.com/coreos/go-systemd/v22/dbus"
	godbus "github.com/godbus/dbus/v5"

	"github.com/fleet-role/fleet-role/platform"
)

// Config is what the backend needs.
type Config struct {
	ServerUnit string
	AgentUnit  string
	// AgentEnvFile is the agent unit's EnvironmentFile: K3S_URL is set in
	// it before the agent unit starts, its other lines kept.
	AgentEnvFile string
	// StateDir keeps the recorded starts.
	StateDir string
	// Bus is a D-Bus address ("unix:path=..."); empty means the system bus.
	Bus string
	// JobTimeout bounds a start or stop job.
	JobTimeout time.Duration
}

// ErrJob is returned when a systemd job ends in anything but "done".
var ErrJob = errors.New("systemd job did not complete")

// Platform drives the units. It reconnects when D-Bus drops.
type Platform struct {
	cfg  Config
	mu   sync.Mutex
	conn *sd.Conn
}

// New returns the backend; it connects on first use.
func New(cfg Config) (*Platform, error) {
	if cfg.ServerUnit == "" || cfg.AgentUnit == "" {
		return nil, errors.New("systemd: both unit names are required")
	}
	if cfg.JobTimeout <= 0 {
		cfg.JobTimeout = 5 * time.Minute
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("systemd: state dir: %w", err)
	}
	return &Platform{cfg: cfg}, nil
}

// connection returns a live D-Bus connection, dialling a new one when the
// last has dropped.
func (p *Platform) connection(ctx context.Context) (*sd.Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil && p.conn.Connected() {
		return p.conn, nil
	}
	if p.conn != nil {
		p.conn.Close()
		p.conn = nil
	}
	var c *sd.Conn
	var err error
	if p.cfg.Bus == "" {
		c, err = sd.NewSystemConnectionContext(ctx)
	} else {
		c, err = sd.NewConnection(func() (*godbus.Conn, error) { return dial(ctx, p.cfg.Bus) })
	}
	if err != nil {
		return nil, fmt.Errorf("connect to systemd over D-Bus: %w", err)
	}
	p.conn = c
	return c, nil
}

func dial(ctx context.Context, address string) (*godbus.Conn, error) {
	conn, err := godbus.Dial(address, godbus.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	if err := conn.Auth([]godbus.Auth{godbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		conn.Close()
		return nil, err
	}
	if err := conn.Hello(); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

func (p *Platform) unitName(u platform.Unit) (string, error) {
	switch u {
	case platform.Server:
		return p.cfg.ServerUnit, nil
	case platform.Agent:
		return p.cfg.AgentUnit, nil
	}
	return "", platform.Check(u)
}

// Start implements platform.Platform.
func (p *Platform) Start(ctx context.Context, u platform.Unit, opts platform.StartOptions) (time.Time, error) {
	name, err := p.unitName(u)
	if err != nil {
		return time.Time{}, err
	}
	if u == platform.Agent && opts.ServerURL == "" {
		return time.Time{}, platform.ErrNoServerURL
	}
	// Note: enabled before the start, and even when it runs already, so
	// that a unit started by hand (or an agent stopped midway) starts at
	// boot too.
	if err := p.enable(ctx, name); err != nil {
		return time.Time{}, err
	}
	st, err := p.State(ctx, u)
	if err != nil {
		return time.Time{}, err
	}
	if st.Active {
		return st.StartedAt, nil
	}
	if u == platform.Agent {
		if err := setEnv(p.cfg.AgentEnvFile, "K3S_URL", opts.ServerURL); err != nil {
			return time.Time{}, fmt.Errorf("start %s: %w", name, err)
		}
	}
	if err := p.job(ctx, name, "start"); err != nil {
		return time.Time{}, err
	}
	st, err = p.State(ctx, u)
	if err != nil {
		return time.Time{}, err
	}
	if !st.Active {
		return time.Time{}, fmt.Errorf("start %s: the unit is %s after its start job", name, st.Status)
	}
	return st.StartedAt, nil
}

// Stop implements platform.Platform.
func (p *Platform) Stop(ctx context.Context, u platform.Unit) error {
	name, err := p.unitName(u)
	if err != nil {
		return err
	}
	if ok, err := p.Installed(ctx, u); err != nil {
		return err
	} else if !ok {
		return nil
	}
	// Note: disabled before the stop: an agent stopped between the two
	// finds the unit inactive and does not stop it again, so the other
	// order could leave a stopped unit that starts at boot.
	if err := p.disable(ctx, name); err != nil {
		return err
	}
	return p.job(ctx, name, "stop")
}

// enable makes the unit start at boot: the symlinks of its [Install]
// section (force: a conflicting symlink is replaced), then a reload when
// anything changed, as `systemctl enable` does, so that systemd's
// UnitFileState agrees. Idempotent; a static unit changes nothing.
func (p *Platform) enable(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.JobTimeout)
	defer cancel()
	conn, err := p.connection(ctx)
	if err != nil {
		return fmt.Errorf("enable %s: %w", name, err)
	}
	_, changes, err := conn.EnableUnitFilesContext(ctx, []string{name}, false, true)
	if err != nil {
		return fmt.Errorf("enable %s: %w", name, err)
	}
	if len(changes) == 0 {
		return nil
	}
	if err := conn.ReloadContext(ctx); err != nil {
		return fmt.Errorf("enable %s: reload systemd: %w", name, err)
	}
	return nil
}

// disable keeps the unit from starting at boot: the symlinks of its
// [Install] section removed, under /etc and under /run (a runtime
// enablement), then a reload when anything changed, as `systemctl
// disable` does. Idempotent.
func (p *Platform) disable(ctx context.Context, name string) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.JobTimeout)
	defer cancel()
	conn, err := p.connection(ctx)
	if err != nil {
		return fmt.Errorf("disable %s: %w", name, err)
	}
	changed := false
	for _, runtime := range []bool{false, true} {
		changes, err := conn.DisableUnitFilesContext(ctx, []string{name}, runtime)
		if err != nil {
			return fmt.Errorf("disable %s: %w", name, err)
		}
		changed = changed || len(changes) > 0
	}
	if !changed {
		return nil
	}
	if err := conn.ReloadContext(ctx); err != nil {
		return fmt.Errorf("disable %s: reload systemd: %w", name, err)
	}
	return nil
}

// job runs a start or stop job and waits for its result.
func (p *Platform) job(ctx context.Context, name, op string) error {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.JobTimeout)
	defer cancel()
	conn, err := p.connection(ctx)
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	done := make(chan string, 1)
	if op == "start" {
		_, err = conn.StartUnitContext(ctx, name, "replace", done)
	} else {
		_, err = conn.StopUnitContext(ctx, name, "replace", done)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, name, err)
	}
	// Note: k3s's units are Type=notify with TimeoutStartSec=0, and k3s
	// says READY=1 only once it is up: a server once its apiserver serves,
	// which needs its etcd member to vote (k3s-io/k3s pkg/cli/server,
	// run: SdNotify after APIServerReady and ETCDReady). A start job
	// therefore lasts until the member votes, or forever. A start is
	// taken as made once its main process runs (activating/start); the
	// controller waits for the member to vote, within its own bound.
	var running <-chan time.Time
	if op == "start" {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		running = t.C
	}
	for {
		select {
		case result := <-done:
			if result != "done" {
				return fmt.Errorf("%s %s: %w: %s", op, name, ErrJob, result)
			}
			return nil
		case <-running:
			props, err := conn.GetUnitPropertiesContext(ctx, name)
			if err != nil {
				continue
			}
			active, _ := props["ActiveState"].(string)
			sub, _ := props["SubState"].(string)
			if active == "activating" && sub == "start" {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("%s %s: waiting for the job: %w", op, name, ctx.Err())
		}
	}
}

// State implements platform.Platform.
func (p *Platform) State(ctx context.Context, u platform.Unit) (platform.State, error) {
	name, err := p.unitName(u)
	if err != nil {
		return platform.State{}, err
	}
	conn, err := p.connection(ctx)
	if err != nil {
		return platform.State{}, err
	}
	props, err := conn.GetUnitPropertiesContext(ctx, name)
	if err != nil {
		return platform.State{}, fmt.Errorf("read %s: %w", name, err)
	}
	active, _ := props["ActiveState"].(string)
	sub, _ := props["SubState"].(string)
	st := platform.State{Status: active, Enabled: enabledAtBoot(props["UnitFileState"])}
	if sub != "" {
		st.Status += "/" + sub
	}
	switch {
	case active == "active", active == "reloading", active == "activating" && sub != "auto-restart":
		st.Active = true
	default:
		return st, nil
	}
	// The start is the main process's: a Type=notify unit such as k3s's
	// runs from then, though it is active only once it says READY=1.
	if prop, err := conn.GetServicePropertyContext(ctx, name, "ExecMainStartTimestamp"); err == nil {
		st.StartedAt = timestamp(prop.Value.Value())
	}
	for _, p := range []string{"ActiveEnterTimestamp", "InactiveExitTimestamp"} {
		if at := timestamp(props[p]); st.StartedAt.IsZero() && !at.IsZero() {
			st.StartedAt = at
		}
	}
	recorded := p.recorded(name)
	switch {
	case !st.StartedAt.IsZero() && !st.StartedAt.Equal(recorded):
		if err := p.record(name, st.StartedAt); err != nil {
			return st, err
		}
	case st.StartedAt.IsZero():
		st.StartedAt = recorded
	}
	if st.StartedAt.IsZero() {
		return st, fmt.Errorf("read %s: it runs, but systemd gives no start and none is recorded", name)
	}
	return st, nil
}

// Installed implements platform.Platform: the unit's file is loaded.
func (p *Platform) Installed(ctx context.Context, u platform.Unit) (bool, error) {
	name, err := p.unitName(u)
	if err != nil {
		return false, err
	}
	conn, err := p.connection(ctx)
	if err != nil {
		return false, err
	}
	prop, err := conn.GetUnitPropertyContext(ctx, name, "LoadState")
	if err != nil {
		return false, fmt.Errorf("read %s: %w", name, err)
	}
	state, _ := prop.Value.Value().(string)
	return state == "loaded", nil
}

// Close implements platform.Platform.
func (p *Platform) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		p.conn.Close()
		p.conn = nil
	}
	return nil
}

// enabledAtBoot says a UnitFileState starts the unit at boot: enabled,
// under /etc or under /run. static, disabled, masked, indirect and the
// others do not.
func enabledAtBoot(v any) bool {
	state, _ := v.(string)
	return state == "enabled" || state == "enabled-runtime"
}

func timestamp(v any) time.Time {
	us, ok := v.(uint64)
	if !ok || us == 0 {
		return time.Time{}
	}
	return time.UnixMicro(int64(us)).UTC()
}

func (p *Platform) startFile(unit string) string {
	return filepath.Join(p.cfg.StateDir, "systemd-"+unit+".start")
}

func (p *Platform) recorded(unit string) time.Time {
	b, err := os.ReadFile(p.startFile(unit))
	if err != nil {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(string(b)))
	if err != nil {
		return time.Time{}
	}
	return t
}

func (p *Platform) record(unit string, at time.Time) error {
	if err := platform.WriteFileAtomic(p.startFile(unit), []byte(at.Format(time.RFC3339Nano)+"\n"), 0o600); err != nil {
		return fmt.Errorf("record the start of %s: %w", unit, err)
	}
	return nil
}

// setEnv sets NAME=value in an environment file, keeping its other lines.
func setEnv(path, name, value string) error {
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var out bytes.Buffer
	set := false
	sc := bufio.NewScanner(bytes.NewReader(old))
	for sc.Scan() {
		line := sc.Text()
		if k, _, ok := strings.Cut(strings.TrimSpace(line), "="); ok && strings.TrimPrefix(k, "export ") == name {
			if !set {
				fmt.Fprintf(&out, "%s=%s\n", name, value)
				set = true
			}
			continue
		}
		out.WriteString(line + "\n")
	}
	if !set {
		fmt.Fprintf(&out, "%s=%s\n", name, value)
	}
	if bytes.Equal(out.Bytes(), old) {
		return nil
	}
	return platform.WriteFileAtomic(path, out.Bytes(), 0o600)
}

var _ platform.Platform = (*Platform)(nil)
