package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/platform"
)

// host is the agent's view of its filesystem: the role file and k3s's
// datastore.
type host struct {
	roleFile string
	dataDir  string
	staged   []string
	keep     int
	joinFile string
	// k3sFile is k3s's config file, whose drop-in the join file is;
	// k3sArgs are k3s's server command line's flags the agent knows.
	k3sFile string
	k3sArgs []string
}

// writeJoin writes the k3s config drop-in naming the server that k3s,
// server or agent, joins through. Note: k3s merges config.yaml.d/*.yaml over config.yaml in
// lexical order, later files winning (k3s-io/k3s pkg/configfilearg), so
// this `server:` wins over a config.yaml that has none, or that says
// cluster-init, as the bootstrap host's does.
func (h host) writeJoin(serverURL string) error {
	if err := os.MkdirAll(filepath.Dir(h.joinFile), 0o755); err != nil {
		return fmt.Errorf("write the join file %s: %w", h.joinFile, err)
	}
	data := fmt.Sprintf("# Written by fleet-role's agent before it starts k3s on this host:\n# the server k3s joins through, a live voter.\nserver: %s\n", serverURL)
	// Note: 0644, as config.yaml may be: it names a server, no secret.
	if err := platform.WriteFileAtomic(h.joinFile, []byte(data), 0o644); err != nil {
		return fmt.Errorf("write the join file %s: %w", h.joinFile, err)
	}
	return nil
}

func (h host) etcdDir() string { return filepath.Join(h.dataDir, "server", "db", "etcd") }
func (h host) dbDir() string   { return filepath.Join(h.dataDir, "server", "db") }

// readRole reads the role file: missing, a role, or corrupt.
func (h host) readRole() (r api.HostRole, missing bool, err error) {
	b, err := os.ReadFile(h.roleFile)
	if errors.Is(err, os.ErrNotExist) {
		return "", true, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("read the role file %s: %w", h.roleFile, err)
	}
	r, err = api.ParseHostRole(b)
	if err != nil {
		return "", false, fmt.Errorf("the role file %s: %w", h.roleFile, err)
	}
	return r, false, nil
}

func (h host) writeRole(r api.HostRole) error {
	if err := os.MkdirAll(filepath.Dir(h.roleFile), 0o755); err != nil {
		return err
	}
	if err := platform.WriteFileAtomic(h.roleFile, r.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write the role file %s: %w", h.roleFile, err)
	}
	return nil
}

// datastore says whether server/db/etcd exists, whether k3s's tombstone
// is in it (existence, not content), and the member name it holds.
func (h host) datastore() (exists, tombstone bool, member string) {
	if fi, err := os.Stat(h.etcdDir()); err != nil || !fi.IsDir() {
		return false, false, ""
	}
	_, err := os.Stat(filepath.Join(h.dataDir, filepath.FromSlash(api.TombstonePath)))
	tombstone = err == nil
	if b, err := os.ReadFile(filepath.Join(h.dataDir, filepath.FromSlash(api.MemberNamePath))); err == nil {
		member = strings.TrimSpace(string(b))
	}
	return true, tombstone, member
}

// stagedFiles says whether every staging file exists, naming the first
// missing one.
func (h host) stagedFiles() (bool, string) {
	for _, f := range h.staged {
		if _, err := os.Stat(f); err != nil {
			return false, f
		}
	}
	return true, ""
}

const removedPrefix = "etcd-removed-"

// moveDatastore moves server/db/etcd aside to db/etcd-removed-<unix> and
// keeps only the newest few moved aside. A datastore already gone is fine.
func (h host) moveDatastore(now time.Time) (string, error) {
	if _, err := os.Stat(h.etcdDir()); errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	dest := filepath.Join(h.dbDir(), removedPrefix+strconv.FormatInt(now.Unix(), 10))
	for i := 1; ; i++ {
		if _, err := os.Stat(dest); errors.Is(err, os.ErrNotExist) {
			break
		}
		dest = filepath.Join(h.dbDir(), fmt.Sprintf("%s%d.%d", removedPrefix, now.Unix(), i))
	}
	if err := os.Rename(h.etcdDir(), dest); err != nil {
		return "", fmt.Errorf("move the datastore aside: %w", err)
	}
	if d, err := os.Open(h.dbDir()); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return dest, h.prune()
}

// prune removes all but the newest keep datastores moved aside.
func (h host) prune() error {
	entries, err := os.ReadDir(h.dbDir())
	if err != nil {
		return err
	}
	type aside struct {
		name string
		at   float64
	}
	var all []aside
	for _, e := range entries {
		if rest, ok := strings.CutPrefix(e.Name(), removedPrefix); ok && e.IsDir() {
			at, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				continue
			}
			all = append(all, aside{e.Name(), at})
		}
	}
	slices.SortFunc(all, func(a, b aside) int {
		switch {
		case a.at > b.at:
			return -1
		case a.at < b.at:
			return 1
		}
		return strings.Compare(b.name, a.name)
	})
	var errs []error
	for i := h.keep; i < len(all); i++ {
		if err := os.RemoveAll(filepath.Join(h.dbDir(), all[i].name)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
