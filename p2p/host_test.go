package p2p_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	ma "github.com/multiformats/go-multiaddr"

	"spindle.dev"
	"spindle.dev/p2p"
)

func newHost(t testing.TB, cfg p2p.Config) host.Host {
	t.Helper()
	h, err := p2p.NewHost(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func TestIdentity(t *testing.T) {
	name := filepath.Join(t.TempDir(), "home", p2p.IdentityFile)
	k1, err := p2p.LoadOrCreateIdentity(name)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("identity file mode %v, want 0600", fi.Mode().Perm())
	}
	k2, err := p2p.LoadOrCreateIdentity(name)
	if err != nil {
		t.Fatal(err)
	}
	if !k1.Equals(k2) {
		t.Fatal("second load returned another key")
	}
	ents, _ := os.ReadDir(filepath.Dir(name))
	if len(ents) != 1 {
		t.Errorf("home holds %d files after creating the identity, want 1", len(ents))
	}
	if err := os.WriteFile(name, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := p2p.LoadOrCreateIdentity(name); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("load of a corrupt identity: %v, want Invalid", err)
	}
	if data, _ := os.ReadFile(name); string(data) != "garbage" {
		t.Fatal("a corrupt identity file was replaced")
	}
}

func TestHostHomeKeepsIdentity(t *testing.T) {
	home := t.TempDir()
	h1 := newHost(t, p2p.Config{Home: home})
	id := h1.ID()
	h1.Close()
	h2 := newHost(t, p2p.Config{Home: home})
	if h2.ID() != id {
		t.Fatalf("host on the same home has ID %s, want %s", h2.ID(), id)
	}
}

func TestAddrsAndConnect(t *testing.T) {
	a := newHost(t, p2p.Config{})
	b := newHost(t, p2p.Config{})
	addrs := p2p.Addrs(a)
	var tcp, quic bool
	for _, ad := range addrs {
		if !strings.HasSuffix(string(ad), "/p2p/"+a.ID().String()) {
			t.Errorf("address %s does not end in /p2p/<id>", ad)
		}
		tcp = tcp || strings.Contains(string(ad), "/tcp/")
		quic = quic || strings.Contains(string(ad), "/quic-v1/")
	}
	if !tcp || !quic {
		t.Fatalf("addresses %v lack TCP or QUIC", addrs)
	}
	for _, ad := range addrs {
		id, err := p2p.Connect(context.Background(), b, ad)
		if err != nil {
			t.Fatalf("Connect(%s): %v", ad, err)
		}
		if id != a.ID() {
			t.Fatalf("Connect returned %s, want %s", id, a.ID())
		}
	}
	// A bare peer ID works once the addresses are known.
	if _, err := p2p.Connect(context.Background(), b, p2p.PeerAddrOf(a.ID())); err != nil {
		t.Fatalf("Connect by bare ID: %v", err)
	}
}

func TestBadAddrs(t *testing.T) {
	for _, a := range []spindle.PeerAddr{"", "/ip4/127.0.0.1/tcp/1", "nonsense", "/ip4/1.2.3.4/tcp/1/p2p/notanid"} {
		if _, err := p2p.ParsePeerAddr(a); !errors.Is(err, spindle.Invalid) {
			t.Errorf("ParsePeerAddr(%q): %v, want Invalid", a, err)
		}
	}
	if _, err := p2p.NewHost(context.Background(), p2p.Config{ListenAddrs: []string{"tcp:1234"}}); !errors.Is(err, spindle.Invalid) {
		t.Errorf("NewHost with a bad listen address: %v, want Invalid", err)
	}
}

func TestBehindNATHost(t *testing.T) {
	h := newHost(t, p2p.Config{NAT: p2p.NATConfig{AutoNAT: true, HolePunch: true, RelayClient: true, RelayService: true}})
	if len(p2p.Addrs(h)) == 0 {
		t.Fatal("host behind NAT has no addresses")
	}
}

// Each NAT setting runs its service and only then. (Hole punching and
// the relay service start only once the host finds itself reachable
// from outside, which a loopback host never is.)
func TestNATSettings(t *testing.T) {
	const (
		autonatV1 = "/libp2p/autonat/1.0.0"
		autonatV2 = "/libp2p/autonat/2/dial-request"
		relayStop = "/libp2p/circuit/relay/0.2.0/stop" // Accepting relayed connections.
	)
	for _, tc := range []struct {
		nat        p2p.NATConfig
		want, none []string
	}{
		{p2p.NATConfig{}, nil, []string{autonatV1, autonatV2, relayStop}},
		{p2p.NATConfig{AutoNAT: true}, []string{autonatV1, autonatV2}, []string{relayStop}},
		{p2p.NATConfig{RelayClient: true}, []string{relayStop}, []string{autonatV1, autonatV2}},
		{p2p.NATConfig{HolePunch: true}, []string{relayStop}, []string{autonatV1, autonatV2}},
	} {
		h := newHost(t, p2p.Config{NAT: tc.nat})
		protos := make(map[string]bool)
		for _, p := range h.Mux().Protocols() {
			protos[string(p)] = true
		}
		for _, p := range tc.want {
			if !protos[p] {
				t.Errorf("%+v: host does not serve %s", tc.nat, p)
			}
		}
		for _, p := range tc.none {
			if protos[p] {
				t.Errorf("%+v: host serves %s", tc.nat, p)
			}
		}
	}
}

// A peer that offers TCP and QUIC is reached over TCP, the cheaper
// transport for bulk transfer.
func TestDialPrefersTCP(t *testing.T) {
	a, b := newHost(t, p2p.Config{}), newHost(t, p2p.Config{})
	for _, ad := range p2p.Addrs(a) {
		b.Peerstore().AddAddrs(a.ID(), []ma.Multiaddr{ma.StringCast(string(ad))}, time.Hour)
	}
	if _, err := p2p.Connect(context.Background(), b, p2p.PeerAddrOf(a.ID())); err != nil {
		t.Fatal(err)
	}
	conns := b.Network().ConnsToPeer(a.ID())
	if len(conns) == 0 {
		t.Fatal("no connection")
	}
	if got := conns[0].RemoteMultiaddr().String(); !strings.Contains(got, "/tcp/") {
		t.Fatalf("connected over %s, want TCP", got)
	}
}
