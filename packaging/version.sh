#!/bin/sh
# version.sh prints the version of the git checkout it runs in (or of DIR),
# from its tags, as the .deb and the .rpm carry it and fleet-role --version
# prints it:
#
#   HEAD tagged v0.3.0                      0.3.0
#   HEAD tagged v0.4.0-rc.1                 0.4.0~rc.1
#   3 commits after v0.3.0                  0.3.0+3.gabc1234
#   3 commits after v0.4.0-rc.1             0.4.0~rc.1+3.gabc1234
#   uncommitted changes                     0.3.0+0.gabc1234.dirty
#   no tag: N commits in all                0.0.0+N.gabc1234
#   not a git checkout                      0.0.0
#
# dpkg and rpm (4.10 and later) alike sort "~" before anything, the end of
# the version included, and "+" after its end: a pre-release comes before
# its release, a build after a tag after that tag and before any later
# one. Release tags are vMAJOR.MINOR.PATCH with an optional -PRERELEASE of
# [0-9A-Za-z.]; of two on one commit, the release wins.
#
# Usage: version.sh [DIR]
set -eu
[ $# -eq 0 ] || cd "$1"
if ! git rev-parse -q --verify HEAD >/dev/null 2>&1; then
	echo 0.0.0
	exit 0
fi
glob='v[0-9]*.[0-9]*.[0-9]*'
release='^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$'
hash=g$(git rev-parse --short=7 HEAD)
dirty=
git diff --quiet HEAD -- || dirty=.dirty

at=$(git tag --points-at HEAD -l "$glob" | grep -E "$release" || true)
here=$(printf '%s\n' "$at" | grep -v -- - | sort -V | tail -n1)
[ -n "$here" ] || here=$(printf '%s\n' "$at" | sort -V | tail -n1)
if [ -n "$here" ]; then
	tag=$here n=0
elif desc=$(git describe --tags --long --match "$glob" 2>/dev/null); then
	# TAG-N-gHASH
	n=${desc%-g*} tag=${n%-*} n=${n##*-}
else
	tag=v0.0.0 n=$(git rev-list --count HEAD)
fi
if ! printf '%s\n' "$tag" | grep -Eq "$release"; then
	echo "version.sh: tag $tag is not vMAJOR.MINOR.PATCH[-PRERELEASE]" >&2
	exit 1
fi

v=${tag#v}
case $v in *-*) v=${v%%-*}~${v#*-} ;; esac
if [ "$n" -gt 0 ] || [ -n "$dirty" ]; then
	v=$v+$n.$hash$dirty
fi
echo "$v"
