#!/bin/sh
# Stop the agent before its binary goes.
set -e
if [ -d /run/systemd/system ]; then
	systemctl stop fleet-role-agent.service || true
	systemctl disable fleet-role-agent.service || true
fi
