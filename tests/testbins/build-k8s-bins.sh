#!/usr/bin/env bash
# build-k8s-bins.sh builds the real kube-apiserver and etcd that the controller's
# integration tests run against, from the Go module proxy alone, into a cache
# directory outside the repository. A stamp keyed by the versions and the Go
# version makes a second run return at once.
#
# Usage: build-k8s-bins.sh [OUT_DIR]
#   OUT_DIR defaults to $FLEET_ROLE_TEST_BINS, else
#   ${XDG_CACHE_HOME:-$HOME/.cache}/fleet-role/k8s-bins/<k8s version>.
# Prints OUT_DIR on its last line.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
ETCD_VERSION=${ETCD_VERSION:-v3.7.0}
STAGING_VERSION=v0.${K8S_VERSION#v1.}

out=${1:-${FLEET_ROLE_TEST_BINS:-${XDG_CACHE_HOME:-$HOME/.cache}/fleet-role/k8s-bins/$K8S_VERSION}}
mkdir -p "$out"
out=$(cd "$out" && pwd)

stamp="k8s=$K8S_VERSION etcd=$ETCD_VERSION go=$(go env GOVERSION) cgo=$(go env CGO_ENABLED)"
if [ -f "$out/.stamp" ] && [ "$(cat "$out/.stamp")" = "$stamp" ] &&
	[ -x "$out/kube-apiserver" ] && [ -x "$out/etcd" ]; then
	echo "$out"
	exit 0
fi

work="$out/.module"
rm -rf "$work"
mkdir -p "$work"
cd "$work"

echo "build-k8s-bins: resolving k8s.io/kubernetes@$K8S_VERSION" >&2
kdir=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -n "$kdir" ] || { echo "build-k8s-bins: cannot download k8s.io/kubernetes@$K8S_VERSION" >&2; exit 1; }

{
	echo "module fleet-role-k8s-test-bins"
	echo
	echo "go $(go env GOVERSION | sed 's/^go//')"
	echo
	echo "require k8s.io/kubernetes $K8S_VERSION"
	echo
	echo "replace ("
	# The staging modules kubernetes requires at v0.0.0 and replaces with
	# directories that are not in its module zip: point them at the proxy.
	awk '/^require \(/,/^\)/' "$kdir/go.mod" | awk -v v="$STAGING_VERSION" '$2=="v0.0.0"{print "\t" $1 " => " $1 " " v}'
	echo ")"
} >go.mod

go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$K8S_VERSION" >&2
go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2

ld="-s -w"
minor=${K8S_VERSION#v1.}
minor=${minor%%.*}
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ld="$ld -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done

echo "build-k8s-bins: building kube-apiserver (a cold build takes 10-25 minutes)" >&2
go build -trimpath -ldflags="$ld" -o "$out/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
echo "build-k8s-bins: building etcd" >&2
go build -trimpath -ldflags="-s -w" -o "$out/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$out/kube-apiserver.tmp" "$out/kube-apiserver"
mv "$out/etcd.tmp" "$out/etcd"
echo "$stamp" >"$out/.stamp"
echo "$out"
