package controller

import (
	"sync"
	"time"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/swapplan"
)

// windows keeps each voter's and standby's last probe samples, oldest
// first, for their verdicts; no other host's are kept. They live in
// memory: a restarted controller has no verdict until its windows fill
// again, and takes no automatic decision until then.
type windows struct {
	mu      sync.Mutex
	size    int
	samples map[string][]api.Probe
}

func newWindows(size int) *windows {
	return &windows{size: size, samples: map[string][]api.Probe{}}
}

// add keeps a sample of the node, if the node is judged.
func (w *windows) add(n swapplan.Node) {
	if n.Probe == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if !n.Voter() && n.Role != api.RoleStandby {
		delete(w.samples, n.Name)
		return
	}
	s := append(w.samples[n.Name], *n.Probe)
	if over := len(s) - w.size; over > 0 {
		s = append(s[:0:0], s[over:]...)
	}
	w.samples[n.Name] = s
}

// forget drops a Node's samples.
func (w *windows) forget(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.samples, name)
}

// verdicts judges every node kept.
func (w *windows) verdicts(now time.Time, c swapplan.VerdictConfig) map[string]api.Verdict {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make(map[string]api.Verdict, len(w.samples))
	for name, s := range w.samples {
		out[name] = swapplan.Judge(s, now, c)
	}
	return out
}
