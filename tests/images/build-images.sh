#!/usr/bin/env bash
# build-images.sh builds the container images the platform tests run,
# without any registry: a Debian bookworm rootfs from Debian's mirror
# (mmdebstrap, through `docker import`), then a systemd host image on it.
# Images are tagged by a hash of their inputs and cached as zstd tarballs
# in a directory outside the repository, so a second run loads them in
# seconds or does nothing at all.
#
# Usage: build-images.sh
#   FLEET_ROLE_IMAGE_CACHE  cache directory
#                           (default ${XDG_CACHE_HOME:-$HOME/.cache}/fleet-role/images)
#   DEBIAN_MIRROR           default http://deb.debian.org/debian
# Prints the systemd image's name on its last line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${FLEET_ROLE_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet-role/images}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# rpm: the .rpm installed and upgraded as on an RPM host (tests/package_upgrade_test.go).
packages=systemd,systemd-sysv,dbus,procps,iproute2,python3,rpm
mkdir -p "$cache"

need() {
	command -v "$1" >/dev/null 2>&1 && return
	echo "build-images: installing $2 from Debian" >&2
	apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >&2
}
need mmdebstrap mmdebstrap
need zstd zstd

key=$(cat "$0" "$here"/systemd/* | sha256sum | cut -c1-12)
rootfs=fleet-role-test/bookworm-rootfs:$key
image=fleet-role-test/systemd:$key
tarball=$cache/systemd-$key.tar.zst

if docker image inspect "$image" >/dev/null 2>&1; then
	echo "$image"
	exit 0
fi
if [ -f "$tarball" ]; then
	echo "build-images: loading $tarball" >&2
	zstd -dc "$tarball" | docker load >&2
	echo "$image"
	exit 0
fi

if ! docker image inspect "$rootfs" >/dev/null 2>&1; then
	echo "build-images: building a bookworm rootfs with mmdebstrap (a few minutes)" >&2
	mmdebstrap --variant=minbase --include="$packages" \
		--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/usr/share/doc/* "$1"/usr/share/man/*' \
		bookworm - "$mirror" | docker import - "$rootfs" >&2
fi
echo "build-images: building $image" >&2
docker build -q --build-arg ROOTFS="$rootfs" -t "$image" "$here/systemd" >&2
docker tag "$image" fleet-role-test/systemd:latest
docker save "$image" | zstd -q -T0 -o "$tarball.tmp" && mv "$tarball.tmp" "$tarball"
echo "$image"
