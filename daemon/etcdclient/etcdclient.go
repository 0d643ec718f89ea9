// Package etcdclient is the agent's narrow wrapper over etcd's client: the
// member list, the local member's status, moving leadership away, removing
// another host's member, and a snapshot streamed to a file and verified. Every call carries its own
// timeout, so that no caller waits on an etcd that does not answer.
package etcdclient

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Config is how to reach the local member.
type Config struct {
	Endpoint string
	CAFile   string
	CertFile string
	KeyFile  string
	// Timeout bounds each call; SnapshotTimeout a snapshot.
	Timeout         time.Duration
	SnapshotTimeout time.Duration
}

// reconnectMaxDelay is the longest wait between two attempts to reach the
// local member again.
const reconnectMaxDelay = 2 * time.Second

// Member is one member of the cluster.
type Member struct {
	ID         uint64
	Name       string
	Learner    bool
	ClientURLs []string
	PeerURLs   []string
}

// Status is the local member's view.
type Status struct {
	MemberID  uint64
	Leader    uint64
	RaftIndex uint64
	RaftTerm  uint64
	DBSize    int64
	// DBSizeInUse is the part of DBSize in use; the rest is freed pages a
	// defragmentation gives back.
	DBSizeInUse int64
	Learner     bool
	// Errors are the member's alarms and errors, as etcd reports them.
	Errors []string
}

// Snapshot is a snapshot saved and verified.
type Snapshot struct {
	Path   string
	Size   int64
	SHA256 string
}

// ErrNoTransferee: no other started voter to hand leadership to.
var ErrNoTransferee = errors.New("no other started voter to move leadership to")

// ErrOwnMember: a host never removes its own member.
var ErrOwnMember = errors.New("the member is this host's own")

// ErrNoQuorum: removing the voter would leave fewer voters that answer
// than a quorum of the voters left.
var ErrNoQuorum = errors.New("the voters left that answer would not be a quorum")

// ErrAmbiguous: the name given matches more than one member, or the ID
// given names a member of another name.
var ErrAmbiguous = errors.New("the member named is not one member")

// ErrCorruptSnapshot: the snapshot's appended checksum does not match.
var ErrCorruptSnapshot = errors.New("snapshot checksum mismatch")

// Client talks to the local member. It connects on first use, and tries
// again on the next use when that fails: a host that is no server has no
// etcd, nor its certificates, until it is promoted.
type Client struct {
	cfg Config
	mu  sync.Mutex
	c   *clientv3.Client
	// peers are clients of the other members, by client URL (Unanswering).
	peers map[string]*clientv3.Client
	// http reads the member's /metrics (Latencies).
	http *http.Client
}

// New returns a client of the local member; it connects on first use.
func New(cfg Config) (*Client, error) {
	if cfg.Endpoint == "" {
		return nil, errors.New("etcd client: no endpoint")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.SnapshotTimeout <= 0 {
		cfg.SnapshotTimeout = 5 * time.Minute
	}
	return &Client{cfg: cfg}, nil
}

// client returns the connected client, making it if need be.
func (c *Client) client() (*clientv3.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.c != nil {
		return c.c, nil
	}
	cl, err := c.dial([]string{c.cfg.Endpoint})
	if err != nil {
		return nil, err
	}
	c.c = cl
	return cl, nil
}

// dial makes a client of the endpoints, with the local member's
// certificates (k3s's etcd client certificate is the cluster's, good on
// every member).
func (c *Client) dial(endpoints []string) (*clientv3.Client, error) {
	cc := clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: c.cfg.Timeout,
		Logger:      zap.NewNop(),
		// Note: the local member is down for as long as the host is a
		// standby, and back when it is promoted again; gRPC's default
		// reconnect backoff would have grown to two minutes by then, and
		// every call meanwhile would wait out its timeout.
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: backoff.DefaultConfig.Multiplier, Jitter: backoff.DefaultConfig.Jitter, MaxDelay: reconnectMaxDelay},
			MinConnectTimeout: c.cfg.Timeout,
		})},
	}
	if strings.HasPrefix(endpoints[0], "https://") {
		tlsInfo := transport.TLSInfo{CertFile: c.cfg.CertFile, KeyFile: c.cfg.KeyFile, TrustedCAFile: c.cfg.CAFile}
		tc, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
		cc.TLS = tc
	}
	cl, err := clientv3.New(cc)
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return cl, nil
}

