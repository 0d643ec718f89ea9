package daemon

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/fleet-role/fleet-role/api/logkey"
)

// watcher watches directories, not files, since files are replaced by
// renames: the role file's directory and the chain of directories down to
// k3s's server/db/etcd, each one that exists. A burst of events within the
// debounce is one trigger; the look that follows re-reads and compares, so
// an event is a hint, never the truth (the resync is). A watcher whose
// channels close or that reports an error is made anew.
type watcher struct {
	dirs     []string // wanted, whether or not they exist yet
	debounce time.Duration
	trigger  func()
	log      *slog.Logger
}

func (w *watcher) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := w.watch(ctx); err != nil {
			w.log.Warn("file watch failed; making a new one", logkey.Err, err)
			w.trigger() // something may have been missed
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// watch runs one fsnotify watcher until it fails or ctx ends.
func (w *watcher) watch(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer fw.Close()
	watched := map[string]bool{}
	add := func() {
		for _, d := range w.dirs {
			if watched[d] {
				continue
			}
			if fi, err := os.Stat(d); err == nil && fi.IsDir() {
				if err := fw.Add(d); err == nil {
					watched[d] = true
				}
			}
		}
	}
	add()
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw.Events:
			if !ok {
				return errClosed
			}
			if ev.Op.Has(fsnotify.Remove) || ev.Op.Has(fsnotify.Rename) {
				if watched[ev.Name] {
					delete(watched, ev.Name) // a watched directory went; it may come back
				}
			}
			if ev.Op.Has(fsnotify.Create) {
				add()
			}
			if timer == nil {
				timer = time.NewTimer(w.debounce)
				fire = timer.C
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return errClosed
			}
			return err
		case <-fire:
			timer, fire = nil, nil
			add()
			w.trigger()
		}
	}
}

type watchError string

func (e watchError) Error() string { return string(e) }

const errClosed = watchError("fsnotify channels closed")
