package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

// Set at link time by make build (-X main.version=... and so on): the
// version from the git tags (packaging/version.sh), the commit and the
// build time. A plain go build leaves them empty, and build reads what the
// Go toolchain stamped instead.
var (
	version = ""
	commit  = ""
	date    = ""
)

// buildInfo is what fleet-role --version prints.
type buildInfo struct {
	// Version is the linked version, else the module's ("(devel)" in a
	// checkout without VCS stamping).
	Version string
	// Commit is the linked commit, else vcs.revision ("-dirty" when
	// vcs.modified); "unknown" without either.
	Commit string
	// Date is the linked build time, else the commit's time (vcs.time);
	// "unknown" without either.
	Date string
}

// build reads the linked values, falling back to the build information
// the Go toolchain stamps into the binary.
func build() buildInfo {
	b := buildInfo{Version: version, Commit: commit, Date: date}
	bi, ok := debug.ReadBuildInfo()
	if b.Version == "" {
		b.Version = "(devel)"
		if ok && bi.Main.Version != "" {
			b.Version = bi.Main.Version
		}
	}
	if ok && b.Commit == "" {
		b.Commit, b.Date = vcs(bi, b.Date)
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	if b.Date == "" {
		b.Date = "unknown"
	}
	return b
}

// vcs is the commit the Go toolchain stamped, and its time where date is
// empty.
func vcs(bi *debug.BuildInfo, date string) (commit, _ string) {
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			commit = s.Value
		case "vcs.time":
			if date == "" {
				date = s.Value
			}
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if commit != "" && modified {
		commit += "-dirty"
	}
	return commit, date
}

// String is the version, the commit, the date, and the Go toolchain and
// platform, one per line.
func (b buildInfo) String() string {
	return fmt.Sprintf("fleet-role %s\ncommit: %s\ndate: %s\ngo: %s %s/%s\n",
		b.Version, b.Commit, b.Date, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// setVersion gives the root --version. It is made here, before cobra
// would make it, so that it has no -v: kubectl's -v is its verbosity, and
// fleet-role keeps the letter free for that.
func setVersion(root *cobra.Command) {
	root.Version = build().String()
	root.SetVersionTemplate("{{.Version}}")
	root.Flags().Bool("version", false, "print the version, the commit and the build date")
}

func newVersionCommand() *cobra.Command {
	return &cobra.Command{
		Use:     "version",
		Example: `  fleet-role version`,
		Short:   "Print the version, the commit and the build date (as --version does)",
		Args:    usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprint(cmd.OutOrStdout(), build())
			return err
		},
	}
}
