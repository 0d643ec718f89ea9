package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/platform"
)

// store guards the agent's state (api.AgentState) and its file, written
// atomically, so that what it holds survives a restart.
type store struct {
	mu   sync.Mutex
	path string
	s    api.AgentState
}

func openStore(dir string) (*store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state dir: %w", err)
	}
	st := &store{path: filepath.Join(dir, api.AgentStateFile)}
	b, err := os.ReadFile(st.path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return st, nil
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", st.path, err)
	}
	if err := json.Unmarshal(b, &st.s); err != nil {
		// Note: a state file that cannot be read is set aside rather than
		// stopping the agent; what it held is re-derived from the host,
		// at the cost of a report that may be made again.
		_ = os.Rename(st.path, st.path+".corrupt")
		st.s = api.AgentState{}
	}
	return st, nil
}

func (st *store) get() api.AgentState {
	st.mu.Lock()
	defer st.mu.Unlock()
	s := st.s
	return s
}

// update changes the state and writes it before returning.
func (st *store) update(change func(*api.AgentState)) error {
	st.mu.Lock()
	defer st.mu.Unlock()
	next := st.s
	change(&next)
	b, err := json.MarshalIndent(next, "", "  ")
	if err != nil {
		return err
	}
	if err := platform.WriteFileAtomic(st.path, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", st.path, err)
	}
	st.s = next
	return nil
}
