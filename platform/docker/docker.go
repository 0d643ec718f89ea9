// Package docker is the platform of Docker hosts: k3s's units are two
// containers, the server and the agent, created from the configuration and
// sharing the data volume; the agent container is given K3S_URL. A
// container's start is its State.StartedAt.
//
// What starts at boot is the restart policy: Start and Stop leave every
// container under unless-stopped, so a container the backend started is
// revived when the engine restarts (or the host boots), and one it
// stopped stays stopped — Docker remembers the stop (unless-stopped: "the
// container is not restarted, even after the Docker daemon restarts"),
// where always would revive it at the engine's next start.
package docker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/fleet-role/fleet-role/platform"
)

// Config is what the backend needs.
type Config struct {
	// Host is the Docker daemon's address; empty means DOCKER_HOST or the
	// local socket.
	Host            string
	Image           string
	ServerContainer string
	AgentContainer  string
	ServerArgs      []string
	AgentArgs       []string
	// Volumes as "source:target[:options]"; both containers mount them.
	Volumes     []string
	Network     string
	Env         []string
	Privileged  bool
	CapAdd      []string
	CapDrop     []string
	SecurityOpt []string
	Tmpfs       []string
	StopTimeout time.Duration
	// Labels are put on both containers.
	Labels map[string]string
}

// LabelUnit names the unit a container is, on the containers created.
const LabelUnit = "fleet-role.io/unit"

