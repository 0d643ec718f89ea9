package tests

import (
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type goPackage struct {
	ImportPath string
	Dir        string
	Name       string
	Doc        string
	GoFiles    []string
	Imports    []string
	Deps       []string
	Standard   bool
}

func listPackages(t *testing.T, patterns ...string) []goPackage {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-json"}, patterns...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	require.NoError(t, err)
	var pkgs []goPackage
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p goPackage
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else {
			require.NoError(t, err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func TestEveryPackageHasADocComment(t *testing.T) {
	for _, p := range listPackages(t, "./...") {
		assert.NotEmpty(t, strings.TrimSpace(p.Doc), "package %s has no doc comment", p.ImportPath)
	}
}

// The wire contract, the planner and the agent's decisions are pure: the
// standard library only (and, for the planner and the decisions, the wire
// contract, api), and none of it that reaches the world.
func TestThePurePackagesImportTheStandardLibraryOnlyAndDoNoIO(t *testing.T) {
	forbidden := []string{"os", "os/exec", "net", "net/http", "syscall", "io/fs", "io/ioutil", "math/rand", "math/rand/v2", "crypto/rand", "unsafe"}
	const contract = "github.com/fleet-role/fleet-role/api"
	for _, dir := range []string{"api", "swapplan", "role"} {
		if files, _ := filepath.Glob(filepath.Join("..", dir, "*.go")); len(files) == 0 {
			continue // not written yet
		}
		pkgs := listPackages(t, "./"+dir)
		require.Len(t, pkgs, 1)
		p := pkgs[0]
		std := map[string]bool{}
		for _, s := range listPackages(t, p.Imports...) {
			std[s.ImportPath] = s.Standard
		}
		for _, imp := range p.Imports {
			if imp == contract && dir != "api" {
				continue
			}
			assert.True(t, std[imp], "%s imports %s, which is not in the standard library", dir, imp)
			assert.NotContains(t, forbidden, imp, "%s imports %s, which reaches the world", dir, imp)
		}
		for _, f := range p.GoFiles {
			src, err := os.ReadFile(filepath.Join(p.Dir, f))
			require.NoError(t, err)
			for _, clock := range []string{"time.Now(", "time.Since(", "time.Until(", "time.Sleep(", "time.After(", "time.Tick("} {
				assert.NotContains(t, string(src), clock, "%s/%s reads the clock", dir, f)
			}
		}
	}
}

// The wire contract is a leaf: api imports nothing of the module, so that
// every part speaks it; the agent and the configuration speak it without
// the planner.
func TestTheWireContractIsALeafAndTheAgentDoesNotImportThePlanner(t *testing.T) {
	const module = "github.com/fleet-role/fleet-role/"
	for _, p := range listPackages(t, "./api") {
		for _, d := range p.Deps {
			assert.False(t, strings.HasPrefix(d, module), "%s depends on %s", p.ImportPath, d)
		}
	}
	for _, p := range listPackages(t, "./daemon/...", "./config/...", "./role/...") {
		assert.NotContains(t, p.Deps, module+"swapplan", "%s depends on the planner", p.ImportPath)
	}
}

func TestTheTopLevelKeepsTheLayout(t *testing.T) {
	allowed := []string{"api", "cmd", "daemon", "platform", "role", "controller", "swapplan", "config", "packaging", "ansible",
		"tests", "go.mod", "go.sum", "Makefile", "README.md", "LICENSE", ".ci", "docs", ".git", ".gitignore", "bin"}
	entries, err := os.ReadDir("..")
	require.NoError(t, err)
	for _, e := range entries {
		assert.Contains(t, allowed, e.Name(), "unexpected top-level entry %s", e.Name())
	}
	out, err := exec.Command("git", "-C", "..", "ls-files").Output()
	require.NoError(t, err)
	for _, f := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		top, _, _ := strings.Cut(f, "/")
		assert.True(t, slices.Contains(allowed, top), "tracked file %s is outside the layout", f)
	}
}
