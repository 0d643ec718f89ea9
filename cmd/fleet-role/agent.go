package main

import (
	"fmt"

	sddaemon "github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/daemon"
	"github.com/fleet-role/fleet-role/daemon/etcdclient"
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
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(cmd.ErrOrStderr(), logs)
			if err != nil {
				return err
			}
			cfg, err := config.LoadAgent(configFile)
			if err != nil {
				return fmt.Errorf("%s: %w", configFile, err)
			}
			plat, err := newPlatform(cfg)
			if err != nil {
				return err
			}
			defer plat.Close()
			kube, err := agentClient(cfg.Kubeconfig)
			if err != nil {
				return err
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
func agentClient(kubeconfig string) (typedcorev1.CoreV1Interface, error) {
	var rc *rest.Config
	var err error
	if kubeconfig == "" {
		rc, err = rest.InClusterConfig()
	} else if err = checkKubeconfig(kubeconfig); err == nil {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return typedcorev1.NewForConfig(withOurDefaults(rc))
}
