package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/tests/testhost"
)

// gitRepo is a scratch git repository the version script reads.
type gitRepo struct {
	t       *testing.T
	dir     string
	commits int
}

func newGitRepo(t *testing.T) *gitRepo {
	r := &gitRepo{t: t, dir: t.TempDir()}
	r.git("init", "-q", "-b", "main")
	return r
}

func (r *gitRepo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.invalid",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.invalid", "GIT_CONFIG_NOSYSTEM=1", "HOME="+r.dir)
	out, err := cmd.CombinedOutput()
	require.NoError(r.t, err, "git %s: %s", strings.Join(args, " "), out)
	return strings.TrimSpace(string(out))
}

func (r *gitRepo) commit() {
	r.t.Helper()
	r.commits++
	require.NoError(r.t, os.WriteFile(filepath.Join(r.dir, "file"), []byte(fmt.Sprint(r.commits)), 0o644))
	r.git("add", "file")
	r.git("commit", "-q", "-m", fmt.Sprint(r.commits))
}

// version runs packaging/version.sh on the repository.
func (r *gitRepo) version() (string, error) {
	out, err := exec.Command(filepath.Join(testhost.Root(), "packaging", "version.sh"), r.dir).Output()
	return strings.TrimSpace(string(out)), err
}

func (r *gitRepo) mustVersion() string {
	r.t.Helper()
	v, err := r.version()
	require.NoError(r.t, err)
	return v
}

func TestVersionsComeFromTheGitTags(t *testing.T) {
	r := newGitRepo(t)
	r.commit()
	r.commit()
	short := func() string { return r.git("rev-parse", "--short=7", "HEAD") }
	assert.Equal(t, "0.0.0+2.g"+short(), r.mustVersion(), "no tag: the commits so far")
	r.git("tag", "v0.3.0")
	assert.Equal(t, "0.3.0", r.mustVersion())
	r.commit()
	r.commit()
	r.commit()
	assert.Equal(t, "0.3.0+3.g"+short(), r.mustVersion())
	require.NoError(t, os.WriteFile(filepath.Join(r.dir, "file"), []byte("changed"), 0o644))
	assert.Equal(t, "0.3.0+3.g"+short()+".dirty", r.mustVersion())
	r.git("checkout", "-q", "file")
	r.git("tag", "-a", "-m", "rc", "v0.4.0-rc.1")
	assert.Equal(t, "0.4.0~rc.1", r.mustVersion(), "an annotated tag too")
	r.git("tag", "v0.4.0")
	assert.Equal(t, "0.4.0", r.mustVersion(), "the release wins over its candidate on one commit")
	r.git("tag", "release-notes")
	r.git("tag", "v1")
	assert.Equal(t, "0.4.0", r.mustVersion(), "tags that are not vMAJOR.MINOR.PATCH are not release tags")

	r.commit()
	r.git("tag", "v0.5.0-beta_1")
	_, err := r.version()
	assert.Error(t, err, "a release tag with a pre-release dpkg and rpm cannot order")

	v, err := exec.Command(filepath.Join(testhost.Root(), "packaging", "version.sh"), t.TempDir()).Output()
	require.NoError(t, err)
	assert.Equal(t, "0.0.0\n", string(v), "not a git checkout")
}

// rpmVercmp compares each pair with rpm's own rpmvercmp (through the Lua
// rpm.vercmp of rpm --eval), in one run: -1, 0 or 1 for each.
func rpmVercmp(t *testing.T, pairs [][2]string) []string {
	t.Helper()
	if _, err := exec.LookPath("rpm"); err != nil {
		testhost.Unavailable(t, "no rpm: apt-get install rpm, as .ci/setup does")
	}
	var lua strings.Builder
	for _, p := range pairs {
		fmt.Fprintf(&lua, "print(rpm.vercmp(%q, %q)) print(' ') ", p[0], p[1])
	}
	out, err := exec.Command("rpm", "--eval", "%{lua: "+lua.String()+"}").CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.Fields(string(out))
}

func TestPackageVersionsSortAsTheirTagsForDpkgAndRpm(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		testhost.Unavailable(t, "no dpkg: run on Debian, as .ci/setup expects")
	}
	// A history of tags and commits, each step's version after the last.
	r := newGitRepo(t)
	var versions []string
	step := func(tags ...string) {
		r.commit()
		for _, tag := range tags {
			r.git("tag", tag)
		}
		versions = append(versions, r.mustVersion())
	}
	step()
	step()
	step("v0.1.0")
	step()
	require.NoError(t, os.WriteFile(filepath.Join(r.dir, "file"), []byte("changed"), 0o644))
	versions = append(versions, r.mustVersion())
	step()
	step("v0.1.1")
	step("v0.2.0-alpha")
	step("v0.2.0-alpha.1")
	step()
	step("v0.2.0-beta.2")
	step()
	step()
	step("v0.2.0-rc.2")
	step("v0.2.0-rc.10")
	step("v0.2.0")
	step()
	step("v0.9.0")
	step("v0.10.0")
	step()
	step("v1.0.0-rc.1", "v1.0.0")
	step()
	dev := regexp.MustCompile(`\+\d+\.g[0-9a-f]{7}(\.dirty)?$`)
	assert.Equal(t, []string{"0.1.0", "0.1.1", "0.2.0~alpha", "0.2.0~alpha.1", "0.2.0~beta.2", "0.2.0~rc.2", "0.2.0~rc.10", "0.2.0", "0.9.0", "0.10.0", "1.0.0"},
		deleteMatching(versions, dev), "the tagged versions")
	t.Logf("versions in order: %s", strings.Join(versions, " < "))

	var pairs [][2]string
	for i := range versions {
		for j := i + 1; j < len(versions); j++ {
			pairs = append(pairs, [2]string{versions[i], versions[j]})
		}
	}
	for _, p := range pairs {
		out, err := exec.Command("dpkg", "--compare-versions", p[0], "lt", p[1]).CombinedOutput()
		assert.NoError(t, err, "dpkg: %s < %s: %s", p[0], p[1], out)
	}
	got := rpmVercmp(t, pairs)
	require.Len(t, got, len(pairs))
	for i, p := range pairs {
		assert.Equal(t, "-1", got[i], "rpm: %s < %s", p[0], p[1])
	}
	// And rpmVercmp itself tells the order both ways.
	assert.Equal(t, []string{"1", "0"}, rpmVercmp(t, [][2]string{{"0.2.0", "0.2.0~rc.1"}, {"0.2.0", "0.2.0"}}))
}

func deleteMatching(vs []string, re *regexp.Regexp) []string {
	var out []string
	for _, v := range vs {
		if !re.MatchString(v) {
			out = append(out, v)
		}
	}
	return out
}
