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
	"strings"
	"syscall"
	_ "time/tzdata" // the maintenance window's time zones, in an image FROM scratch

	"github.com/agnivade/levenshtein"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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
// argument, a configuration, a plan input), 1 any other error; swap --wait
// has its own past them (wait.go, docs/controller-and-cli.md).
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError is bad usage (a wrong flag, a missing argument) or a file it
// names that cannot be used (a broken kubeconfig, a plan input that is
// not there).
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
	var ec exitCode
	if errors.As(err, &ec) {
		return ec.code
	}
	var ue usageError
	if errors.As(err, &ue) || errors.Is(err, config.ErrInvalid) || errors.Is(err, adapt.ErrInput) {
		return exitUsage
	}
	return exitError
}

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "fleet-role",
		Short: "Keep a k3s fleet's etcd voters on healthy hosts",
		Example: `  # Where the swap stands
  fleet-role status

  # Swap the voter v2 for the standby s1 and wait for its end
  fleet-role swap v2 s1 --wait`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Args:          unknownCommand,
		RunE:          noCommand,
	}
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error { return usageError{suggestFlag(cmd, err)} })
	// cobra's own `completion bash|zsh|fish|powershell`.
	setVersion(root)
	root.SetHelpCommand(helpCommand(root))
	root.AddCommand(newAgentCommand(), newControllerCommand(), newSwapCommand(), newPauseCommand(), newResumeCommand(), newStatusCommand(), newHistoryCommand(), newMembersCommand(), newPlanCommand(), newConfigCommand(), newVersionCommand())
	root.InitDefaultCompletionCmd()
	if c, _, err := root.Find([]string{"completion"}); err == nil && c != root {
		c.Args, c.RunE = unknownCommand, noCommand // `completion tcsh` is bad usage, as `config frob` is
	}
	return root
}

// noCommand runs a command that only groups others: given none of them,
// it prints its help to standard error and exits as bad usage.
func noCommand(cmd *cobra.Command, _ []string) error {
	cmd.SetOut(cmd.ErrOrStderr())
	_ = cmd.Help()
	return usageError{errors.New("no command given")}
}

// helpCommand is cobra's `help [command]`, but a topic that is no
// command is bad usage with the commands it is close to, as a mistyped
// command is, where cobra's own prints the usage and exits 0.
func helpCommand(root *cobra.Command) *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "help prints the help of the command named, of fleet-role itself when none is.",
		ValidArgsFunction: func(_ *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			found, _, _ := root.Find(args)
			var names []cobra.Completion
			for _, c := range found.Commands() {
				if c.IsAvailableCommand() && strings.HasPrefix(c.Name(), toComplete) {
					names = append(names, cobra.CompletionWithDesc(c.Name(), c.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(_ *cobra.Command, args []string) error {
			found, rest, err := root.Find(args)
			switch {
			case err != nil:
				return usageError{err}
			case len(rest) > 0:
				return unknownCommand(found, rest)
			}
			found.InitDefaultHelpFlag()
			found.InitDefaultVersionFlag()
			return found.Help()
		},
	}
}

// suggestDistance is how far (in Levenshtein distance) a mistyped command
// or flag may be from one it suggests: cobra's default.
const suggestDistance = 2

// unknownCommand is the root's argument check: a word that is no command
// is bad usage, with the commands it is close to, as kubectl suggests them.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	cmd.SuggestionsMinimumDistance = suggestDistance
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return usageError{fmt.Errorf("%s\n\nRun '%s --help' for usage", msg, cmd.CommandPath())}
}

// suggestFlag adds to an unknown flag's error the command's flags whose
// names are close to it, within cobra's distance for commands.
func suggestFlag(cmd *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return err
	}
	var close []string
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && (levenshtein.ComputeDistance(name, f.Name) <= suggestDistance || strings.HasPrefix(f.Name, name)) {
			close = append(close, "--"+f.Name)
		}
	})
	if len(close) == 0 {
		return err
	}
	return fmt.Errorf("%w\n\nDid you mean this?\n\t%s", err, strings.Join(close, "\n\t"))
}

// usageArgs marks an argument check's error as bad usage, followed by
// the command's usage line, which names the arguments it takes where
// cobra's error only counts them. cobra's check of no arguments calls an
// extra one an unknown command; it is said as what it is.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		err := check(cmd, args)
		if err == nil {
			return nil
		}
		path := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
		msg := path + ": " + err.Error()
		switch {
		case strings.HasPrefix(err.Error(), "unknown command "):
			msg = fmt.Sprintf("%s takes no arguments: got %q", path, args)
		case strings.HasPrefix(err.Error(), "invalid argument ") && len(cmd.ValidArgs) > 0:
			msg = fmt.Sprintf("%s: %q is not one of %s", path, args[0], strings.Join(cmd.ValidArgs, ", "))
		}
		return usageError{fmt.Errorf("%s\n\nUsage: %s", msg, cmd.UseLine())}
	}
}