// api is the part of the Docker SDK the backend uses, narrow to ease
// testing its error paths.
type api interface {
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
	ContainerCreate(ctx context.Context, config *container.Config, host *container.HostConfig, net *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, id string, opts container.StartOptions) error
	ContainerStop(ctx context.Context, id string, opts container.StopOptions) error
	ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error
	ContainerUpdate(ctx context.Context, id string, update container.UpdateConfig) (container.UpdateResponse, error)
	ImageInspect(ctx context.Context, id string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	Close() error
}

// Platform drives the containers.
type Platform struct {
	cfg Config
	api api
}

// New connects to the Docker daemon (lazily: the first call dials).
func New(cfg Config) (*Platform, error) {
	if cfg.Image == "" || cfg.ServerContainer == "" || cfg.AgentContainer == "" {
		return nil, errors.New("docker: the image and both container names are required")
	}
	if cfg.StopTimeout <= 0 {
		cfg.StopTimeout = 30 * time.Second
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if cfg.Host != "" {
		opts = append(opts, client.WithHost(cfg.Host))
	}
	c, err := client.NewClientWithOpts(opts...)
	if err != nil {
		return nil, fmt.Errorf("docker: %w", err)
	}
	return &Platform{cfg: cfg, api: c}, nil
}

func (p *Platform) name(u platform.Unit) (string, error) {
	switch u {
	case platform.Server:
		return p.cfg.ServerContainer, nil
	case platform.Agent:
		return p.cfg.AgentContainer, nil
	}
	return "", platform.Check(u)
}

// desired is the container the configuration asks for.
func (p *Platform) desired(u platform.Unit, opts platform.StartOptions) (*container.Config, *container.HostConfig) {
	args, env := p.cfg.ServerArgs, slices.Clone(p.cfg.Env)
	if u == platform.Agent {
		args = p.cfg.AgentArgs
		env = append(env, "K3S_URL="+opts.ServerURL)
	}
	labels := map[string]string{LabelUnit: string(u)}
	for k, v := range p.cfg.Labels {
		labels[k] = v
	}
	tmpfs := map[string]string{}
	for _, t := range p.cfg.Tmpfs {
		path, o, _ := strings.Cut(t, ":")
		tmpfs[path] = o
	}
	cc := &container.Config{Image: p.cfg.Image, Cmd: slices.Clone(args), Env: env, Labels: labels}
	hc := &container.HostConfig{
		Binds:         slices.Clone(p.cfg.Volumes),
		NetworkMode:   container.NetworkMode(p.cfg.Network),
		Privileged:    p.cfg.Privileged,
		CapAdd:        slices.Clone(p.cfg.CapAdd),
		CapDrop:       slices.Clone(p.cfg.CapDrop),
		SecurityOpt:   slices.Clone(p.cfg.SecurityOpt),
		Tmpfs:         tmpfs,
		RestartPolicy: policy,
	}
	return cc, hc
}

// policy is the restart policy of every container the backend leaves:
// revived after an engine restart when it ran, never when it was stopped.
var policy = container.RestartPolicy{Name: container.RestartPolicyUnlessStopped}

// matches says an existing container is the one the configuration asks
// for: its image, command, environment and mounts.
func matches(have container.InspectResponse, want *container.Config, wantHost *container.HostConfig) bool {
	if have.Config == nil {
		return false
	}
	for _, e := range want.Env {
		if !slices.Contains(have.Config.Env, e) {
			return false
		}
	}
	var binds []string
	if have.HostConfig != nil {
		binds = slices.Sorted(slices.Values(have.HostConfig.Binds))
	}
	return have.Config.Image == want.Image && slices.Equal(have.Config.Cmd, want.Cmd) &&
		slices.Equal(binds, slices.Sorted(slices.Values(wantHost.Binds)))
}

// revives says the engine starts the container again by itself when it
// restarts: under always whatever its state, under unless-stopped (or
// on-failure, to be safe) when it runs. A container stopped under
// unless-stopped or no stays stopped.
func revives(c container.InspectResponse) bool {
	if c.HostConfig == nil || c.State == nil {
		return false
	}
	running := c.State.Running || c.State.Restarting
	switch c.HostConfig.RestartPolicy.Name {
	case container.RestartPolicyAlways:
		return true
	case container.RestartPolicyUnlessStopped, container.RestartPolicyOnFailure:
		return running
	}
	return false
}

// keepPolicy puts an existing container under unless-stopped when it has
// another policy (one created by hand or by an older installer, say).
func (p *Platform) keepPolicy(ctx context.Context, name string, have container.InspectResponse) error {
	if have.HostConfig != nil && have.HostConfig.RestartPolicy.Name == policy.Name {
		return nil
	}
	_, err := p.api.ContainerUpdate(ctx, name, container.UpdateConfig{RestartPolicy: policy})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("set the restart policy of %s to %s: %w", name, policy.Name, err)
	}
	return nil
}

// Start implements platform.Platform. A container that runs is left
// running; one that is stopped is started again if it is still the one
// the configuration asks for, else created anew.
func (p *Platform) Start(ctx context.Context, u platform.Unit, opts platform.StartOptions) (time.Time, error) {
	name, err := p.name(u)
	if err != nil {
		return time.Time{}, err
	}
	if u == platform.Agent && opts.ServerURL == "" {
		return time.Time{}, platform.ErrNoServerURL
	}
	have, err := p.api.ContainerInspect(ctx, name)
	switch {
	case cerrdefs.IsNotFound(err):
	case err != nil:
		return time.Time{}, fmt.Errorf("start %s: inspect: %w", name, err)
	case have.State != nil && (have.State.Running || have.State.Restarting):
		if err := p.keepPolicy(ctx, name, have); err != nil {
			return time.Time{}, fmt.Errorf("start %s: %w", name, err)
		}
		return startedAt(name, have)
	}
	cc, hc := p.desired(u, opts)
	if err == nil && matches(have, cc, hc) {
		if err := p.keepPolicy(ctx, name, have); err != nil {
			return time.Time{}, fmt.Errorf("start %s: %w", name, err)
		}
	}
	if err == nil && !matches(have, cc, hc) {
		if err := p.api.ContainerRemove(ctx, name, container.RemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			return time.Time{}, fmt.Errorf("start %s: remove the container of an older configuration: %w", name, err)
		}
		err = cerrdefs.ErrNotFound
	}
	if err != nil {
		if _, err := p.api.ContainerCreate(ctx, cc, hc, nil, nil, name); err != nil {
			return time.Time{}, fmt.Errorf("start %s: create: %w", name, err)
		}
	}
	if err := p.api.ContainerStart(ctx, name, container.StartOptions{}); err != nil {
		return time.Time{}, fmt.Errorf("start %s: %w", name, err)
	}
	have, err = p.api.ContainerInspect(ctx, name)
	if err != nil {
		return time.Time{}, fmt.Errorf("start %s: inspect: %w", name, err)
	}
	return startedAt(name, have)
}

func startedAt(name string, c container.InspectResponse) (time.Time, error) {
	if c.State == nil {
		return time.Time{}, fmt.Errorf("inspect %s: no state", name)
	}
	t, err := time.Parse(time.RFC3339Nano, c.State.StartedAt)
	if err != nil || t.IsZero() || t.Year() < 2000 {
		return time.Time{}, fmt.Errorf("inspect %s: no start time in %q", name, c.State.StartedAt)
	}
	return t.UTC(), nil
}

// Stop implements platform.Platform.
func (p *Platform) Stop(ctx context.Context, u platform.Unit) error {
	name, err := p.name(u)
	if err != nil {
		return err
	}
	have, err := p.api.ContainerInspect(ctx, name)
	switch {
	case cerrdefs.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("stop %s: inspect: %w", name, err)
	}
	// Note: the policy first: a container under always would be revived
	// by the engine's next start, stopped or not.
	if err := p.keepPolicy(ctx, name, have); err != nil {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	timeout := int(p.cfg.StopTimeout / time.Second)
	err = p.api.ContainerStop(ctx, name, container.StopOptions{Timeout: &timeout})
	if err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("stop %s: %w", name, err)
	}
	return nil
}

// State implements platform.Platform.
func (p *Platform) State(ctx context.Context, u platform.Unit) (platform.State, error) {
	name, err := p.name(u)
	if err != nil {
		return platform.State{}, err
	}
	c, err := p.api.ContainerInspect(ctx, name)
	if cerrdefs.IsNotFound(err) {
		return platform.State{Status: "missing"}, nil
	}
	if err != nil {
		return platform.State{}, fmt.Errorf("inspect %s: %w", name, err)
	}
	if c.State == nil {
		return platform.State{}, fmt.Errorf("inspect %s: no state", name)
	}
	st := platform.State{Status: string(c.State.Status), Active: c.State.Running || c.State.Restarting, Enabled: revives(c)}
	if st.Active {
		if st.StartedAt, err = startedAt(name, c); err != nil {
			return st, err
		}
	}
	return st, nil
}

// Installed implements platform.Platform: the image is on the host.
func (p *Platform) Installed(ctx context.Context, u platform.Unit) (bool, error) {
	if err := platform.Check(u); err != nil {
		return false, err
	}
	_, err := p.api.ImageInspect(ctx, p.cfg.Image)
	switch {
	case cerrdefs.IsNotFound(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("inspect image %s: %w", p.cfg.Image, err)
	}
	return true, nil
}

// Close implements platform.Platform.
func (p *Platform) Close() error { return p.api.Close() }

var _ platform.Platform = (*Platform)(nil)