// Close closes the client.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for url, cl := range c.peers {
		_ = cl.Close()
		delete(c.peers, url)
	}
	if c.http != nil {
		c.http.CloseIdleConnections()
		c.http = nil
	}
	if c.c == nil {
		return nil
	}
	err := c.c.Close()
	c.c = nil
	return err
}

// Members lists the cluster's members, as the local member knows them.
func (c *Client) Members(ctx context.Context) ([]Member, error) {
	cl, err := c.client()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	return memberList(ctx, cl)
}

func memberList(ctx context.Context, cl *clientv3.Client) ([]Member, error) {
	resp, err := cl.MemberList(ctx)
	if err != nil {
		return nil, fmt.Errorf("etcd member list: %w", err)
	}
	out := make([]Member, 0, len(resp.Members))
	for _, m := range resp.Members {
		out = append(out, Member{ID: m.ID, Name: m.Name, Learner: m.IsLearner, ClientURLs: m.ClientURLs, PeerURLs: m.PeerURLs})
	}
	return out, nil
}

// MembersOf lists the cluster's members as other members know them,
// through their client URLs (the endpoints), with a linearizable request
// (etcd's MemberList is one unless asked serializable): the cluster's own
// answer, not one member's view. For a host whose own member does not
// answer. The client lasts for the call.
func (c *Client) MembersOf(ctx context.Context, endpoints []string) ([]Member, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("etcd member list: no other member to ask")
	}
	cl, err := c.dial(endpoints)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	return memberList(ctx, cl)
}

