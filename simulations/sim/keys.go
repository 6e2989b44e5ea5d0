package sim

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	mocknet "github.com/libp2p/go-libp2p/p2p/net/mock"
	ma "github.com/multiformats/go-multiaddr"

	"spindle.dev"
	"spindle.dev/keyraft"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node"
	"spindle.dev/p2p"
	"spindle.dev/simulations/report"
)

// KeysConfig is the key-cluster scenario: Members real keyraft members
// (bolt on disk, Raft over libp2p streams on mocknet, as a node runs
// them). In each of Rounds rounds, 0 to Members−2 members chosen at
// random are killed (cut off, then closed) for Phase while a writer
// registers new users through the leader and readers look users up on
// every live member; then they restart from their directories. At the
// end every acknowledged registration must be on every member.
type KeysConfig struct {
	Members int
	Rounds  int
	Phase   time.Duration // Length of a round; 3 s if zero.
	Seed    uint64
	Dir     string // Parent of the members' directories; a temporary one if "".
}

// KeysTable returns an empty table of the keys scenario.
func KeysTable() *report.Table {
	return &report.Table{
		Title: "keys: a key cluster whose members are killed and restarted (real keyraft, mocknet)",
		Cols:  []string{"members_down", "rounds", "writes", "writes_ok", "write_avail_pct", "lookups", "lookups_ok", "lookup_avail_pct", "acknowledged", "lost"},
	}
}

type keysPhase struct {
	rounds                              int
	writes, writesOK, lookups, lookupOK atomic.Int64
}

// ecdsaSigner signs user records with a P-256 key.
type ecdsaSigner struct {
	name spindle.UserName
	key  *ecdsa.PrivateKey
	pub  spindle.PublicKey
}

func (s *ecdsaSigner) UserName() spindle.UserName   { return s.name }
func (s *ecdsaSigner) PublicKey() spindle.PublicKey { return s.pub }
func (s *ecdsaSigner) Sign(d []byte) (spindle.Signature, error) {
	return ecdsa.SignASN1(rand.Reader, s.key, d)
}

// newRecord returns a signed first record of a new user.
func newRecord(name spindle.UserName) (*spindle.User, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	pub, err := spindle.FormatPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	u := &spindle.User{Name: name, PublicKey: pub, Version: 1}
	return u, keylog.Sign(u, &ecdsaSigner{name: name, key: key, pub: pub})
}

type member struct {
	h   host.Host
	dir string
	mu  sync.Mutex
	c   *keyraft.Cluster // nil while down.
}

func (m *member) cluster() *keyraft.Cluster {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.c
}

