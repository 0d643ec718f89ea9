package daemon

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fleet-role/fleet-role/daemon/etcdclient"
)

// snapshotPrefix begins the name of every snapshot fleet-role takes.
//
// Note: the snapshots go where k3s keeps its own, <data-dir>/server/db/
// snapshots, named <prefix><swap>-<unix> with no extension, so that
// `k3s etcd-snapshot ls` lists them with their time: k3s lists every file
// of that directory, whatever its name, and takes a snapshot's time from
// the digits after the last "-" (the file's mtime when they do not parse)
// — k3s-io/k3s pkg/etcd/snapshot.go, (*ETCD).ListSnapshots and
// listLocalSnapshots. They do not pose as k3s's own: k3s's retention
// prunes only the files that begin with its --etcd-snapshot-name
// ("etcd-snapshot" for the scheduled ones, "on-demand" for
// `k3s etcd-snapshot save`) — snapshotRetention — so it never removes
// ours, and ours never removes its.
const snapshotPrefix = "fleet-role-"

// ours is a snapshot fleet-role took: its prefix, a swap, and the unix
// time of the snapshot; a ".part" suffix marks one whose write was cut
// short.
var ours = regexp.MustCompile(`^` + regexp.QuoteMeta(snapshotPrefix) + `(.+)-([0-9]+)(\.part)?$`)

// unsafeInName is what a swap ID may not bring into a file name.
var unsafeInName = regexp.MustCompile(`[^A-Za-z0-9._-]`)

// snapshotName names the snapshot of a swap taken at a time.
func snapshotName(swap string, at time.Time) string {
	if swap == "" {
		swap = "none"
	}
	return fmt.Sprintf("%s%s-%d", snapshotPrefix, unsafeInName.ReplaceAllString(swap, "_"), at.Unix())
}

// pruneSnapshots removes all but the newest keep of fleet-role's
// snapshots in dir, newest by the unix time in their names (not the
// mtime, which a copy or a restore changes), and every partial one of
// ours left by a write cut short (the agent takes one snapshot at a
// time, so none is being written). The newest is never removed (keep is
// at least 1), nor the snapshot just taken (kept, by its base name; it
// is kept besides the newest keep should the clock have stepped back),
// nor any file that is not ours: k3s's own snapshots, its metadata, an
// operator's files. It returns the names removed.
func pruneSnapshots(dir string, keep int, kept string) ([]string, error) {
	keep = max(keep, 1)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("prune snapshots: %w", err)
	}
	type snapshot struct {
		name string
		at   int64
	}
	var whole []snapshot
	var remove []string
	for _, e := range entries {
		m := ours.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		if m[3] != "" {
			remove = append(remove, e.Name())
			continue
		}
		at, err := strconv.ParseInt(m[2], 10, 64)
		if err != nil {
			continue
		}
		whole = append(whole, snapshot{e.Name(), at})
	}
	slices.SortFunc(whole, func(a, b snapshot) int {
		if c := cmp.Compare(b.at, a.at); c != 0 {
			return c
		}
		return strings.Compare(b.name, a.name)
	})
	for i, s := range whole {
		if i >= keep && s.name != kept {
			remove = append(remove, s.name)
		}
	}
	var removed []string
	var errs []error
	for _, name := range remove {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("prune snapshots: %w", err)
	}
	return removed, nil
}

// errCopyDiffers: the bytes copied are not the snapshot's.
var errCopyDiffers = errors.New("the copy is not the snapshot")

// copySnapshot copies a snapshot, whole, into dir under its own name and
// returns the copy's path. As the snapshot itself (etcdclient's Save), the
// copy is written to <name>.part, checked against the snapshot's size and
// sha256, synced, renamed and the directory synced, so nothing is left
// under the name unless it is whole; a copy that fails removes its
// partial file. dir must exist: it is a mount off the host, and a mount
// that is missing must not turn into a copy on the host's own disk.
func copySnapshot(s etcdclient.Snapshot, dir string) (string, error) {
	path := filepath.Join(dir, filepath.Base(s.Path))
	part := path + ".part"
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("copy the snapshot to %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fail(err)
	}
	if !fi.IsDir() {
		return fail(errors.New("not a directory"))
	}
	src, err := os.Open(s.Path)
	if err != nil {
		return fail(err)
	}
	defer src.Close()
	defer os.Remove(part)
	dst, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fail(err)
	}
	defer dst.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(dst, h), src)
	if err != nil {
		return fail(err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); n != s.Size || sum != s.SHA256 {
		return fail(fmt.Errorf("%w: %d bytes of sha256 %s, not %d of %s", errCopyDiffers, n, sum, s.Size, s.SHA256))
	}
	if err := dst.Sync(); err != nil {
		return fail(err)
	}
	if err := dst.Close(); err != nil {
		return fail(err)
	}
	if err := os.Rename(part, path); err != nil {
		return fail(err)
	}
	if err := syncDir(dir); err != nil {
		return fail(err)
	}
	return path, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
