package testhost

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// K3sEnv names the real k3s binary the real-k3s tier runs: k3s's
// multi-call binary (its cmd/server, not a release's self-extracting
// wrapper), with the links k3s's build makes beside it (K3sLinks).
const K3sEnv = "FLEET_ROLE_K3S"

// K3sLinks are the names the multi-call binary answers to besides k3s,
// each a link to it in its directory: k3s's agent runs containerd by
// that name from PATH, and an operator runs kubectl, crictl and ctr.
var K3sLinks = []string{"containerd", "kubectl", "crictl", "ctr", "k3s-server", "k3s-agent"}

// CNIDir is where Debian's containernetworking-plugins puts the CNI
// plugins. A k3s release bundles its own; the multi-call binary does not,
// and k3s's agent (a server's too) stops at start without host-local on
// PATH.
const CNIDir = "/usr/lib/cni"

// K3sBinary is the k3s binary K3sEnv names, its links beside it and
// Debian's CNI plugins in CNIDir; a missing one is Unavailable.
func K3sBinary(t T) string {
	t.Helper()
	bin := os.Getenv(K3sEnv)
	if bin == "" {
		Unavailable(t, "%s names no k3s binary: set it to one (k3s's cmd/server, v1.36 or later), as .ci/setup does from FLEET_ROLE_K3S_XZ", K3sEnv)
	}
	if err := k3sInstalled(bin); err != nil {
		Unavailable(t, "%s=%s: %v", K3sEnv, bin, err)
	}
	if _, err := os.Stat(filepath.Join(CNIDir, "host-local")); err != nil {
		Unavailable(t, "no CNI plugins in %s, which k3s's multi-call binary needs: apt-get install containernetworking-plugins (.ci/setup does)", CNIDir)
	}
	return bin
}

// k3sInstalled says what is missing of a k3s binary and its links,
// which must be relative (as k3s's build makes them) to resolve in a
// host that mounts their directory elsewhere.
func k3sInstalled(bin string) error {
	st, err := os.Stat(bin)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("not an executable file")
	}
	var missing []string
	for _, l := range K3sLinks {
		if target, err := os.Readlink(filepath.Join(filepath.Dir(bin), l)); err != nil || target != filepath.Base(bin) {
			missing = append(missing, l)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("no link %s -> %s beside it (the multi-call binary picks its part by its name)", strings.Join(missing, ", "), filepath.Base(bin))
	}
	return nil
}

// StartK3sHostIn starts a systemd host, as StartSystemdHostIn does, that
// can run the real k3s binary bin (its kubelet among it), and waits for
// it to be running; extra are more docker run flags (--network NAME --ip
// ADDR, volumes). Beyond a systemd host it has:
//   - the binary's directory (bin and its links) read-only at dir, and
//     the CNI plugins read-only at CNIDir;
//   - the kernel's log, /dev/kmsg, to read: the kubelet's OOM watcher
//     reads it, and without it the kubelet fails to start ("failed to
//     create kubelet: open /dev/kmsg: no such file or directory");
//   - a cgroup namespace of its own, the machine's cgroup hierarchies
//     mounted in it before systemd starts (k3sInit): its own cgroup is
//     their root, so the kubelet finds the kubepods.slice its systemd
//     makes where it looks for it. In the machine's cgroup namespace
//     (a systemd host's), systemd makes it under the host's cgroup while
//     the kubelet looks at the hierarchies' root and fails to start
//     ("cgroup [\"kubepods\"] has some missing paths:
//     /sys/fs/cgroup/systemd/kubepods.slice"), having made the slice's
//     directories at the machine's root.
//
// Its privileges are a systemd host's (every capability the machine
// allows, seccomp and AppArmor unconfined), which k3s's kubelet and
// containerd need too.
func StartK3sHostIn(t T, dir, bin, binDir string, extra ...string) *SystemdHost {
	t.Helper()
	RequireImage(t, SystemdImage)
	flags := append(privileges(), "--cgroupns=private", "--tmpfs", "/run", "--tmpfs", "/run/lock",
		"-v", filepath.Dir(bin)+":"+binDir+":ro", "-v", CNIDir+":"+CNIDir+":ro", "--device", "/dev/kmsg:/dev/kmsg:r")
	return startSystemdWith(t, SystemdImage, dir, flags, []string{"/bin/sh", "-c", k3sInit}, extra...)
}

// k3sInit mounts, over the engine's cgroup mounts (read-only in a
// container's own cgroup namespace: systemd, finding them, fails "Failed
// to create /init.scope control group"), a tmpfs and on it each of the
// machine's cgroup v1 hierarchies (those /proc/cgroups says are bound,
// their controllers together as the machine binds them, with a link by
// each controller's name where they are), systemd's named one and the
// cgroup2 one, read-write and rooted at the container's own cgroup; then
// it runs systemd as PID 1, which keeps them. Note: systemd, left to
// mount them itself, mounts cpu and cpuacct only as one hierarchy
// (cpu,cpuacct), and the machine binds them apart: neither would be
// mounted.
const k3sInit = `set -eu
mount -t tmpfs -o mode=755,nosuid,nodev,noexec tmpfs /sys/fs/cgroup
for c in $(awk 'NR > 1 && $4 == 1 && $2 != 0 {h[$2] = h[$2] ? h[$2] "," $1 : $1} END {for (i in h) print h[i]}' /proc/cgroups); do
	mkdir /sys/fs/cgroup/$c
	mount -t cgroup -o nosuid,nodev,noexec,$c cgroup /sys/fs/cgroup/$c
	case $c in *,*) for s in $(echo $c | tr , ' '); do ln -s $c /sys/fs/cgroup/$s; done ;; esac
done
mkdir /sys/fs/cgroup/systemd
mount -t cgroup -o nosuid,nodev,noexec,none,name=systemd cgroup /sys/fs/cgroup/systemd
if grep -qw cgroup2 /proc/filesystems; then
	mkdir /sys/fs/cgroup/unified
	mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup/unified
fi
exec /sbin/init
`
