package tests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/tests/testhost"
)

// TestTheControllerImageIsTheStaticBinaryFromScratch builds the image as
// make image does, with no registry, and runs it.
func TestTheControllerImageIsTheStaticBinaryFromScratch(t *testing.T) {
	testhost.RequireDocker(t)
	dir := t.TempDir()
	_, err := testhost.BuildFleetRole(dir)
	require.NoError(t, err)
	image := "fleet-role-test/controller:image-test"
	testhost.Docker(t, "build", "-q", "-f", filepath.Join(testhost.Root(), "packaging", "Dockerfile"), "-t", image, dir)
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", "-f", image).Run() })
	assert.True(t, strings.HasPrefix(testhost.Docker(t, "run", "--rm", image, "version"), "fleet-role "))
	assert.Contains(t, testhost.Docker(t, "run", "--rm", image, "config", "default", "controller"), "dry_run = true")
	assert.Equal(t, "65532:65532", testhost.Docker(t, "image", "inspect", "-f", "{{.Config.User}}", image))
	// As kubectl exec runs a command in the controller's Pod: by name,
	// from PATH, beside the entrypoint.
	assert.True(t, strings.HasPrefix(testhost.Docker(t, "run", "--rm", "--entrypoint", "fleet-role", image, "version"), "fleet-role "),
		"the binary is on PATH")
	layers := testhost.Docker(t, "image", "inspect", "-f", "{{len .RootFS.Layers}}", image)
	assert.Equal(t, "1", layers, "FROM scratch: the binary's layer alone")
}

// TestTwoBuildsOfOneCommitMakeOneBinaryAndOneImage runs make image twice,
// a second apart, into two directories: the binaries are the same bytes
// and the tag names the same image. A second build of the commit (a test
// beside, a user's make image again) must not change the image the
// playbook delivers, or a run again would deliver it anew.
func TestTwoBuildsOfOneCommitMakeOneBinaryAndOneImage(t *testing.T) {
	testhost.RequireDocker(t)
	tag := strings.TrimSpace(run(t, "make", "-s", "image-tag"))
	var binaries [2][]byte
	var ids [2]string
	for i := range 2 {
		if i > 0 {
			// The old build date had a second's resolution.
			time.Sleep(1100 * time.Millisecond)
		}
		dir := t.TempDir()
		run(t, "make", "image", "BIN="+dir)
		b, err := os.ReadFile(filepath.Join(dir, "fleet-role"))
		require.NoError(t, err)
		binaries[i] = b
		ids[i] = testhost.Docker(t, "image", "inspect", "-f", "{{.Id}}", "fleet-role:"+tag)
	}
	assert.True(t, bytes.Equal(binaries[0], binaries[1]), "the two binaries differ")
	assert.Equal(t, ids[0], ids[1], "fleet-role:%s named another image after the second build", tag)
}

// run runs a command in the repository's root and returns its output.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = testhost.Root()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), out.String())
	return out.String()
}
