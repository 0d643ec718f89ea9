package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/controller"
)

func newConfigCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print a default configuration, or check one",
		Example: `  fleet-role config default controller > controller.toml
  fleet-role config validate controller.toml`,
		Args: unknownCommand,
		RunE: noCommand,
	}
	var kind string
	var files bool
	validate := &cobra.Command{
		Use: "validate FILE",
		Example: `  # Check the controller's configuration before the Deployment reads it
  fleet-role config validate controller.toml

  # An agent's, without checking the files it names on this host
  fleet-role config validate --files=false --kind agent agent.toml`,
		Short: "Check a configuration file; a bad one exits 2 naming the key",
		Long: `validate checks an agent or a controller configuration; which one it is
is told by its keys (node_name, platform, servers... are the agent's), or
by --kind. For an agent's configuration it also checks, on the host it
runs on, the files the configuration names: the role file, the kubeconfig
and its token must be there and readable; etcd's client certificates and
the files the agent writes itself must be readable where they are there
already (on a host that has never been a server they are not). For a
controller's, its notification URLs must be ones shoutrrr knows, and the
file of more of them readable. --files=false
leaves the files alone, to check a configuration made for another host.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			k := kind
			if k == "" {
				data, err := config.ReadFile(path)
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				k = config.Kind(data)
			}
			var err error
			switch k {
			case "agent":
				var a config.Agent
				a, err = config.LoadAgent(path)
				for _, d := range a.Deprecated() {
					fmt.Fprintf(cmd.OutOrStdout(), "%s: deprecated: %s\n", path, d)
				}
				if err == nil && files {
					var notes []string
					notes, err = a.CheckFiles()
					for _, n := range notes {
						fmt.Fprintf(cmd.OutOrStdout(), "%s: note: %s\n", path, n)
					}
				}
			case "controller", "":
				k = "controller"
				var c config.Controller
				if c, err = config.LoadController(path); err == nil && files {
					err = c.CheckFiles()
				}
				if err == nil && files {
					_, err = controller.NewNotifier(c.Notify, nil)
				}
			default:
				return usageError{fmt.Errorf("--kind %q: want agent or controller", kind)}
			}
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: a valid %s configuration\n", path, k)
			return nil
		},
	}
	validate.Flags().StringVar(&kind, "kind", "", "agent or controller (default: told by the keys)")
	_ = validate.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions([]string{"agent", "controller"}, cobra.ShellCompDirectiveNoFileComp))
	validate.Flags().BoolVar(&files, "files", true, "check the files a configuration names, on this host (a controller's: its notification URLs too)")
	cmd.AddCommand(&cobra.Command{
		Use: "default agent|controller",
		Example: `  # Start a controller configuration from the defaults, each key explained
  fleet-role config default controller > controller.toml`,
		Short:     "Print the commented default configuration",
		Args:      usageArgs(cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs)),
		ValidArgs: []string{"agent", "controller"},
		RunE: func(cmd *cobra.Command, args []string) error {
			out := config.DefaultControllerTOML()
			if args[0] == "agent" {
				out = config.DefaultAgentTOML()
			}
			_, err := cmd.OutOrStdout().Write(out)
			return err
		},
	}, validate)
	return cmd
}
