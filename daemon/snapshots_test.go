package daemon

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/daemon/etcdclient"
	"github.com/fleet-role/fleet-role/platform"
)

// names lists the files of a directory, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

func TestPruningSnapshots(t *testing.T) {
	base := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		files []string
		// mtimeReversed gives the files mtimes in the opposite order of
		// their names' times, as a copy or a restore would.
		mtimeReversed bool
		keep          int
		kept          string
		want          []string
	}{
		{
			name:  "the newest of ours are kept by the time in their names, not their mtime",
			files: []string{"fleet-role-s1-100", "fleet-role-s2-300", "fleet-role-s3-200", "fleet-role-s4-400"},
			keep:  2, kept: "fleet-role-s4-400", mtimeReversed: true,
			want: []string{"fleet-role-s2-300", "fleet-role-s4-400"},
		},
		{
			name: "k3s's own snapshots, its compressed ones and other files are never touched",
			files: []string{"etcd-snapshot-h1-100", "etcd-snapshot-h1-150.zip", "on-demand-h1-120", "fleet-role-notes.txt",
				"fleet-role-s1-110", "fleet-role-s2-210", "fleet-role-s3-310", "etcd-snapshot-h1-50.part"},
			keep: 1, kept: "fleet-role-s3-310",
			want: []string{"etcd-snapshot-h1-100", "etcd-snapshot-h1-150.zip", "etcd-snapshot-h1-50.part", "fleet-role-notes.txt",
				"fleet-role-s3-310", "on-demand-h1-120"},
		},
		{
			name:  "a partial snapshot of ours left by a write cut short is removed",
			files: []string{"fleet-role-s1-100.part", "fleet-role-s2-200"},
			keep:  5, kept: "fleet-role-s2-200",
			want: []string{"fleet-role-s2-200"},
		},
		{
			name:  "fewer snapshots than kept removes nothing",
			files: []string{"fleet-role-s1-100", "fleet-role-s2-200"},
			keep:  5, kept: "fleet-role-s2-200",
			want: []string{"fleet-role-s1-100", "fleet-role-s2-200"},
		},
		{
			name:  "the snapshot just taken is kept even when the clock stepped back, besides the newest",
			files: []string{"fleet-role-s1-500", "fleet-role-s2-400", "fleet-role-s3-100"},
			keep:  1, kept: "fleet-role-s3-100",
			want: []string{"fleet-role-s1-500", "fleet-role-s3-100"},
		},
		{
			name:  "a keep below one still keeps the newest",
			files: []string{"fleet-role-s1-100", "fleet-role-s2-200"},
			keep:  0,
			want:  []string{"fleet-role-s2-200"},
		},
		{
			name:  "swap IDs with dashes are read by their last dash",
			files: []string{"fleet-role-20261201-100000-h1-1796113200", "fleet-role-20261201-090000-h3-1796109600"},
			keep:  1,
			want:  []string{"fleet-role-20261201-100000-h1-1796113200"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for i, f := range tc.files {
				path := filepath.Join(dir, f)
				require.NoError(t, os.WriteFile(path, []byte("x"), 0o600))
				at := base.Add(time.Duration(i) * time.Minute)
				if tc.mtimeReversed {
					at = base.Add(-time.Duration(i) * time.Minute)
				}
				require.NoError(t, os.Chtimes(path, at, at))
			}
			require.NoError(t, os.Mkdir(filepath.Join(dir, "fleet-role-s0-1"), 0o700), "a directory is never ours")
			_, err := pruneSnapshots(dir, tc.keep, tc.kept)
			require.NoError(t, err)
			assert.Equal(t, append(slices.Clone(tc.want), "fleet-role-s0-1"), sortedWith(names(t, dir)))
		})
	}
}

// sortedWith moves the directory fleet-role-s0-1 last, to compare.
func sortedWith(got []string) []string {
	out := slices.DeleteFunc(slices.Clone(got), func(s string) bool { return s == "fleet-role-s0-1" })
	if len(out) < len(got) {
		out = append(out, "fleet-role-s0-1")
	}
	return out
}

func TestPruningAMissingDirectoryIsNothingToDo(t *testing.T) {
	removed, err := pruneSnapshots(filepath.Join(t.TempDir(), "absent"), 5, "")
	require.NoError(t, err)
	assert.Empty(t, removed)
}

func TestASnapshotNameCarriesTheSwapAndTheUnixTimeK3sReads(t *testing.T) {
	at := time.Unix(1796113200, 0)
	assert.Equal(t, "fleet-role-20261201-100000-h1-1796113200", snapshotName("20261201-100000-h1", at))
	assert.Equal(t, "fleet-role-a_b-1796113200", snapshotName("a/b", at), "a swap ID never makes a path")
	assert.Equal(t, "fleet-role-none-1796113200", snapshotName("", at))
	assert.Regexp(t, ours, snapshotName("x", at))
}

func TestEachSnapshotIsCopiedAndTheCopiesArePrunedAsTheSnapshotsAre(t *testing.T) {
	f := newFixture(t)
	f.cfg.KeepSnapshots = 2
	f.cfg.SnapshotCopyDir = filepath.Join(f.dir, "backup")
	for _, name := range []string{"fleet-role-old-100", "fleet-role-old-300", "fleet-role-old-200", "fleet-role-old-400.part", "notes.txt"} {
		f.write(filepath.Join(f.cfg.SnapshotCopyDir, name), "x")
	}
	f.role("server")
	f.plat.Set(platform.Server, true, time.Now().Add(-time.Hour))
	f.start()
	f.request(api.RequestSnapshot)
	r := f.waitReport(api.RequestSnapshot, api.StateDone)
	require.NotNil(t, r.Snapshot)
	taken := filepath.Base(r.Snapshot.Path)
	assert.Equal(t, filepath.Join(f.cfg.SnapshotCopyDir, taken), r.Snapshot.Copy)
	b, err := os.ReadFile(r.Snapshot.Copy)
	require.NoError(t, err)
	assert.Equal(t, "snapshot", string(b))
	assert.ElementsMatch(t, []string{"fleet-role-old-300", taken, "notes.txt"}, names(t, f.cfg.SnapshotCopyDir))
}

func TestACopyDirectoryThatIsMissingFailsTheSnapshotAndIsNotCreated(t *testing.T) {
	f := newFixture(t)
	f.cfg.SnapshotCopyDir = filepath.Join(f.dir, "mnt", "backup")
	f.role("server")
	f.plat.Set(platform.Server, true, time.Now().Add(-time.Hour))
	f.start()
	f.request(api.RequestSnapshot)
	r := f.waitReport(api.RequestSnapshot, api.StateFailed)
	assert.Contains(t, r.Message, "copy the snapshot to "+f.cfg.SnapshotCopyDir)
	assert.Contains(t, r.Message, "no such file or directory")
	assert.NoDirExists(t, f.cfg.SnapshotCopyDir, "an unmounted backup is not made on the host's own disk")
}

func TestACopyWhoseBytesAreNotTheSnapshotsIsRefusedAndLeavesNothing(t *testing.T) {
	src := filepath.Join(t.TempDir(), "fleet-role-s1-100")
	require.NoError(t, os.WriteFile(src, []byte("snapshot"), 0o600))
	dir := t.TempDir()
	_, err := copySnapshot(etcdclient.Snapshot{Path: src, Size: 8, SHA256: strings.Repeat("ab", 32)}, dir)
	require.ErrorIs(t, err, errCopyDiffers, "the file changed since it was verified")
	assert.Empty(t, names(t, dir))
}
