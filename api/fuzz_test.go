package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/fleet-role/fleet-role/api"
)

// seeds adds every file the glob matches to the corpus.
func seeds(f *testing.F, glob string) {
	paths, err := filepath.Glob(glob)
	if err != nil {
		f.Fatal(err)
	}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzRoleFile feeds arbitrary bytes to the agent's reading of its role
// file. A refusal is ErrCorruptRoleFile and no role; a role read is one
// of the two words, and the file the agent writes for it (Bytes) reads as
// the same role.
func FuzzRoleFile(f *testing.F) {
	seeds(f, filepath.Join("testdata", "role-*"))
	for _, s := range []string{"", "server", " agent \r\n", "server\nagent\n", "Server\n", "\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := api.ParseHostRole(data)
		if err != nil {
			if !errors.Is(err, api.ErrCorruptRoleFile) || r != "" {
				t.Fatalf("a refusal is ErrCorruptRoleFile and no role, got %q and %v", r, err)
			}
			return
		}
		if r != api.HostServer && r != api.HostAgent {
			t.Fatalf("a role that is neither word: %q", r)
		}
		again, err := api.ParseHostRole(r.Bytes())
		if err != nil || again != r {
			t.Fatalf("the file written for %q reads as %q, %v", r, again, err)
		}
	})
}

// document is one wire document type under fuzzing: how to read it into
// a new value, and its Validate if it has one.
type document struct {
	name     string
	new      func() any
	validate func(v any) error
}

func doc[T any](name string, validate func(T) error) document {
	d := document{name: name, new: func() any { return new(T) }}
	if validate != nil {
		d.validate = func(v any) error { return validate(*v.(*T)) }
	}
	return d
}

// wireDocuments are every document of the wire contract a version field
// marks (version.go).
var wireDocuments = []document{
	doc("Request", api.Request.Validate),
	doc("Report", api.Report.Validate),
	doc("Probe", api.Probe.Validate),
	doc("SwapRecord", api.SwapRecord.Validate),
	doc("ManualRequest", api.ManualRequest.Validate),
	doc("Status", api.Status.Validate),
	doc[api.AgentState]("AgentState", nil),
	doc("Pause", api.Pause.Validate),
	doc("Cancel", api.Cancel.Validate),
	doc("NotifyQueue", api.NotifyQueue.Validate),
}

// FuzzWireDocuments reads arbitrary bytes as each document of the wire
// contract. Nothing panics; a document read is written, and what is
// written reads back to a value that writes the same bytes and that
// Validate judges as it judged the first (the version aside: a writer
// writes its own).
func FuzzWireDocuments(f *testing.F) {
	seeds(f, filepath.Join("testdata", "*.json"))
	seeds(f, filepath.Join("testdata", "v1", "*.json"))
	f.Add([]byte(`{"v":7,"at":"2026-11-30T12:00:00+01:00","period":"-1ns","members":[{"learner":true}]}`))
	f.Add([]byte(`{"swap":{"phase":"stuck"},"verdicts":{"a":{"state":"fit"}},"bound":"1h"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, d := range wireDocuments {
			v := d.new()
			if err := json.Unmarshal(data, v); err != nil {
				continue
			}
			var verdict error
			if d.validate != nil {
				verdict = d.validate(v)
			}
			b1, err := json.Marshal(v)
			if err != nil {
				t.Fatalf("%s: a document read does not write: %v", d.name, err)
			}
			w := d.new()
			if err := json.Unmarshal(b1, w); err != nil {
				t.Fatalf("%s: a document written does not read: %v\n%s", d.name, err, b1)
			}
			if d.validate != nil {
				if again := d.validate(w); errString(again) != errString(verdict) {
					t.Fatalf("%s: Validate said %v, and %v of the document written\n%s", d.name, verdict, again, b1)
				}
			}
			b2, err := json.Marshal(w)
			if err != nil {
				t.Fatalf("%s: a document read back does not write: %v", d.name, err)
			}
			if !bytes.Equal(b1, b2) {
				t.Fatalf("%s: written, read and written again, it changes:\n%s\n%s", d.name, b1, b2)
			}
			x := d.new()
			if err := json.Unmarshal(b2, x); err != nil || !reflect.DeepEqual(w, x) {
				t.Fatalf("%s: the same bytes read as two values: %+v and %+v (%v)", d.name, w, x, err)
			}
		}
	})
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
