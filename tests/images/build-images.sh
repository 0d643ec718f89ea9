#!/usr/bin/env bash
# build-images.sh builds the container images the platform tests run,
# without any registry: a Debian bookworm rootfs from Debian's mirror
# (mmdebstrap, through `docker import`), a systemd host image on it, and
# a Docker host image on that (Debian's docker.io: a host with its own
# engine, for Docker-in-Docker). Images are tagged by a hash of their
# inputs (and :latest) and cached as zstd tarballs in a directory outside
# the repository, so a second run loads them in seconds or does nothing
# at all.
#
# Usage: build-images.sh
#   FLEET_ROLE_IMAGE_CACHE  cache directory
#                           (default ${XDG_CACHE_HOME:-$HOME/.cache}/fleet-role/images)
#   DEBIAN_MIRROR           default http://deb.debian.org/debian
# Prints the images' names, one a line.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${FLEET_ROLE_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet-role/images}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# rpm: the .rpm installed and upgraded as on an RPM host (tests/package_upgrade_test.go).
# python3-apt and sudo: Ansible's apt module and become, as on a Debian host
# Ansible manages (tests/e2e's fleet is deployed by the playbook).
# iptables and ipset: what a k3s release bundles (and the multi-call binary
# the real-k3s tier of tests/e2e runs does not) for kube-proxy, flannel and
# the network policy controller; without iptables kube-proxy stops k3s
# ("iptables is not available on this host").
packages=systemd,systemd-sysv,dbus,procps,iproute2,python3,rpm,python3-apt,sudo,iptables,ipset
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
systemd=fleet-role-test/systemd:$key
# The Docker host image is FROM the systemd image: its key covers the
# systemd image's.
dind=fleet-role-test/dind:$( (echo "$key" && cat "$here"/dind/*) | sha256sum | cut -c1-12)

# image IMAGE BUILD: IMAGE from the engine, else from the cache, else
# built by the function BUILD and cached; tagged :latest too (a tarball
# holds the keyed tag only).
image() {
	local image=$1 build=$2
	local tarball=$cache/$(basename "${image%%:*}")-${image##*:}.tar.zst
	if ! docker image inspect "$image" >/dev/null 2>&1; then
		if [ -f "$tarball" ]; then
			echo "build-images: loading $tarball" >&2
			zstd -dc "$tarball" | docker load >&2
		else
			"$build" "$image"
			docker save "$image" | zstd -q -T0 -o "$tarball.tmp" && mv "$tarball.tmp" "$tarball"
		fi
	fi
	docker tag "$image" "${image%%:*}:latest"
	echo "$image"
}

build_systemd() {
	if ! docker image inspect "$rootfs" >/dev/null 2>&1; then
		echo "build-images: building a bookworm rootfs with mmdebstrap (a few minutes)" >&2
		# Note: the rootfs is whole before it is imported: a mmdebstrap
		# stopped half-way into `docker import` left an empty image under
		# the rootfs's tag, which later runs took for the rootfs.
		local tar
		tar=$(mktemp "$cache/rootfs.XXXXXX.tar")
		mmdebstrap --variant=minbase --include="$packages" \
			--customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin "$1"/usr/share/doc/* "$1"/usr/share/man/*' \
			bookworm "$tar" "$mirror" >&2
		docker import "$tar" "$rootfs" >&2
		rm -f "$tar"
	fi
	echo "build-images: building $1" >&2
	docker build -q --build-arg ROOTFS="$rootfs" -t "$1" "$here/systemd" >&2
}

# Note: its apt-get runs on the machine's network (the rootfs's sources
# name $mirror), as mmdebstrap does, needing no bridge.
build_dind() {
	echo "build-images: building $1 (Debian's docker.io, about a minute)" >&2
	docker build -q --network host --build-arg SYSTEMD="$systemd" -t "$1" "$here/dind" >&2
}

image "$systemd" build_systemd
image "$dind" build_dind
