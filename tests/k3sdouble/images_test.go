package main

import (
	"archive/tar"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeArchive writes an image archive holding the given files.
func writeArchive(t *testing.T, path string, files map[string]string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	f, err := os.Create(path)
	require.NoError(t, err)
	tw := tar.NewWriter(f)
	for name, content := range files {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content))}))
		_, err := tw.Write([]byte(content))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, f.Close())
}

func TestTheImagesOfEachArchiveInAgentImagesAreImportedAsContainerdNamesThemOnceAndAgainWhenChanged(t *testing.T) {
	dir := t.TempDir()
	images := filepath.Join(dir, "agent", "images")
	s := newImageStore(dir, slog.New(slog.DiscardHandler))
	s.sync()
	got, err := storedImages(dir)
	require.NoError(t, err)
	assert.Empty(t, got, "no agent/images: nothing")

	writeArchive(t, filepath.Join(images, "fleet-role-0.3.0.tar"), map[string]string{
		"manifest.json": `[{"Config":"a.json","RepoTags":["fleet-role:0.3.0"],"Layers":["l/layer.tar"]}]`})
	writeArchive(t, filepath.Join(images, "oci.tar"), map[string]string{
		"index.json": `{"manifests":[{"annotations":{"io.containerd.image.name":"ghcr.io/x/y:1"}},{"annotations":{"org.opencontainers.image.ref.name":"registry.example/z:2"}}]}`})
	writeArchive(t, filepath.Join(images, "broken.tar"), map[string]string{"README": "not an image"})
	require.NoError(t, os.WriteFile(filepath.Join(images, "notes.txt"), []byte("x"), 0o644))
	s.sync()
	got, err = storedImages(dir)
	require.NoError(t, err)
	assert.ElementsMatch(t, []string{"docker.io/library/fleet-role:0.3.0", "ghcr.io/x/y:1", "registry.example/z:2"}, got)

	// A new start imports them again, adding nothing; an archive replaced
	// while k3s runs is imported again.
	newImageStore(dir, slog.New(slog.DiscardHandler)).sync()
	again, err := storedImages(dir)
	require.NoError(t, err)
	assert.ElementsMatch(t, got, again)
	writeArchive(t, filepath.Join(images, "fleet-role-0.3.0.tar"), map[string]string{
		"manifest.json": `[{"RepoTags":["fleet-role:0.3.0","fleet-role:0.3"]}]`})
	s.sync()
	got, err = storedImages(dir)
	require.NoError(t, err)
	assert.Contains(t, got, "docker.io/library/fleet-role:0.3")
}