// Keys runs the scenario and adds a row per number of members down, and
// a total row.
func Keys(ctx context.Context, cfg KeysConfig, t *report.Table) (err error) {
	if cfg.Members < 3 {
		return fmt.Errorf("a key cluster needs at least 3 members here, not %d", cfg.Members)
	}
	if cfg.Phase == 0 {
		cfg.Phase = 3 * time.Second
	}
	parent := cfg.Dir
	if parent == "" {
		if parent, err = os.MkdirTemp("", "spindle-sim-keys-"); err != nil {
			return err
		}
		defer os.RemoveAll(parent)
	}
	mn := mocknet.New()
	defer mn.Close()
	ms := make([]*member, cfg.Members)
	for i := range ms {
		sk, _, err := crypto.GenerateEd25519Key(seededReader(cfg.Seed, 1000+i))
		if err != nil {
			return err
		}
		h, err := mn.AddPeer(sk, ma.StringCast(fmt.Sprintf("/ip4/10.9.0.%d/tcp/4001", i+1)))
		if err != nil {
			return err
		}
		ms[i] = &member{h: h, dir: filepath.Join(parent, fmt.Sprint(i))}
	}
	if err := mn.LinkAll(); err != nil {
		return err
	}
	if err := mn.ConnectAllButSelf(); err != nil {
		return err
	}
	open := func(i int) error {
		m := ms[i]
		ln, err := p2p.Listen(m.h, node.RaftProtocol)
		if err != nil {
			return err
		}
		c, err := keyraft.Open(ctx, keyraft.Config{
			Dir: m.dir, ID: m.h.ID().String(), Listener: ln,
			Dial:             p2p.Dialer(m.h, node.RaftProtocol),
			Bootstrap:        i == 0,
			HeartbeatTimeout: 250 * time.Millisecond,
			ApplyTimeout:     5 * time.Second,
			Logger:           slog.New(slog.DiscardHandler),
		})
		if err != nil {
			ln.Close()
			return fmt.Errorf("open member %d: %w", i, err)
		}
		m.mu.Lock()
		m.c = c
		m.mu.Unlock()
		return nil
	}
	kill := func(i int) {
		m := ms[i]
		for j, o := range ms {
			if j != i {
				mn.UnlinkPeers(m.h.ID(), o.h.ID())
				mn.DisconnectPeers(m.h.ID(), o.h.ID())
				mn.DisconnectPeers(o.h.ID(), m.h.ID())
			}
		}
		m.mu.Lock()
		c := m.c
		m.c = nil
		m.mu.Unlock()
		c.Close()
	}
	revive := func(i int) error {
		m := ms[i]
		for j, o := range ms {
			if j != i {
				if _, err := mn.LinkPeers(m.h.ID(), o.h.ID()); err != nil {
					return err
				}
				m.h.Connect(ctx, peer.AddrInfo{ID: o.h.ID(), Addrs: o.h.Addrs()})
			}
		}
		return open(i)
	}
	defer func() {
		for _, m := range ms {
			if c := m.cluster(); c != nil {
				c.Close()
			}
		}
	}()
	for i := range ms {
		if err := open(i); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if _, err := ms[0].c.WaitLeader(wctx); err != nil {
		return err
	}
	for i := 1; i < len(ms); i++ {
		if err := ms[0].c.AddVoter(wctx, ms[i].h.ID().String()); err != nil {
			return fmt.Errorf("add member %d: %w", i, err)
		}
	}

	rng := mrand.New(mrand.NewPCG(cfg.Seed, 0x6e75))
	phases := make([]*keysPhase, cfg.Members)
	for i := range phases {
		phases[i] = new(keysPhase)
	}
	var (
		ackMu sync.Mutex
		acked []spindle.UserName
		next  atomic.Int64
	)
	leader := func() *keyraft.Cluster {
		for _, m := range ms {
			if c := m.cluster(); c != nil && c.IsLeader() {
				return c
			}
		}
		return nil
	}
	var cur atomic.Pointer[keysPhase]
	cur.Store(phases[0])
	stop := make(chan struct{})
	var wg sync.WaitGroup
	// The writer: one registration at a time, through the leader.
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			ph := cur.Load()
			name := spindle.UserName(fmt.Sprintf("u%d@sim.example", next.Add(1)))
			u, err := newRecord(name)
			if err != nil {
				continue
			}
			ph.writes.Add(1)
			c := leader()
			if c == nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = c.Put(pctx, u)
			cancel()
			if err == nil {
				ph.writesOK.Add(1)
				ackMu.Lock()
				acked = append(acked, name)
				ackMu.Unlock()
			} else {
				time.Sleep(50 * time.Millisecond)
			}
		}
	})
	// The readers: look up an acknowledged user on every member, live
	// or not (a lookup on a member that is down fails).
	wg.Go(func() {
		r := mrand.New(mrand.NewPCG(cfg.Seed, 0x4ead))
		for {
			select {
			case <-stop:
				return
			default:
			}
			ackMu.Lock()
			n := len(acked)
			var name spindle.UserName
			if n > 0 {
				name = acked[r.IntN(n)]
			}
			ackMu.Unlock()
			if n == 0 {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			ph := cur.Load()
			for _, m := range ms {
				ph.lookups.Add(1)
				c := m.cluster()
				if c == nil {
					continue
				}
				if _, err := c.Lookup(ctx, name); err == nil {
					ph.lookupOK.Add(1)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	var runErr error
	for range cfg.Rounds {
		down := rng.IntN(cfg.Members - 1) // 0 … Members−2: a majority may be lost.
		victims := rng.Perm(cfg.Members)[:down]
		ph := phases[down]
		ph.rounds++
		cur.Store(ph)
		for _, i := range victims {
			kill(i)
		}
		time.Sleep(cfg.Phase)
		cur.Store(new(keysPhase)) // Restarting is not counted.
		for _, i := range victims {
			if err := revive(i); err != nil {
				runErr = err
			}
		}
		if runErr != nil {
			break
		}
		lctx, cancel := context.WithTimeout(ctx, time.Minute)
		for leader() == nil && lctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
	}
	close(stop)
	wg.Wait()
	if runErr != nil {
		return runErr
	}
	// Every acknowledged registration must reach every member.
	lost := 0
	deadline := time.Now().Add(time.Minute)
	for _, name := range acked {
		for _, m := range ms {
			c := m.cluster()
			for {
				_, err := c.Lookup(ctx, name)
				if err == nil {
					break
				}
				if !errors.Is(err, spindle.NotExist) || time.Now().After(deadline) {
					lost++
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	var tot keysPhase
	for down, ph := range phases {
		if ph.rounds == 0 {
			continue
		}
		tot.rounds += ph.rounds
		tot.writes.Add(ph.writes.Load())
		tot.writesOK.Add(ph.writesOK.Load())
		tot.lookups.Add(ph.lookups.Load())
		tot.lookupOK.Add(ph.lookupOK.Load())
		keysRow(t, fmt.Sprint(down), ph, "", "")
	}
	keysRow(t, "all", &tot, fmt.Sprint(len(acked)), fmt.Sprint(lost))
	if lost > 0 {
		return fmt.Errorf("%d of %d acknowledged registrations missing from a member", lost, len(acked))
	}
	return nil
}

func keysRow(t *report.Table, down string, ph *keysPhase, acked, lost string) {
	pct := func(a, b int64) float64 {
		if b == 0 {
			return 0
		}
		return 100 * float64(a) / float64(b)
	}
	if acked == "" {
		acked, lost = "-", "-"
	}
	t.Add(down, ph.rounds, ph.writes.Load(), ph.writesOK.Load(), pct(ph.writesOK.Load(), ph.writes.Load()),
		ph.lookups.Load(), ph.lookupOK.Load(), pct(ph.lookupOK.Load(), ph.lookups.Load()), acked, lost)
}