// Status reads the local member's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	cl, err := c.client()
	if err != nil {
		return Status{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	resp, err := cl.Status(ctx, c.cfg.Endpoint)
	if err != nil {
		return Status{}, fmt.Errorf("etcd status: %w", err)
	}
	return Status{MemberID: resp.Header.MemberId, Leader: resp.Leader, RaftIndex: resp.RaftIndex, RaftTerm: resp.RaftTerm,
		DBSize: resp.DbSize, DBSizeInUse: resp.DbSizeInUse, Learner: resp.IsLearner, Errors: resp.Errors}, nil
}

// Read times a linearizable read through the local member: the latency
// a client of the cluster sees, quorum included.
func (c *Client) Read(ctx context.Context) (time.Duration, error) {
	cl, err := c.client()
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	start := time.Now()
	if _, err := cl.Get(ctx, "fleet-role-probe"); err != nil {
		return 0, fmt.Errorf("etcd linearizable read: %w", err)
	}
	return time.Since(start), nil
}

// MoveLeaderAway hands leadership to a healthy voter if the local member
// leads: the member of the preferred node (the swap's candidate) if it is
// a started voter that answers, else the first other that does. It
// returns the new leader's name, or "" when the local member did not lead.
func (c *Client) MoveLeaderAway(ctx context.Context, preferNode string) (string, error) {
	st, err := c.Status(ctx)
	if err != nil {
		return "", err
	}
	if st.Leader != st.MemberID {
		return "", nil
	}
	members, err := c.Members(ctx)
	if err != nil {
		return "", err
	}
	var candidates []Member
	for _, m := range members {
		if m.ID == st.MemberID || m.Learner || m.Name == "" || len(m.ClientURLs) == 0 {
			continue // the local member, a learner, or one not started
		}
		if preferNode != "" && NodeOf(m.Name) == preferNode {
			candidates = append([]Member{m}, candidates...)
		} else {
			candidates = append(candidates, m)
		}
	}
	cl, err := c.client()
	if err != nil {
		return "", err
	}
	for _, m := range candidates {
		if !answers(ctx, cl, m, c.cfg.Timeout) {
			continue
		}
		mctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		_, err := cl.MoveLeader(mctx, m.ID)
		cancel()
		if err != nil {
			return "", fmt.Errorf("etcd move leader to %s: %w", m.Name, err)
		}
		return m.Name, nil
	}
	return "", ErrNoTransferee
}

// RemoveMember removes another host's member from the cluster through the
// local member: the member with the ID (hex, as etcdctl prints it), which
// must then carry the name if one is given, or else the one member of the
// name. It is idempotent: a member no longer listed, or one etcd says it
// does not know after a try, counts as removed (removed is then false). It
// never removes the local member, and removes a voter only when a quorum
// of the voters left answer (a learner votes on nothing). Note: etcd
// itself refuses a removal that would leave too few started members
// (--strict-reconfig-check, on by default); this check comes first so the
// refusal says why.
func (c *Client) RemoveMember(ctx context.Context, name string, id uint64) (removed bool, err error) {
	if name == "" && id == 0 {
		return false, errors.New("etcd member remove: no member named")
	}
	st, err := c.Status(ctx)
	if err != nil {
		return false, err
	}
	members, err := c.Members(ctx)
	if err != nil {
		return false, err
	}
	target, err := pick(members, name, id)
	if err != nil || target == nil {
		return false, err
	}
	if target.ID == st.MemberID {
		return false, fmt.Errorf("etcd member remove %s: %w", target.Name, ErrOwnMember)
	}
	cl, err := c.client()
	if err != nil {
		return false, err
	}
	if !target.Learner {
		voters, up := 0, 0
		for _, m := range members {
			if m.ID == target.ID || m.Learner {
				continue
			}
			voters++
			if m.ID == st.MemberID || len(m.ClientURLs) > 0 && answers(ctx, cl, m, c.cfg.Timeout) {
				up++
			}
		}
		if q := voters/2 + 1; up < q {
			return false, fmt.Errorf("etcd member remove %s: %d of %d voters left answer, %d needed: %w", target.Name, up, voters, q, ErrNoQuorum)
		}
	}
	tried := false
	for attempt := 0; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
		_, err = cl.MemberRemove(rctx, target.ID)
		cancel()
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, rpctypes.ErrMemberNotFound):
			// Gone: removed by someone else, or by a try whose answer
			// was lost.
			return tried, nil
		case attempt == 2 || ctx.Err() != nil || errors.Is(err, rpctypes.ErrMemberNotEnoughStarted):
			return false, fmt.Errorf("etcd member remove %s (%x): %w", target.Name, target.ID, err)
		}
		tried = true
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// pick finds the member by ID (checking its name) or by name; nil when it
// is not listed.
func pick(members []Member, name string, id uint64) (*Member, error) {
	var found *Member
	for i := range members {
		m := &members[i]
		switch {
		case id != 0 && m.ID == id:
			if name != "" && m.Name != "" && m.Name != name {
				return nil, fmt.Errorf("etcd member remove: member %x is named %q, not %q: %w", id, m.Name, name, ErrAmbiguous)
			}
			return m, nil
		case id == 0 && m.Name == name:
			if found != nil {
				return nil, fmt.Errorf("etcd member remove: more than one member is named %q: %w", name, ErrAmbiguous)
			}
			found = m
		}
	}
	return found, nil
}

