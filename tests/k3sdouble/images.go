package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"
)

// imageStore stands in for the image store of k3s's containerd, as far as
// fleet-role meets it: images delivered as archives into
// <data-dir>/agent/images. k3s imports every archive there at its start
// (k3s: pkg/agent/containerd, the preload at containerd's start) and,
// while it runs, each one
// added or changed (k3s: pkg/agent/containerd/watcher.go, an fsnotify
// watch of the directory). The double records the references of each
// archive's images in <data-dir>/agent/containerd/double-images, one per
// line, named as containerd names them (a short name is
// docker.io/library/…: distribution's ParseNormalizedNamed); the e2e
// harness reads that file where, on real k3s, it asks `k3s ctr images ls`.
// Archives in docker save's layout (manifest.json's RepoTags) and OCI's
// (index.json's io.containerd.image.name or
// org.opencontainers.image.ref.name) are read. Fidelity: a compressed
// archive, which k3s imports too, is skipped (the playbook delivers
// .tar); k3s imports on the watch's event, the double at its next
// --period pass. An archive that does not read is logged and skipped,
// as k3s logs a failed import and goes on.
type imageStore struct {
	dataDir string
	log     *slog.Logger
	// seen is each archive's size and time as last imported.
	seen map[string]archiveStamp
}

type archiveStamp struct {
	size int64
	mod  time.Time
}

// storeFile is where the double keeps the store, under the data dir.
const storeFile = "agent/containerd/double-images"

func newImageStore(dataDir string, log *slog.Logger) *imageStore {
	return &imageStore{dataDir: dataDir, log: log, seen: map[string]archiveStamp{}}
}

// sync imports each archive of agent/images not imported as it now is.
func (s *imageStore) sync() {
	dir := filepath.Join(s.dataDir, "agent", "images")
	entries, err := os.ReadDir(dir)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("Unable to read images", "dir", dir, "err", err)
		}
		return
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".tar") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fi, err := e.Info()
		if err != nil {
			continue
		}
		stamp := archiveStamp{size: fi.Size(), mod: fi.ModTime()}
		if s.seen[path] == stamp {
			continue
		}
		refs, err := archiveRefs(path)
		if err != nil {
			s.log.Warn("Error importing images", "file", path, "err", err)
			s.seen[path] = stamp
			continue
		}
		if err := s.add(refs); err != nil {
			s.log.Warn("Error importing images", "file", path, "err", err)
			continue
		}
		s.seen[path] = stamp
		s.log.Info("Imported images", "file", path, "images", refs)
	}
}

// add puts references in the store file.
func (s *imageStore) add(refs []string) error {
	have, err := storedImages(s.dataDir)
	if err != nil {
		return err
	}
	for _, r := range refs {
		if !slices.Contains(have, r) {
			have = append(have, r)
		}
	}
	p := filepath.Join(s.dataDir, storeFile)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(strings.Join(have, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// storedImages reads the store of the data dir: none when there is none.
func storedImages(dataDir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, storeFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// archiveRefs reads the references of an image archive's images.
func archiveRefs(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var manifest, index []byte
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		switch strings.TrimPrefix(h.Name, "./") {
		case "manifest.json":
			if manifest, err = io.ReadAll(tr); err != nil {
				return nil, err
			}
		case "index.json":
			if index, err = io.ReadAll(tr); err != nil {
				return nil, err
			}
		}
	}
	var names []string
	switch {
	case index != nil:
		var idx struct {
			Manifests []struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.Unmarshal(index, &idx); err != nil {
			return nil, fmt.Errorf("index.json: %w", err)
		}
		for _, m := range idx.Manifests {
			if n := m.Annotations["io.containerd.image.name"]; n != "" {
				names = append(names, n)
			} else if n := m.Annotations["org.opencontainers.image.ref.name"]; n != "" {
				names = append(names, n)
			}
		}
	case manifest != nil:
		var ms []struct {
			RepoTags []string `json:"RepoTags"`
		}
		if err := json.Unmarshal(manifest, &ms); err != nil {
			return nil, fmt.Errorf("manifest.json: %w", err)
		}
		for _, m := range ms {
			names = append(names, m.RepoTags...)
		}
	default:
		return nil, errors.New("neither manifest.json nor index.json: not an image archive")
	}
	var refs []string
	for _, n := range names {
		named, err := reference.ParseNormalizedNamed(n)
		if err != nil {
			return nil, fmt.Errorf("image name %q: %w", n, err)
		}
		refs = append(refs, named.String())
	}
	if len(refs) == 0 {
		return nil, errors.New("no named image")
	}
	return refs, nil
}
