package api

import (
	"encoding/json"
	"fmt"
	"time"
)

// Version is the format of the JSON documents this build writes: the V
// ("v") of a Request, Report, Probe, SwapRecord, ManualRequest, Pause,
// Cancel, Status, AgentState and NotifyQueue. A document without one is
// version 1.
const Version = 1

// readVersion is the version of a document read: a missing one is 1.
func readVersion(v int) int {
	if v <= 0 {
		return 1
	}
	return v
}

// Duration is a time.Duration written in JSON as a Go duration string
// ("90s").
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON reads a duration string such as "90s" or "1m30s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"60s\", got %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// The documents' MarshalJSON write Version, whatever V holds: what this
// build writes is its own format. Their UnmarshalJSON read a missing
// version as 1. The fields of each are read and written as encoding/json
// does (wire has the type's fields and none of its methods).

// writeDoc writes w, a document's wire copy, with its version v (a field
// of w) set to Version.
func writeDoc(w any, v *int) ([]byte, error) {
	*v = Version
	return json.Marshal(w)
}

// readDoc reads b into w, a document's wire copy, and its version v (a
// field of w) as readVersion does.
func readDoc(b []byte, w any, v *int) error {
	if err := json.Unmarshal(b, w); err != nil {
		return err
	}
	*v = readVersion(*v)
	return nil
}

// MarshalJSON writes the request with V = Version.
func (r Request) MarshalJSON() ([]byte, error) {
	type wire Request
	w := wire(r)
	return writeDoc(&w, &w.V)
}

// UnmarshalJSON reads a request of any version; a missing one is 1.
func (r *Request) UnmarshalJSON(b []byte) error {
	type wire Request
	w := wire(*r)
	if err := readDoc(b, &w, &w.V); err != nil {
		return err
	}
	*r = Request(w)
	return nil
}

// MarshalJSON writes the report with V = Version.
func (r Report) MarshalJSON() ([]byte, error) {
	type wire Report
	w := wire(r)
	return writeDoc(&w, &w.V)
}

// UnmarshalJSON reads a report of any version; a missing one is 1.
func (r *Report) UnmarshalJSON(b []byte) error {
	type wire Report
	w := wire(*r)
	if err := readDoc(b, &w, &w.V); err != nil {
		return err
	}
	*r = Report(w)
	return nil
}

// MarshalJSON writes the sample with V = Version.
func (p Probe) MarshalJSON() ([]byte, error) {
	type wire Probe
	w := wire(p)
	return writeDoc(&w, &w.V)
}

// UnmarshalJSON reads a sample of any version; a missing one is 1.
func (p *Probe) UnmarshalJSON(b []byte) error {
	type wire Probe
	w := wire(*p)
	if err := readDoc(b, &w, &w.V); err != nil {
		return err
	}
	*p = Probe(w)
	return nil
}

// MarshalJSON writes the record with V = Version.
func (r SwapRecord) MarshalJSON() ([]byte, error) {
	type wire SwapRecord
	w := wire(r)
	return writeDoc(&w, &w.V)
}

// UnmarshalJSON reads a record of any version; a missing one is 1.
func (r *SwapRecord) UnmarshalJSON(b []byte) error {
	type wire SwapRecord
	w := wire(*r)
	if err := readDoc(b, &w, &w.V); err != nil {
		return err
	}
	*r = SwapRecord(w)
	return nil
}

// MarshalJSON writes the request with V = Version.
func (r ManualRequest) MarshalJSON() ([]byte, error) {
	type wire ManualRequest
	w := wire(r)
	return writeDoc(&w, &w.V)
}

// UnmarshalJSON reads a request of any version; a missing one is 1. The
// "force": true of a request an older CLI wrote (`fleet-role swap
// --force`, which passed the pause, the holds and the failure domains at
// once) is read as every override.
func (r *ManualRequest) UnmarshalJSON(b []byte) error {
	type wire ManualRequest
	w := struct {
		wire
		Force bool `json:"force,omitempty"`
	}{wire: wire(*r)}
	if err := readDoc(b, &w, &w.V); err != nil {
		return err
	}
	if w.Force {
		w.Overrides = NormalOverrides(append(w.Overrides, Overrides()...))
	}
	*r = ManualRequest(w.wire)
	return nil
}

// MarshalJSON writes the status with V = Version.
func (s Status) MarshalJSON() ([]byte, error) {
	type wire Status
	w := wire(s)
	return writeDoc(&w, &w.V)
}

// UnmarshalJSON reads a status of any version; a missing one is 1.
func (s *Status) UnmarshalJSON(b []byte) error {
	type wire Status
	w := wire(*s)
	if err := readDoc(b, &w, &w.V); err != nil {
		return err
	}
	*s = Status(w)
	return nil
}

// MarshalJSON writes the state with V = Version.
func (s AgentState) MarshalJSON() ([]byte, error) {
	type wire AgentState
	w := wire(s)
	return writeDoc(&w, &w.V)
}

// UnmarshalJSON reads a state of any version; a missing one is 1.
func (s *AgentState) UnmarshalJSON(b []byte) error {
	type wire AgentState
	w := wire(*s)
	if err := readDoc(b, &w, &w.V); err != nil {
		return err
	}
	*s = AgentState(w)
	return nil
}

// MarshalJSON writes the pause with V = Version.
func (p Pause) MarshalJSON() ([]byte, error) {
	type wire Pause
	w := wire(p)
	return writeDoc(&w, &w.V)
}

// UnmarshalJSON reads a pause of any version; a missing one is 1.
func (p *Pause) UnmarshalJSON(b []byte) error {
	type wire Pause
	w := wire(*p)
	if err := readDoc(b, &w, &w.V); err != nil {
		return err
	}
	*p = Pause(w)
	return nil
}

// MarshalJSON writes the cancel with V = Version.
func (c Cancel) MarshalJSON() ([]byte, error) {
	type wire Cancel
	w := wire(c)
	return writeDoc(&w, &w.V)
}

// UnmarshalJSON reads a cancel of any version; a missing one is 1.
func (c *Cancel) UnmarshalJSON(b []byte) error {
	type wire Cancel
	w := wire(*c)
	if err := readDoc(b, &w, &w.V); err != nil {
		return err
	}
	*c = Cancel(w)
	return nil
}
