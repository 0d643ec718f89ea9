package api

import (
	"errors"
	"fmt"
	"strings"
)

// HostRole is what a host's role file says the host is to be: one word,
// HostServer or HostAgent, and a newline. Written by the Ansible role once
// at deployment, then by the agent (on a promotion, a step-down, or a
// finished demotion); read by the agent, which acts on a hand edit too.
// The file's path is the agent's `role_file`.
type HostRole string

// The words of the role file.
const (
	// HostServer: the host runs k3s's server, its etcd member a voter.
	HostServer HostRole = "server"
	// HostAgent: the host runs k3s's agent.
	HostAgent HostRole = "agent"
)

// ErrCorruptRoleFile marks a role file that holds neither word.
var ErrCorruptRoleFile = errors.New("corrupt role file")

// ParseHostRole reads a role file's content: one word, server or agent,
// with surrounding white space allowed.
func ParseHostRole(b []byte) (HostRole, error) {
	s := strings.TrimSpace(string(b))
	switch HostRole(s) {
	case HostServer, HostAgent:
		return HostRole(s), nil
	}
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return "", fmt.Errorf("%w: want %q or %q, found %q", ErrCorruptRoleFile, HostServer, HostAgent, s)
}

// Bytes is the role file's content for the role.
func (r HostRole) Bytes() []byte { return []byte(string(r) + "\n") }
