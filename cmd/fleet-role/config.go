package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/fleet-role/fleet-role/config"
)

func newConfigCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print a default configuration, or check one",
		Args:  usageArgs(cobra.NoArgs),
	}
	var kind string
	validate := &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a configuration file; a bad one exits 2 naming the key",
		Long: `validate checks an agent or a controller configuration; which one it is
is told by its keys (node_name, platform, servers... are the agent's), or
by --kind.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			k := kind
			if k == "" {
				data, err := os.ReadFile(path)
				if err != nil {
					return usageError{err}
				}
				k = config.Kind(data)
			}
			var err error
			switch k {
			case "agent":
				_, err = config.LoadAgent(path)
			case "controller", "":
				k = "controller"
				_, err = config.LoadController(path)
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
	cmd.AddCommand(&cobra.Command{
		Use:       "default agent|controller",
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
