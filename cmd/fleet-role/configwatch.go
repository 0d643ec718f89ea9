package main

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"reflect"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/fleet-role/fleet-role/api/logkey"
	"github.com/fleet-role/fleet-role/config"
)

// errConfigChanged ends the controller once its configuration file holds
// another configuration than the one it runs on.
var errConfigChanged = errors.New("the configuration changed")

// configWatch tells when the controller's configuration file holds a
// configuration other than the one it runs on.
//
// Note: the controller reads its configuration once, at its start. Its
// ConfigMap, mounted as a volume, changes in place (the kubelet swaps the
// directory's ..data link), and the Ansible role's checksum on the pod
// template only rolls the Pods when the role applies the change: a
// `kubectl apply` of packaging/kubernetes/controller.yaml or a `kubectl edit` does not.
// So the controller exits, cleanly (its leadership released), once its
// file says something new, and is started again with it, as kube-proxy
// does with its own configuration file. An exit rather than a reload in
// the process: the period, the namespace, the leader election and the
// listen address are set up once, at the start, and a new process takes
// every key the same way, with nothing to get half-applied.
type configWatch struct {
	path    string
	running config.Controller
	// debounce makes a burst of events one look; resync looks without an
	// event, the truth behind the watch.
	debounce, resync time.Duration
	log              *slog.Logger
	// newWatcher is fsnotify.NewWatcher; tests make it fail.
	newWatcher func() (*fsnotify.Watcher, error)
}

// newConfigWatch watches the configuration running was loaded from, at path.
func newConfigWatch(path string, running config.Controller, log *slog.Logger) *configWatch {
	return &configWatch{path: path, running: running, debounce: time.Second, resync: time.Minute,
		log: log, newWatcher: fsnotify.NewWatcher}
}

// run returns true once the file holds a valid configuration that differs
// from the running one, false when ctx ends. It watches the file's
// directory, not the file, since the file is replaced, never written;
// a file that cannot be read or is not valid is told once and waited
// out, never acted on; a watcher that fails is made anew at the next look.
func (w *configWatch) run(ctx context.Context) bool {
	var fw *fsnotify.Watcher
	defer func() {
		if fw != nil {
			fw.Close()
		}
	}()
	resync := time.NewTicker(w.resync)
	defer resync.Stop()
	var debounce <-chan time.Time
	var told string // the last problem told, so that it is told once
	for {
		if fw == nil {
			fw = w.watch()
		}
		var events <-chan fsnotify.Event
		var errs <-chan error
		if fw != nil {
			events, errs = fw.Events, fw.Errors
		}
		select {
		case <-ctx.Done():
			return false
		case _, ok := <-events:
			if ok {
				if debounce == nil {
					debounce = time.After(w.debounce)
				}
				continue
			}
			fw = nil // closed: made anew below, after a look
		case err, ok := <-errs:
			if ok {
				w.log.Warn("configuration watch failed; making a new one", logkey.Config, w.path, logkey.Err, err)
			}
			fw.Close()
			fw = nil
		case <-debounce:
			debounce = nil
		case <-resync.C:
		}
		if w.changed(&told) {
			return true
		}
	}
}

// watch is a new watcher of the file's directory, or nil when none can be
// had (the resync looks then).
func (w *configWatch) watch() *fsnotify.Watcher {
	fw, err := w.newWatcher()
	if err == nil {
		if err = fw.Add(filepath.Dir(w.path)); err != nil {
			fw.Close()
		}
	}
	if err != nil {
		w.log.Warn("configuration watch failed; reading the file every resync", logkey.Config, w.path, logkey.Resync, w.resync, logkey.Err, err)
		return nil
	}
	return fw
}

// changed reads the file again and says whether it holds a valid
// configuration other than the running one.
func (w *configWatch) changed(told *string) bool {
	c, err := config.LoadController(w.path)
	if err != nil {
		if err.Error() != *told {
			w.log.Error("configuration file unusable; running on with the one loaded at start", logkey.Config, w.path, logkey.Err, err)
			*told = err.Error()
		}
		return false
	}
	*told = ""
	return !reflect.DeepEqual(c, w.running)
}
