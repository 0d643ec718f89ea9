#!/bin/sh
# Before the old files go: a .deb's prerm, an .rpm's %preun (run by the
# old package).
#
#   removal         deb: remove               rpm: 0
#   upgrade         deb: upgrade NEW          rpm: 1 (or more)
#   other           deb: deconfigure ..., failed-upgrade OLD
#
# A removal stops and disables the agent while its unit is still there;
# an upgrade leaves it running, for the new package to restart it.
set -e
[ -d /run/systemd/system ] || exit 0
case "$1" in
remove | 0) ;;
*) exit 0 ;;
esac
systemctl stop fleet-role-agent.service || true
systemctl disable fleet-role-agent.service || true
