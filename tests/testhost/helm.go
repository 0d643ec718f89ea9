package testhost

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Helm is the helm binary the Ansible role renders the chart with: the
// version go.mod names, as make helm builds it, kept in the cache outside
// the repository (.ci/setup builds it there; otherwise the first call
// does, in a few minutes).
func Helm() (string, error) {
	out, err := exec.Command("go", "list", "-C", Root(), "-m", "-f", "{{.Version}}", "helm.sh/helm/v3").Output()
	if err != nil {
		return "", fmt.Errorf("helm's version in go.mod: %w", err)
	}
	dir := filepath.Join(CacheDir(), "helm", strings.TrimSpace(string(out)))
	bin := filepath.Join(dir, "helm")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	// Built aside and renamed into place, for the packages that ask at once.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	make := exec.Command("make", "-s", "helm", "BIN="+tmp)
	make.Dir = Root()
	if out, err := make.CombinedOutput(); err != nil {
		return "", fmt.Errorf("make helm: %v: %s", err, out)
	}
	return bin, os.Rename(filepath.Join(tmp, "helm"), bin)
}

// CacheDir is fleet-role's cache outside the repository, where the tests'
// binaries are kept.
func CacheDir() string {
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, _ := os.UserHomeDir()
		cache = filepath.Join(home, ".cache")
	}
	return filepath.Join(cache, "fleet-role")
}
