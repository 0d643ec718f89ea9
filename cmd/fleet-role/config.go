package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fleet-role/fleet-role/config"
)

func newConfigCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print a default configuration, or check one",
		Args:  usageArgs(cobra.NoArgs),
	}
	cmd.AddCommand(&cobra.Command{
		Use:       "default controller",
		Short:     "Print the commented default configuration",
		Args:      usageArgs(cobra.MatchAll(cobra.ExactArgs(1), cobra.OnlyValidArgs)),
		ValidArgs: []string{"controller"},
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := cmd.OutOrStdout().Write(config.DefaultControllerTOML())
			return err
		},
	}, &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a configuration file; a bad one exits 2 naming the key",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := config.LoadController(args[0]); err != nil {
				return fmt.Errorf("%s: %w", args[0], err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: a valid controller configuration\n", args[0])
			return nil
		},
	})
	return cmd
}
