#!/bin/sh
# After the files are in place: a .deb's postinst, an .rpm's %post.
#
#   fresh install   deb: configure            rpm: 1
#   upgrade         deb: configure OLD        rpm: 2 (or more)
#   failed change   deb: abort-upgrade|abort-remove|abort-deconfigure NEW
#
# A fresh install loads the unit only: the operator (or Ansible) enables
# and starts it once /etc/fleet-role/agent.toml says this host's node and
# servers. An upgrade restarts a running agent on the new binary and
# leaves a stopped one stopped (try-restart), enabled or not as it was.
# Note: a .deb removed but not purged is configured again with its old
# version; the removal stopped and disabled the agent, so it stays so.
set -e
[ -d /run/systemd/system ] || exit 0
systemctl daemon-reload || true
case "$1" in
configure) [ -n "$2" ] || exit 0 ;;
abort-upgrade | abort-remove | abort-deconfigure) ;;
[0-9]*) [ "$1" -ge 2 ] || exit 0 ;;
*) exit 0 ;;
esac
systemctl try-restart fleet-role-agent.service ||
	echo "fleet-role: the agent did not restart on the new binary; see journalctl -u fleet-role-agent" >&2
