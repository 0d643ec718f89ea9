#!/bin/sh
# After the old files went: a .deb's postrm, an .rpm's %postun (run by
# the old package).
#
#   removal         deb: remove, purge        rpm: 0
#   upgrade         deb: upgrade NEW          rpm: 1 (or more)
#
# A removal makes systemd forget the unit whose file went.
set -e
[ -d /run/systemd/system ] || exit 0
case "$1" in
remove | purge | 0) systemctl daemon-reload || true ;;
esac
