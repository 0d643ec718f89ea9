package apiservers

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/ptr"
)

// listener is a server that accepts connections, or one closed.
func listener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l
}

// closedAddress is an address where nothing listens.
func closedAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestTheServersAreThoseKeptThenTheSeedLessThisHostsOwn(t *testing.T) {
	file := filepath.Join(t.TempDir(), "api-servers.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"servers": ["10.0.0.3:6443", "10.0.0.9:6443"]}`), 0o600))
	s := New(file, []string{"10.0.0.1:6443", "10.0.0.2:6443", "10.0.0.3:6443"}, []string{"10.0.0.2"}, nil)
	assert.Equal(t, []string{"10.0.0.3:6443", "10.0.0.9:6443", "10.0.0.1:6443"}, s.List(),
		"those kept first, in their order; the seed's others after; the host's own never")

	require.NoError(t, os.WriteFile(file, []byte(`garbage`), 0o600))
	s = New(file, []string{"10.0.0.1:6443"}, nil, nil)
	assert.Equal(t, []string{"10.0.0.1:6443"}, s.List(), "a file that cannot be read is taken as empty")
}

func TestADialFailsOverToTheNextServerAndKeepsTheOneThatAnswered(t *testing.T) {
	live := listener(t).Addr().String()
	dead := closedAddress(t)
	file := filepath.Join(t.TempDir(), "api-servers.json")
	s := New(file, []string{dead, live}, nil, nil)
	c, err := s.DialContext(context.Background(), "tcp", "ignored:6443")
	require.NoError(t, err)
	c.Close()
	assert.Equal(t, live, c.RemoteAddr().String(), "the dead server passed over")
	assert.Equal(t, []string{live, dead}, s.List(), "the server that answered is dialled first from now on")
	assert.Equal(t, []string{live, dead}, New(file, nil, nil, nil).List(), "and kept across a restart")

	s = New("", []string{dead, closedAddress(t)}, nil, nil)
	_, err = s.DialContext(context.Background(), "tcp", "ignored:6443")
	assert.ErrorIs(t, err, ErrNoServer)
}

func TestTheEndpointSliceSetsTheServersKeepingTheOrderOfThoseKnown(t *testing.T) {
	s := New("", []string{"10.0.0.2:6443", "10.0.0.1:6443", "10.0.0.3:6443"}, []string{"10.0.0.5"}, nil)
	s.Set([]string{"10.0.0.1:6443", "10.0.0.4:6443", "10.0.0.2:6443", "10.0.0.5:6443"})
	assert.Equal(t, []string{"10.0.0.2:6443", "10.0.0.1:6443", "10.0.0.4:6443"}, s.List(),
		"known ones keep their place, a new one comes last, one gone is dropped, the host's own never")
	s.Set(nil)
	assert.Equal(t, []string{"10.0.0.2:6443", "10.0.0.1:6443", "10.0.0.4:6443"}, s.List(), "an empty slice changes nothing")
}

func TestAddressesAreTheReadyEndpointsAtTheHTTPSPort(t *testing.T) {
	got := Addresses([]discoveryv1.EndpointSlice{{
		Ports: []discoveryv1.EndpointPort{{Name: ptr.To("https"), Port: ptr.To[int32](6443)}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.0.0.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{Addresses: []string{"10.0.0.2"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
			{Addresses: []string{"fd00::3"}},
		},
	}})
	assert.Equal(t, []string{"10.0.0.1:6443", "[fd00::3]:6443"}, got)
}
