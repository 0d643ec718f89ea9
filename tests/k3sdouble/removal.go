package main

import (
	"sync/atomic"

	"go.uber.org/zap/zapcore"
)

// errRemovedText is what etcd says to a member its peers removed
// (go.etcd.io/etcd/server/v3/etcdserver/api/rafthttp, errMemberRemoved;
// k3s's fork exports it as rafthttp.ErrMemberRemoved), and also, word for
// word but another error, what a member says when it applies its own
// removal (etcdserver, applyEntries: stopWithDelay).
const errRemovedText = "the member has been permanently removed from the cluster"

// removalCore reads the embedded etcd's log for how its member learnt it
// was removed, and writes nothing. etcd 3.7 keeps its critical errors on
// an unexported channel that its own run loop reads ("server error"), so
// the log is where the double sees them.
//
// k3s writes its tombstone only on rafthttp's error: a peer answering a
// member it removed while that member was away (k3s: StartETCD in
// pkg/executor/embed/etcd, errors.Is(err, rafthttp.ErrMemberRemoved)). A
// member that applies its own removal stops with the other error and no
// tombstone: etcd logs "removed member" with its own ID first.
type removalCore struct {
	fields []zapcore.Field
	// self: this member applied its own removal; peer: a peer told it.
	self, peer *atomic.Bool
}

func newRemovalCore() *removalCore {
	return &removalCore{self: new(atomic.Bool), peer: new(atomic.Bool)}
}

func (c *removalCore) Enabled(l zapcore.Level) bool { return l >= zapcore.InfoLevel }

func (c *removalCore) With(fields []zapcore.Field) zapcore.Core {
	return &removalCore{fields: append(append([]zapcore.Field(nil), c.fields...), fields...), self: c.self, peer: c.peer}
}

func (c *removalCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Message == "removed member" || e.Message == "server error" {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *removalCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	all := append(append([]zapcore.Field(nil), c.fields...), fields...)
	str := func(key string) string {
		for _, f := range all {
			if f.Key == key {
				if f.Type == zapcore.StringType {
					return f.String
				}
				if err, ok := f.Interface.(error); ok {
					return err.Error()
				}
			}
		}
		return ""
	}
	switch e.Message {
	case "removed member":
		if id := str("removed-remote-peer-id"); id != "" && id == str("local-member-id") {
			c.self.Store(true)
		}
	case "server error":
		if str("error") == errRemovedText && !c.self.Load() {
			c.peer.Store(true)
		}
	}
	return nil
}

func (c *removalCore) Sync() error { return nil }
