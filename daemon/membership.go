package daemon

import (
	"context"
	"net"
	"net/url"
	"slices"
	"time"

	"github.com/fleet-role/fleet-role/api"
	"github.com/fleet-role/fleet-role/api/logkey"
	"github.com/fleet-role/fleet-role/daemon/etcdclient"
	"github.com/fleet-role/fleet-role/role"
)

// membership is what the voters last said of this host's member.
type membership struct {
	member string
	at     time.Time
	// listed: they list it; unlisted: they do not, and listed it before.
	listed, unlisted bool
}

// unlisted says the voters no longer list this host's member, which the
// cluster listed before (role.Facts.Unlisted). It asks them only while
// the role file says server, the datastore names a member, there is no
// tombstone and the server does not run: a server that cannot start
// because its member is gone would otherwise be started again for ever
// (a member that cannot reach its peers never learns it was removed, and
// k3s writes no tombstone then). It asks at most once a probe period;
// an answer it cannot have says nothing.
func (a *Agent) unlisted(ctx context.Context, f role.Facts) bool {
	if f.Role != api.HostServer || !f.Datastore || f.Member == "" || f.Tombstone || f.Server.Active {
		return false
	}
	now := a.clock.Now()
	if m := a.asked; m.member == f.Member && now.Sub(m.at) < a.cfg.ProbePeriod {
		return m.unlisted
	}
	m := membership{member: f.Member, at: now}
	members, err := a.etcd.MembersOf(ctx, a.votersEndpoints())
	if err != nil {
		a.log.Warn("the voters' member list not read", logkey.Err, err)
		a.asked = m
		return false
	}
	m.listed = slices.ContainsFunc(members, func(e etcdclient.Member) bool {
		return e.Name == f.Member || slices.ContainsFunc(e.PeerURLs, a.ownPeerURL)
	})
	listedBefore := a.st.get().Listed == f.Member
	m.unlisted = !m.listed && listedBefore
	a.asked = m
	switch {
	case m.listed && !listedBefore:
		a.keepListed(f.Member)
	case m.unlisted:
		a.log.Warn("the voters no longer list this host's member", logkey.Member, f.Member)
	}
	return m.unlisted
}

// keepListed keeps the member as the one the cluster listed.
func (a *Agent) keepListed(member string) {
	if member == "" || a.st.get().Listed == member {
		return
	}
	if err := a.st.update(func(s *api.AgentState) { s.Listed = member }); err != nil {
		a.log.Warn("listed member not kept", logkey.Err, err)
	}
}

// votersEndpoints are the client URLs of the voters last seen (every
// other server of the inventory when none was seen), this host left out:
// the local member's endpoint, its host replaced by each one's address.
func (a *Agent) votersEndpoints() []string {
	u, err := url.Parse(a.cfg.Etcd.Endpoint)
	if err != nil {
		return nil
	}
	voters := a.st.get().Voters
	var out []string
	for _, s := range a.cfg.Servers {
		if s.Name == a.cfg.NodeName || len(voters) > 0 && !slices.Contains(voters, s.Name) {
			continue
		}
		port := u.Port()
		if port == "" {
			port = "2379"
		}
		e := *u
		e.Host = net.JoinHostPort(s.Address, port)
		out = append(out, e.String())
	}
	return out
}

// ownPeerURL says the peer URL is at this host's address: etcd lists a
// learner that has not started yet by its peer URLs alone, with no name.
func (a *Agent) ownPeerURL(peer string) bool {
	u, err := url.Parse(peer)
	if err != nil {
		return false
	}
	for _, s := range a.cfg.Servers {
		if s.Name == a.cfg.NodeName {
			return u.Hostname() == s.Address
		}
	}
	return false
}
