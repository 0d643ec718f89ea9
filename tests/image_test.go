package tests

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
