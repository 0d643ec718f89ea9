package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// CheckFiles checks, on the host it runs on, the files the configuration
// names (fleet-role config validate). The files the agent reads as it
// starts — the role file, the kubeconfig and its token — must be there and
// readable. The files k3s writes when a server first starts (etcd's
// client certificates) and those the agent writes itself (the join
// drop-in, the agent unit's environment file) need only be readable where
// they are already there: their absence is a note, since on a host that
// has never been a server they are not there yet. An error names each key.
func (a Agent) CheckFiles() (notes []string, err error) {
	var p problems
	need := []struct{ key, path string }{{"role_file", a.RoleFile}, {"kubeconfig", a.Kubeconfig}, {"token_file", a.TokenFile}}
	later := []struct{ key, path string }{
		{"etcd.ca_file", a.Etcd.CAFile}, {"etcd.cert_file", a.Etcd.CertFile}, {"etcd.key_file", a.Etcd.KeyFile},
		{"join_file", a.JoinFile},
	}
	if a.Platform == PlatformSystemd {
		later = append(later, struct{ key, path string }{"systemd.agent_env_file", a.Systemd.AgentEnvFile})
	}
	for _, f := range need {
		if f.path != "" {
			if err := readable(f.path); err != nil {
				p.add(f.key, "%v", err)
			}
		}
	}
	for _, f := range later {
		if f.path == "" {
			continue
		}
		switch err := readable(f.path); {
		case errors.Is(err, fs.ErrNotExist):
			notes = append(notes, fmt.Sprintf("%s: %s is not there yet", f.key, f.path))
		case err != nil:
			p.add(f.key, "%v", err)
		}
	}
	return notes, p.err()
}

// readable opens the file for reading, as the agent will.
func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	return nil
}

// CheckFiles checks the files the controller's configuration names: the
// notification URLs' file must be there and readable, and each URL in it
// one shoutrrr knows is checked where it is used.
func (c Controller) CheckFiles() error {
	var p problems
	if f := c.Notify.URLsFile; f != "" {
		if err := readable(f); err != nil {
			p.add("notify.urls_file", "%v", err)
		}
	}
	return p.err()
}
