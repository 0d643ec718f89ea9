package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// seedFile adds a file to the corpus.
func seedFile(f *testing.F, path string) {
	b, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
}

// FuzzAgentConfig feeds arbitrary bytes to the agent's configuration
// loading. A refusal wraps ErrInvalid and gives no configuration; an
// accepted configuration passes Validate; the same bytes parse to the same
// configuration twice. The default file is the corpus's seed, and parses
// to the defaults.
func FuzzAgentConfig(f *testing.F) {
	a, err := ParseAgent(DefaultAgentTOML())
	if err != nil {
		f.Fatal(err)
	}
	want := DefaultAgent()
	want.NodeName, want.Servers = a.NodeName, a.Servers
	if !reflect.DeepEqual(a, want) {
		f.Fatalf("the default agent configuration parses to %+v, not the defaults %+v", a, want)
	}
	f.Add(DefaultAgentTOML())
	seedFile(f, filepath.Join("..", "packaging", "agent.toml"))
	f.Add([]byte(minimalAgent))
	f.Add([]byte("version = 1\nnode_name = \"h1\"\nplatform = \"docker\"\nservers = [{name = \"h1\", address = \"10.0.0.1\"}]\n[docker]\nstop_timeout = \"1m\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := ParseAgent(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("a refusal that is not ErrInvalid: %v", err)
			}
			if !reflect.DeepEqual(a, Agent{}) {
				t.Fatalf("a refusal with a configuration: %+v", a)
			}
			return
		}
		if err := a.Validate(); err != nil {
			t.Fatalf("an accepted configuration fails Validate: %v", err)
		}
		again, err := ParseAgent(data)
		if err != nil || !reflect.DeepEqual(a, again) {
			t.Fatalf("the same bytes parse twice otherwise: %+v and %+v (%v)", a, again, err)
		}
	})
}

// FuzzControllerConfig is FuzzAgentConfig for the controller's
// configuration.
func FuzzControllerConfig(f *testing.F) {
	c, err := ParseController(DefaultControllerTOML())
	if err != nil {
		f.Fatal(err)
	}
	if !reflect.DeepEqual(c, DefaultController()) {
		f.Fatalf("the default controller configuration parses to %+v, not the defaults", c)
	}
	f.Add(DefaultControllerTOML())
	seedFile(f, filepath.Join("..", "packaging", "controller.toml"))
	f.Add([]byte("version = 1\n"))
	f.Add([]byte("version = 1\ncooldown = \"90s\"\n[maintenance_window]\ndays = [\"mon\"]\nstart = \"22:00\"\nend = \"02:00\"\ntime_zone = \"Europe/Berlin\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseController(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("a refusal that is not ErrInvalid: %v", err)
			}
			if !reflect.DeepEqual(c, Controller{}) {
				t.Fatalf("a refusal with a configuration: %+v", c)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("an accepted configuration fails Validate: %v", err)
		}
		again, err := ParseController(data)
		if err != nil || !reflect.DeepEqual(c, again) {
			t.Fatalf("the same bytes parse twice otherwise: %+v and %+v (%v)", c, again, err)
		}
	})
}
