package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/api/logkey"
	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/daemon"
	"github.com/fleet-role/fleet-role/daemon/apiservers"
	"github.com/fleet-role/fleet-role/daemon/etcdclient"
	"github.com/fleet-role/fleet-role/daemon/k3sconfig"
	"github.com/fleet-role/fleet-role/platform"
	"github.com/fleet-role/fleet-role/platform/docker"
	"github.com/fleet-role/fleet-role/platform/systemd"
)

func newAgentCommand() *cobra.Command {
	var configFile string
	var logs logOptions
	cmd := &cobra.Command{
		Use:   "agent --config FILE",
		Short: "Run the host agent (fleet-role-agent.service)",
		Example: `  # As fleet-role-agent.service runs it
  fleet-role agent --config /etc/fleet-role/agent.toml

  # Check the configuration first
  fleet-role config validate /etc/fleet-role/agent.toml`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd.ErrOrStderr(), logs)
			if err != nil {
				return err
			}
			cfg, err := config.LoadAgent(configFile)
			if err != nil {
				return fmt.Errorf("%s: %w", configFile, err)
			}
			for _, d := range cfg.Deprecated() {
				log.Warn("deprecated configuration key", logkey.Config, configFile, logkey.Reason, d)
			}
			plat, err := newPlatform(cfg)
			if err != nil {
				return err
			}
			defer plat.Close()
			kube, follow, err := agentClient(cfg, log)
			if err != nil {
				return err
			}
			if follow != nil {
				go follow(cmd.Context())
			}
			etcd, err := etcdclient.New(etcdclient.Config{
				Endpoint: cfg.Etcd.Endpoint, CAFile: cfg.Etcd.CAFile, CertFile: cfg.Etcd.CertFile, KeyFile: cfg.Etcd.KeyFile,
				Timeout: cfg.Etcd.Timeout,
			})
			if err != nil {
				return err
			}
			defer etcd.Close()
			watchdog, _ := sddaemon.SdWatchdogEnabled(false)
			a, err := daemon.New(daemon.Options{
				Config: cfg, Platform: plat, Kube: kube, Etcd: etcd, Log: log,
				Notify:           func(state string) error { _, err := sddaemon.SdNotify(false, state); return err },
				WatchdogInterval: watchdog,
				Registry:         newRegistry(),
			})
			if err != nil {
				return err
			}
			return a.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&configFile, "config", "/etc/fleet-role/agent.toml", "the agent configuration")
	logFlags(cmd, &logs)
	return cmd
}

// newPlatform chooses the backend by one explicit switch.
func newPlatform(cfg config.Agent) (platform.Platform, error) {
	switch cfg.Platform {
	case config.PlatformSystemd:
		s := cfg.Systemd
		return systemd.New(systemd.Config{ServerUnit: s.ServerUnit, AgentUnit: s.AgentUnit, AgentEnvFile: s.AgentEnvFile,
			StateDir: cfg.StateDir, Bus: s.Bus, JobTimeout: s.JobTimeout})
	case config.PlatformDocker:
		d := cfg.Docker
		return docker.New(docker.Config{Host: d.Host, Image: d.Image, ServerContainer: d.ServerContainer, AgentContainer: d.AgentContainer,
			ServerArgs: d.ServerArgs, AgentArgs: d.AgentArgs, Volumes: d.Volumes, Network: d.Network, Env: d.Env,
			Privileged: d.Privileged, CapAdd: d.CapAdd, CapDrop: d.CapDrop, SecurityOpt: d.SecurityOpt, Tmpfs: d.Tmpfs, StopTimeout: d.StopTimeout})
	}
	return nil, fmt.Errorf("platform %q: %w", cfg.Platform, config.ErrInvalid)
}

// agentClient reaches the API server by the agent's kubeconfig, or
// in-cluster when its configuration gives none: the agent looks nowhere
// else, so a host's other kubeconfigs (k3s's admin one) never stand in
// for its own, narrower one. It is a core/v1 client, not a Clientset of
// every API group: the agent reaches nothing else, and a Clientset's
// making alone pages in megabytes of the binary (docs/figures.md).
//
// With follow_servers, the client dials any live server
// (daemon/apiservers), and follow checks them and keeps their list from
// the `kubernetes` EndpointSlice until its context ends; nil otherwise.
func agentClient(cfg config.Agent, log *slog.Logger) (typedcorev1.CoreV1Interface, func(context.Context), error) {
	var rc *rest.Config
	var err error
	if cfg.Kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else if err = checkKubeconfig(cfg.Kubeconfig); err == nil {
		rc, err = clientcmd.BuildConfigFromFlags("", cfg.Kubeconfig)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	rc = withOurDefaults(rc)
	var follow func(context.Context)
	if cfg.FollowServers && cfg.Kubeconfig != "" {
		k3s, err := k3sconfig.Read(cfg.K3sConfigFile(), cfg.K3sServerArgs())
		if err != nil {
			return nil, nil, fmt.Errorf("the servers to follow: %w", err)
		}
		servers, err := agentServers(cfg, k3s, rc, log)
		if err != nil {
			return nil, nil, err
		}
		if follow, err = followServers(rc, servers, api.Namespace, inventoryAddress(cfg, k3s.HTTPSPort)); err != nil {
			return nil, nil, err
		}
	}
	core, err := typedcorev1.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return core, follow, nil
}

// inventoryAddress is a server's apiserver address by its Node's name,
// from the inventory (the configuration's servers), at the servers' port
// (the https-listen-port of this host's k3s configuration); "" for a host
// the inventory does not name.
func inventoryAddress(cfg config.Agent, port int) func(string) string {
	return func(node string) string {
		for _, s := range cfg.Servers {
			if s.Name == node {
				return net.JoinHostPort(s.Address, strconv.Itoa(port))
			}
		}
		return ""
	}
}

// agentServers are the apiservers the agent may reach: those kept in its
// state dir, then the kubeconfig's, then every server of the inventory
// at the servers' port (k3s's https-listen-port), never this host's own:
// neither its address in the inventory nor any address k3s may advertise
// its apiserver by in the `kubernetes` EndpointSlice (node-ip,
// node-external-ip, advertise-address: k3s-io/k3s pkg/cli/server/server.go,
// run), which would otherwise be taken for another server's.
func agentServers(cfg config.Agent, k3s k3sconfig.Settings, rc *rest.Config, log *slog.Logger) (*apiservers.Servers, error) {
	first, err := serverAddress(rc)
	if err != nil {
		return nil, err
	}
	seed := []string{first}
	own := k3s.Own()
	for _, s := range cfg.Servers {
		if s.Name == cfg.NodeName {
			// Note: canonical, as the EndpointSlice writes an IP address.
			if a, err := netip.ParseAddr(s.Address); err == nil {
				own = append(own, a.String())
			} else {
				own = append(own, s.Address)
			}
			continue
		}
		seed = append(seed, net.JoinHostPort(s.Address, strconv.Itoa(k3s.HTTPSPort)))
	}
	file := filepath.Join(cfg.StateDir, api.APIServersFile)
	return apiservers.New(file, seed, own, log.With(logkey.Component, "agent", logkey.Part, "apiservers")), nil
}