// Unanswering names the members of the list, but the local one and those
// not started (no name or no client URL), that do not answer a status
// request on their client URL within the client's timeout, asked side by
// side: the members the local one cannot reach as a client would. Sorted.
// Each member is asked over a connection of its own kept from one call to
// the next (etcd's Maintenance.Status dials anew each time, a TLS
// handshake per member per probe); those of members no longer listed are
// closed.
func (c *Client) Unanswering(ctx context.Context, members []Member, local uint64) ([]string, error) {
	asked := map[string]Member{}
	for _, m := range members {
		if m.ID != local && m.Name != "" && len(m.ClientURLs) > 0 {
			asked[m.ClientURLs[0]] = m
		}
	}
	peers, err := c.peersFor(asked)
	if err != nil {
		return nil, err
	}
	var mu sync.Mutex
	var out []string
	var wg sync.WaitGroup
	for url, m := range asked {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
			defer cancel()
			if _, err := pb.NewMaintenanceClient(peers[url].ActiveConnection()).Status(ctx, &pb.StatusRequest{}); err != nil {
				mu.Lock()
				out = append(out, m.Name)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(out)
	return out, nil
}

// peersFor returns a client of each URL, dialled once and kept; the
// clients of URLs no longer asked are closed.
func (c *Client) peersFor(asked map[string]Member) (map[string]*clientv3.Client, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.peers == nil {
		c.peers = map[string]*clientv3.Client{}
	}
	for url, cl := range c.peers {
		if _, ok := asked[url]; !ok {
			_ = cl.Close()
			delete(c.peers, url)
		}
	}
	for url := range asked {
		if c.peers[url] != nil {
			continue
		}
		cl, err := c.dial([]string{url})
		if err != nil {
			return nil, err
		}
		c.peers[url] = cl
	}
	return maps.Clone(c.peers), nil
}

// answers says a member answers a status request on its client URL.
func answers(ctx context.Context, cl *clientv3.Client, m Member, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := cl.Status(ctx, m.ClientURLs[0])
	return err == nil
}

// NodeOf is the node of a k3s member name, "<node>-<8 hex>".
func NodeOf(member string) string {
	i := strings.LastIndexByte(member, '-')
	if i <= 0 || len(member)-i-1 != 8 {
		return member
	}
	if _, err := hex.DecodeString(member[i+1:]); err != nil {
		return member
	}
	return member[:i]
}

// Save streams a snapshot of the local member into dir/name, verifies the
// checksum etcd appends to it, syncs it, and returns its size and sha256.
// Nothing is left under the name unless the snapshot is whole: it is
// written to dir/name.part (as etcd's own snapshot.Save, which k3s uses,
// does), synced, renamed, and the directory synced; a failed snapshot
// removes its partial file.
func (c *Client) Save(ctx context.Context, dir, name string) (Snapshot, error) {
	cl, err := c.client()
	if err != nil {
		return Snapshot{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.SnapshotTimeout)
	defer cancel()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Snapshot{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	path := filepath.Join(dir, name)
	part := path + ".part"
	defer os.Remove(part)
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return Snapshot{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	defer f.Close()
	rc, err := cl.Snapshot(ctx)
	if err != nil {
		return Snapshot{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	defer rc.Close()
	whole := sha256.New()
	v := &verifier{h: sha256.New()}
	size, err := io.Copy(io.MultiWriter(f, whole, v), rc)
	if err != nil {
		return Snapshot{}, fmt.Errorf("etcd snapshot: stream: %w", err)
	}
	if !v.ok() {
		return Snapshot{}, fmt.Errorf("etcd snapshot of %d bytes: %w", size, ErrCorruptSnapshot)
	}
	if err := f.Sync(); err != nil {
		return Snapshot{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	if err := f.Close(); err != nil {
		return Snapshot{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	if err := os.Rename(part, path); err != nil {
		return Snapshot{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return Snapshot{}, fmt.Errorf("etcd snapshot: %w", err)
	}
	return Snapshot{Path: path, Size: size, SHA256: hex.EncodeToString(whole.Sum(nil))}, nil
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// verifier checks the sha256 etcd appends to a snapshot: the hash of all
// bytes but the last 32, which are the hash.
type verifier struct {
	h interface {
		io.Writer
		Sum([]byte) []byte
	}
	tail []byte
}

func (v *verifier) Write(p []byte) (int, error) {
	buf := append(v.tail, p...)
	if keep := len(buf) - sha256.Size; keep > 0 {
		v.h.Write(buf[:keep])
		buf = buf[keep:]
	}
	v.tail = append([]byte(nil), buf...)
	return len(p), nil
}

func (v *verifier) ok() bool {
	return len(v.tail) == sha256.Size && bytes.Equal(v.h.Sum(nil), v.tail)
}
