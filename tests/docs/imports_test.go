package docs

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the import list of docs/architecture.md from go list")

// importsMarker is the line after which docs/architecture.md holds, in a
// fenced block, the list of which package imports which.
const importsMarker = "<!-- imports: the module's own imports, checked by tests/docs -->"

func TestTheArchitecturesImportListIsWhatGoListSays(t *testing.T) {
	want := moduleImports(t)
	path := filepath.Join(root, "docs", "architecture.md")
	src, err := os.ReadFile(path)
	require.NoError(t, err)
	before, block, after := importBlock(t, string(src))
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(before+want+after), 0o644))
		return
	}
	require.Equal(t, want, block, "docs/architecture.md's import list is not current: go test ./tests/docs -run ImportList -update rewrites it; then look at the picture above it")
}

// moduleImports is one line for each package of the module that imports
// another of the module's, "pkg: imported ...", paths without the
// module's own; its tests' imports are not counted.
func moduleImports(t *testing.T) string {
	t.Helper()
	goList := func(args ...string) string {
		cmd := exec.Command("go", append([]string{"list"}, args...)...)
		cmd.Dir = root
		out, err := cmd.Output()
		require.NoError(t, err, "go list %s", strings.Join(args, " "))
		return string(out)
	}
	module := strings.TrimSpace(goList("-m")) + "/"
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(goList("-f", "{{.ImportPath}}:{{range .Imports}} {{.}}{{end}}", "./...")), "\n") {
		pkg, imports, _ := strings.Cut(line, ":")
		var own []string
		for _, imp := range strings.Fields(imports) {
			if rest, ok := strings.CutPrefix(imp, module); ok {
				own = append(own, rest)
			}
		}
		if len(own) > 0 {
			b.WriteString(strings.TrimPrefix(pkg, module) + ": " + strings.Join(own, " ") + "\n")
		}
	}
	return b.String()
}

// importBlock splits the file around the contents of the fenced block
// after the marker.
func importBlock(t *testing.T, src string) (before, block, after string) {
	t.Helper()
	i := strings.Index(src, importsMarker+"\n```\n")
	require.GreaterOrEqual(t, i, 0, "docs/architecture.md has no line %q followed by a fenced block", importsMarker)
	start := i + len(importsMarker+"\n```\n")
	end := strings.Index(src[start:], "```\n")
	require.GreaterOrEqual(t, end, 0, "the import list's block in docs/architecture.md is not closed")
	return src[:start], src[start : start+end], src[start+end:]
}
