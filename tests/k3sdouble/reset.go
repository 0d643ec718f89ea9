package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"
)

// resetFlagFile is server/db/reset-flag, which a cluster reset leaves and
// a normal start removes. k3s: pkg/etcd/etcd.go, ResetFile.
func resetFlagFile(dataDir string) string {
	return filepath.Join(dataDir, "server", "db", "reset-flag")
}

// resetMessage is what k3s logs once the member of one runs; it then
// exits 0.
const resetMessage = "Managed etcd cluster membership has been reset, restart without --cluster-reset flag now. " +
	"Backup and delete ${datadir}/server/db on each peer etcd server and rejoin the nodes"

// resetCluster is `k3s server --cluster-reset`, with or without
// --cluster-reset-restore-path. It returns nil once the member, alone in
// its cluster, runs, as k3s exits 0 then; the member is stopped.
//
// k3s-io/k3s, pkg/cli/server/server.go, run: refused while a server URL
// is set. pkg/cluster/managed.go, (*Cluster).start: with a restore
// path, reset whatever; without one, refuse when server/db/reset-flag is
// there. pkg/etcd/etcd.go: (*ETCD).Register first reads or makes the
// member's name (setName(false)), which makes server/db/etcd; (*ETCD).Reset
// refuses a restore path that does not exist or is a directory, and
// calls (*ETCD).Restore, which moves server/db/etcd aside to
// server/db/etcd-old-<unix> and restores the snapshot with etcdutl's
// snapshot.Restore (the sha256 etcd appends is checked) under the
// member's name, its peer URL and an initial cluster of itself alone, the
// WAL in member/wal; Reset then makes a new name (setName(true)), writes
// reset-flag, and starts etcd by newCluster(ctx, true): state "new" and
// ForceNewCluster. Its watcher logs resetMessage once the member list
// holds this member alone, and exits.
func resetCluster(ctx context.Context, o options, cfg config, log *slog.Logger) error {
	// k3s: pkg/cli/server/server.go, run: a reset is refused while a
	// server URL is set (config.yaml, a drop-in, --server or K3S_URL).
	if cfg.Server != "" {
		return errors.New("cannot perform cluster-reset while server URL is set - remove server from configuration before resetting")
	}
	flag := resetFlagFile(o.dataDir)
	if _, err := os.Stat(flag); err == nil && cfg.ClusterResetRestorePath == "" {
		//lint:ignore ST1005 k3s's own words
		return fmt.Errorf("Managed etcd cluster membership was previously reset, please remove the cluster-reset flag and start k3s normally. "+
			"If you need to perform another cluster reset, you must first manually delete the file at %s", flag)
	}
	s := &server{o: o, cfg: cfg, log: log, dir: filepath.Join(o.dataDir, "server", "db", "etcd"), learners: map[uint64]progress{}}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return err
	}
	if err := s.setName(); err != nil {
		return err
	}
	if path := cfg.ClusterResetRestorePath; path != "" {
		fi, err := os.Stat(path)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return fmt.Errorf("etcd: snapshot path does not exist: %s", path)
		case err != nil:
			return err
		case fi.IsDir():
			return fmt.Errorf("etcd: snapshot path must be a file, not a directory: %s", path)
		}
		old := fmt.Sprintf("%s-old-%d", s.dir, time.Now().Unix())
		if err := os.Rename(s.dir, old); err != nil {
			return err
		}
		log.Info("Pre-restore etcd database moved to " + old)
		err = snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
			SnapshotPath:   path,
			Name:           s.name,
			OutputDataDir:  s.dir,
			OutputWALDir:   filepath.Join(s.dir, "member", "wal"),
			PeerURLs:       []string{peerURL(o.nodeIP)},
			InitialCluster: s.name + "=" + peerURL(o.nodeIP),
		})
		if err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(s.dir, "name")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := s.setName(); err != nil {
		return err
	}
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		return err
	}
	if err := s.startEtcd(s.name+"="+peerURL(o.nodeIP), "new", true); err != nil {
		return err
	}
	defer s.close()
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		list, err := s.cli.MemberList(cctx)
		cancel()
		if err == nil && len(list.Members) == 1 && list.Members[0].Name == s.name {
			log.Info(resetMessage)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
