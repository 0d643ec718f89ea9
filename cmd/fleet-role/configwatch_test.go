package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleet-role/fleet-role/config"
)

// configMapVolume is a directory written as the kubelet writes a
// ConfigMap volume: each version of the files in a directory of its own,
// the ..data link swapped to it by a rename, the files links through
// ..data, the old version removed.
type configMapVolume struct {
	t       *testing.T
	dir     string
	version int
}

func newConfigMapVolume(t *testing.T, toml string) *configMapVolume {
	v := &configMapVolume{t: t, dir: t.TempDir()}
	v.write(toml)
	require.NoError(t, os.Symlink(filepath.Join("..data", "controller.toml"), v.path()))
	return v
}

func (v *configMapVolume) path() string { return filepath.Join(v.dir, "controller.toml") }

// write puts toml in place as the kubelet's atomic writer does.
func (v *configMapVolume) write(toml string) {
	t := v.t
	v.version++
	old := fmt.Sprintf("..v%d", v.version-1)
	ts := fmt.Sprintf("..v%d", v.version)
	require.NoError(t, os.Mkdir(filepath.Join(v.dir, ts), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(v.dir, ts, "controller.toml"), []byte(toml), 0o644))
	require.NoError(t, os.Symlink(ts, filepath.Join(v.dir, "..data_tmp")))
	require.NoError(t, os.Rename(filepath.Join(v.dir, "..data_tmp"), filepath.Join(v.dir, "..data")))
	require.NoError(t, os.RemoveAll(filepath.Join(v.dir, old)))
}

// syncBuffer is a log both the watch and the test touch.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

const dryRunOn = "version = 1\ndry_run = true\n"

// startWatch runs a watch of v's file, loaded now, and says when it ends
// and what it returned.
func startWatch(t *testing.T, v *configMapVolume, resync time.Duration, newWatcher func() (*fsnotify.Watcher, error)) (<-chan bool, *syncBuffer) {
	t.Helper()
	running, err := config.LoadController(v.path())
	require.NoError(t, err)
	var log syncBuffer
	w := newConfigWatch(v.path(), running, slog.New(slog.NewTextHandler(&log, nil)))
	w.debounce, w.resync = 20*time.Millisecond, resync
	if newWatcher != nil {
		w.newWatcher = newWatcher
	}
	ctx, cancel := context.WithCancel(context.Background())
	done, finished := make(chan bool, 1), make(chan struct{})
	go func() {
		defer close(finished)
		done <- w.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-finished
	})
	return done, &log
}

func ended(done <-chan bool, within time.Duration) (changed, ok bool) {
	select {
	case changed := <-done:
		return changed, true
	case <-time.After(within):
		return false, false
	}
}

func TestTheConfigWatchEndsWhenTheConfigMapVolumeTakesANewConfiguration(t *testing.T) {
	v := newConfigMapVolume(t, dryRunOn)
	done, _ := startWatch(t, v, time.Hour, nil) // no resync: the watch alone
	time.Sleep(50 * time.Millisecond)
	v.write("version = 1\ndry_run = false\n")
	changed, ok := ended(done, 5*time.Second)
	require.True(t, ok, "the watch saw the change")
	assert.True(t, changed)
}

func TestTheConfigWatchRunsOnThroughAChangeOfNothingAndAnUnusableFile(t *testing.T) {
	v := newConfigMapVolume(t, dryRunOn)
	done, log := startWatch(t, v, time.Hour, nil)
	time.Sleep(50 * time.Millisecond)

	v.write("# the same configuration, written otherwise\nversion = 1\n\ndry_run = true # still\n")
	_, ok := ended(done, 500*time.Millisecond)
	assert.False(t, ok, "the same configuration is no change")

	v.write("version = 1\ndry_run = false\ncooldown = \"-5m\"\n")
	_, ok = ended(done, 500*time.Millisecond)
	assert.False(t, ok, "an invalid configuration is not started with")
	assert.Contains(t, log.String(), "configuration file unusable; running on with the one loaded at start")
	assert.Contains(t, log.String(), "cooldown: must not be negative")
	assert.Equal(t, 1, strings.Count(log.String(), "unusable"), "told once")

	v.write("version = 1\ndry_run = false\n")
	changed, ok := ended(done, 5*time.Second)
	require.True(t, ok, "the mended file is a change")
	assert.True(t, changed)
}

func TestTheConfigWatchReadsTheFileEveryResyncWhenNoWatcherCanBeHad(t *testing.T) {
	v := newConfigMapVolume(t, dryRunOn)
	done, log := startWatch(t, v, 100*time.Millisecond, func() (*fsnotify.Watcher, error) {
		return nil, errors.New("too many open files")
	})
	time.Sleep(50 * time.Millisecond)
	v.write("version = 1\ndry_run = false\n")
	changed, ok := ended(done, 5*time.Second)
	require.True(t, ok, "the resync saw the change")
	assert.True(t, changed)
	assert.Contains(t, log.String(), "configuration watch failed; reading the file every resync")
}

func TestTheConfigWatchEndsWithItsContext(t *testing.T) {
	v := newConfigMapVolume(t, dryRunOn)
	running, err := config.LoadController(v.path())
	require.NoError(t, err)
	w := newConfigWatch(v.path(), running, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.False(t, w.run(ctx))
}

// TestTheControllerExitsCleanlyWhenItsConfigurationChanges runs the
// controller command against an API server that does not answer (it
// stands for election and waits), changes its configuration the way a
// ConfigMap volume changes, and sees it exit 0, saying why.
func TestTheControllerExitsCleanlyWhenItsConfigurationChanges(t *testing.T) {
	v := newConfigMapVolume(t, "version = 1\ndry_run = true\nlisten_address = \"\"\n")
	kc := kubeconfig(t, filepath.Join(t.TempDir(), "kubeconfig"), "nowhere", "https://127.0.0.1:1")
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		code <- run(ctx, []string{"controller", "--config", v.path(), "--kubeconfig", kc}, strings.NewReader(""), &stdout, &stderr)
	}()
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), "msg=starting") }, 10*time.Second, 20*time.Millisecond)
	select {
	case c := <-code:
		t.Fatalf("the controller exited %d before its configuration changed:\n%s", c, stderr.String())
	case <-time.After(500 * time.Millisecond):
	}
	v.write("version = 1\ndry_run = false\nlisten_address = \"\"\n")
	select {
	case c := <-code:
		assert.Equal(t, exitOK, c, stderr.String())
		assert.Contains(t, stderr.String(), "configuration changed; exiting to start again with it")
	case <-time.After(30 * time.Second):
		t.Fatalf("the controller did not exit when its configuration changed:\n%s", stderr.String())
	}
}
