// Command fleet-role keeps a k3s fleet's etcd voters on healthy hosts: it
// plans voter swaps (`plan`) and checks its configuration (`config`).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/fleet-role/fleet-role/config"
	"github.com/fleet-role/fleet-role/controller/adapt"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Exit codes: 0 done, 2 bad usage or input that cannot be used (a flag, an
// argument, a configuration, a plan input), 1 any other error
// (docs/controller-and-cli.md).
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is bad usage: a wrong flag, a missing argument.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// run runs the command line and returns the exit code. A cancelled context
// is a clean exit.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return exitOK
	}
	fmt.Fprintf(stderr, "fleet-role: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) || errors.Is(err, config.ErrInvalid) || errors.Is(err, adapt.ErrInput) {
		return exitUsage
	}
	return exitError
}

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "fleet-role",
		Short:         "Keep a k3s fleet's etcd voters on healthy hosts",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			cmd.SetOut(cmd.ErrOrStderr())
			_ = cmd.Help()
			return usageError{errors.New("no command given")}
		},
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.CompletionOptions.DisableDefaultCmd = true
	setVersion(root)
	root.AddCommand(newAgentCommand(), newControllerCommand(), newSwapCommand(), newStatusCommand(), newPlanCommand(), newConfigCommand(), newVersionCommand())
	return root
}

// usageArgs marks an argument check's error as bad usage.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}
