#!/bin/sh
# Load the unit; it is enabled and started by the operator (or Ansible)
# once /etc/fleet-role/agent.toml says this host's node and servers.
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
