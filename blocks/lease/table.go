package lease

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"spindle.dev"
	"spindle.dev/blocks"
)

// Defaults for Config.
const (
	DefaultTerm       = 14 * 24 * time.Hour
	DefaultMaxTerm    = 30 * 24 * time.Hour
	DefaultGrace      = 3 * 24 * time.Hour
	DefaultPeerLeases = 4 << 20
	DefaultMaxLeases  = 16 << 20
)

// Config bounds a Table. Zero fields take their defaults.
type Config struct {
	// MaxTerm is the longest lease granted; a longer term asked for is
	// cut to it.
	MaxTerm time.Duration
	// PeerLeases bounds the leases one dir host holds here, MaxLeases
	// those of all together (the node's own included).
	PeerLeases int
	MaxLeases  int
	// Own names the node itself as a dir host: its leases, for the
	// trees it hosts, count against MaxLeases only.
	Own string
	// Now returns the time; nil means time.Now. For tests.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.MaxTerm <= 0 {
		c.MaxTerm = DefaultMaxTerm
	}
	if c.PeerLeases <= 0 {
		c.PeerLeases = DefaultPeerLeases
	}
	if c.MaxLeases <= 0 {
		c.MaxLeases = DefaultMaxLeases
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// A grant is one dir host's lease on a block.
type grant struct {
	host uint32 // Index in Table.hosts.
	exp  int64  // Unix nanoseconds.
}

// A Table holds the leases granted to dir hosts, durably. It is safe for
// concurrent use.
type Table struct {
	cfg  Config
	path string // The journal; "" keeps the table in memory.

	mu      sync.Mutex // Guards everything below; held across journal writes.
	f       *os.File
	size    int64 // Bytes in the journal.
	hosts   []string
	hostIdx map[string]uint32
	leases  map[blocks.Digest][]grant
	count   []int // Leases per host.
	total   int
	hold    int64 // Unix ns: no block is collectable before it (a pause).
	refused int64 // Leases refused for a quota, since the table opened.
	damage  error // Found in the journal at open.
}

// Journal records: a grant (kind, host, expiry, digests) or a pause of
// collection (kind, until).
const (
	recGrant = 1
	recHold  = 2
	// maxRecord bounds a journal record, so that a damaged length does
	// not make Open allocate without limit.
	maxRecord = 16 + 256 + 16 + MaxDigests*32
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// NewTable returns a table held in memory only, for tests and nodes
// without a home.
func NewTable(cfg Config) *Table {
	cfg.setDefaults()
	return &Table{cfg: cfg, hostIdx: make(map[string]uint32), leases: make(map[blocks.Digest][]grant)}
}

// OpenTable opens the table whose journal is the file path, creating it
// if absent. A journal whose tail is torn or damaged is cut at the last
// sound record; since leases may have been lost with it, collection then
// pauses for MaxTerm (see [Table.Damage]).
func OpenTable(path string, cfg Config) (*Table, error) {
	const op spindle.Op = "lease.OpenTable"
	t := NewTable(cfg)
	t.path = path
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, spindle.E(op, spindle.IO, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, spindle.E(op, spindle.IO, err)
	}
	good, err := t.replay(bufio.NewReader(f))
	if err != nil {
		t.damage = spindle.E(op, spindle.Integrity, fmt.Errorf("lease journal %s damaged after %d bytes (%v): collection pauses for %v", path, good, err, t.cfg.MaxTerm))
		if err := f.Truncate(good); err != nil {
			f.Close()
			return nil, spindle.E(op, spindle.IO, err)
		}
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return nil, spindle.E(op, spindle.IO, err)
	}
	t.f, t.size = f, good
	if t.damage != nil {
		if err := t.pauseLocked(t.cfg.Now().Add(t.cfg.MaxTerm)); err != nil {
			f.Close()
			return nil, spindle.E(op, err)
		}
	}
	t.pruneLocked(t.cfg.Now().UnixNano())
	return t, nil
}

// replay applies the journal's records and returns the length of its
// sound prefix, with an error if anything follows it.
func (t *Table) replay(r io.Reader) (int64, error) {
	var off int64
	var hdr [8]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if err == io.EOF {
				return off, nil
			}
			return off, errors.New("torn record header")
		}
		n := binary.BigEndian.Uint32(hdr[:4])
		if n > maxRecord {
			return off, fmt.Errorf("record of %d bytes", n)
		}
		body := make([]byte, n)
		if _, err := io.ReadFull(r, body); err != nil {
			return off, errors.New("torn record")
		}
		if crc32.Checksum(body, castagnoli) != binary.BigEndian.Uint32(hdr[4:]) {
			return off, errors.New("record checksum mismatch")
		}
		rec, err := decodeRecord(body)
		if err != nil {
			return off, err
		}
		t.apply(rec)
		off += 8 + int64(n)
	}
}

// A record is a decoded journal record.
type record struct {
	kind    byte
	host    string
	exp     int64
	digests []blocks.Digest
}

func appendRecord(b []byte, rec *record) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 0, 0, 0, 0)
	b = append(b, rec.kind)
	b = binary.AppendUvarint(b, uint64(len(rec.host)))
	b = append(b, rec.host...)
	b = binary.BigEndian.AppendUint64(b, uint64(rec.exp))
	b = binary.AppendUvarint(b, uint64(len(rec.digests)))
	for _, d := range rec.digests {
		b = append(b, d[:]...)
	}
	body := b[start+8:]
	binary.BigEndian.PutUint32(b[start:], uint32(len(body)))
	binary.BigEndian.PutUint32(b[start+4:], crc32.Checksum(body, castagnoli))
	return b
}

// decodeRecord decodes the body of a journal record.
func decodeRecord(b []byte) (*record, error) {
	if len(b) < 1 {
		return nil, errors.New("empty record")
	}
	rec := &record{kind: b[0]}
	b = b[1:]
	if rec.kind != recGrant && rec.kind != recHold {
		return nil, fmt.Errorf("unknown record kind %d", rec.kind)
	}
	n, k := binary.Uvarint(b)
	if k <= 0 || n > 255 || uint64(len(b)-k) < n {
		return nil, errors.New("bad host name")
	}
	rec.host = string(b[k : k+int(n)])
	b = b[k+int(n):]
	if len(b) < 8 {
		return nil, errors.New("no expiry")
	}
	rec.exp = int64(binary.BigEndian.Uint64(b))
	b = b[8:]
	n, k = binary.Uvarint(b)
	if k <= 0 || n > MaxDigests || uint64(len(b)-k) != 32*n {
		return nil, errors.New("bad digest list")
	}
	b = b[k:]
	rec.digests = make([]blocks.Digest, n)
	for i := range rec.digests {
		copy(rec.digests[i][:], b[32*i:])
	}
	return rec, nil
}

// apply adds a record to the table, without quotas: it was within them
// when written.
func (t *Table) apply(rec *record) {
	switch rec.kind {
	case recHold:
		t.hold = max(t.hold, rec.exp)
	case recGrant:
		h := t.host(rec.host)
		for _, d := range rec.digests {
			t.set(d, h, rec.exp)
		}
	}
}

// host returns the index of a dir host, adding it if new.
func (t *Table) host(name string) uint32 {
	if i, ok := t.hostIdx[name]; ok {
		return i
	}
	i := uint32(len(t.hosts))
	t.hosts = append(t.hosts, name)
	t.hostIdx[name] = i
	t.count = append(t.count, 0)
	return i
}

// set makes host h's lease on d expire at exp, and reports whether the
// lease is new.
func (t *Table) set(d blocks.Digest, h uint32, exp int64) bool {
	gs := t.leases[d]
	for i := range gs {
		if gs[i].host == h {
			gs[i].exp = exp
			return false
		}
	}
	t.leases[d] = append(gs, grant{h, exp})
	t.count[h]++
	t.total++
	return true
}

// has reports whether host h holds a lease on d, live or not yet pruned.
func (t *Table) has(d blocks.Digest, h uint32) bool {
	for _, g := range t.leases[d] {
		if g.host == h {
			return true
		}
	}
	return false
}

// Grant gives dir host the leases on digests for term (cut to MaxTerm),
// durably: when it returns, the leases it granted survive a crash. A
// lease the host already holds is renewed whatever the quotas; new ones
// are granted within Config.PeerLeases for the host and
// Config.MaxLeases in all. It returns how many leases it granted; if
// it refused some, the error, of kind Permission, says which quota was
// full. A refusal for a full table also pauses collection.
func (t *Table) Grant(host string, term time.Duration, digests []blocks.Digest) (int, error) {
	const op spindle.Op = "lease.Grant"
	if host == "" || len(host) > 255 {
		return 0, spindle.E(op, spindle.Invalid, fmt.Sprintf("dir host name of %d bytes", len(host)))
	}
	if term <= 0 {
		return 0, spindle.E(op, spindle.Invalid, fmt.Sprintf("lease term %v is not positive", term))
	}
	term = min(term, t.cfg.MaxTerm)
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.cfg.Now()
	exp := now.Add(term).UnixNano()
	h := t.host(host)
	var ok []blocks.Digest
	var why error
	refused, fresh := 0, 0
	full := false
	for _, d := range digests {
		if !t.has(d, h) {
			switch {
			case host != t.cfg.Own && t.count[h]+fresh >= t.cfg.PeerLeases:
				why = fmt.Errorf("dir host %s holds its quota of %d leases", host, t.cfg.PeerLeases)
				refused++
				continue
			case t.total+fresh >= t.cfg.MaxLeases:
				why = fmt.Errorf("this node holds its quota of %d leases", t.cfg.MaxLeases)
				refused++
				full = true
				continue
			}
			fresh++
		}
		ok = append(ok, d)
	}
	if len(ok) > 0 {
		var recs []*record
		for rest := ok; len(rest) > 0; {
			k := min(len(rest), MaxDigests)
			recs = append(recs, &record{kind: recGrant, host: host, exp: exp, digests: rest[:k]})
			rest = rest[k:]
		}
		if err := t.write(recs...); err != nil {
			return 0, spindle.E(op, err)
		}
		for _, d := range ok {
			t.set(d, h, exp)
		}
	}
	if refused > 0 {
		t.refused += int64(refused)
		if full {
			// Some block referenced somewhere may now go unleased:
			// collect nothing until every lease could have come back.
			if err := t.pauseLocked(now.Add(t.cfg.MaxTerm)); err != nil {
				return len(ok), spindle.E(op, err)
			}
		}
		return len(ok), spindle.E(op, spindle.Permission, fmt.Sprintf("%d of %d leases refused: %v", refused, len(digests), why))
	}
	return len(ok), nil
}

// Pause stops collection until the time given, durably.
func (t *Table) Pause(until time.Time) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.pauseLocked(until); err != nil {
		return spindle.E(spindle.Op("lease.Pause"), err)
	}
	return nil
}

func (t *Table) pauseLocked(until time.Time) error {
	u := until.UnixNano()
	if u <= t.hold {
		return nil
	}
	if err := t.write(&record{kind: recHold, exp: u}); err != nil {
		return err
	}
	t.hold = u
	return nil
}

// write appends recs to the journal and syncs it. The caller holds t.mu.
func (t *Table) write(recs ...*record) error {
	if t.f == nil {
		if t.path != "" {
			return spindle.E(spindle.IO, "the lease table is closed")
		}
		return nil
	}
	var b []byte
	for _, rec := range recs {
		b = appendRecord(b, rec)
	}
	if _, err := t.f.Write(b); err != nil {
		// Cut what may have been written, so the journal stays sound.
		t.f.Truncate(t.size)
		t.f.Seek(t.size, io.SeekStart)
		return spindle.E(spindle.IO, err)
	}
	if err := t.f.Sync(); err != nil {
		return spindle.E(spindle.IO, err)
	}
	t.size += int64(len(b))
	return nil
}

// Live reports whether a lease on d is alive now. (Whether collection
// is paused is [Table.PausedUntil].)
func (t *Table) Live(d blocks.Digest) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.liveLocked(d, t.cfg.Now().UnixNano())
}

// LiveFrom reports whether dir host holds a lease on d that is alive now.
func (t *Table) LiveFrom(d blocks.Digest, host string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	h, ok := t.hostIdx[host]
	if !ok {
		return false
	}
	now := t.cfg.Now().UnixNano()
	for _, g := range t.leases[d] {
		if g.host == h && g.exp > now {
			return true
		}
	}
	return false
}

func (t *Table) liveLocked(d blocks.Digest, now int64) bool {
	for _, g := range t.leases[d] {
		if g.exp > now {
			return true
		}
	}
	return false
}

// PausedUntil returns the time until which collection is paused, zero if
// it is not.
func (t *Table) PausedUntil() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.hold <= t.cfg.Now().UnixNano() {
		return time.Time{}
	}
	return time.Unix(0, t.hold)
}

// Damage returns the damage found in the journal at open, or nil.
func (t *Table) Damage() error { return t.damage }

// Prune drops the leases that have expired and compacts the journal when
// it has grown to several times what the live leases need.
func (t *Table) Prune() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(t.cfg.Now().UnixNano())
	if t.f != nil && t.size > 1<<20 && t.size > 4*int64(t.total)*40 {
		if err := t.compactLocked(); err != nil {
			return spindle.E(spindle.Op("lease.Prune"), err)
		}
	}
	return nil
}

func (t *Table) pruneLocked(now int64) {
	for d, gs := range t.leases {
		keep := gs[:0]
		for _, g := range gs {
			if g.exp > now {
				keep = append(keep, g)
			} else {
				t.count[g.host]--
				t.total--
			}
		}
		if len(keep) == 0 {
			delete(t.leases, d)
		} else {
			t.leases[d] = keep
		}
	}
}

// compactLocked rewrites the journal with the live leases only, grouped
// by dir host and expiry, and replaces the old one atomically.
func (t *Table) compactLocked() error {
	groups := make(map[grant][]blocks.Digest)
	for d, gs := range t.leases {
		for _, g := range gs {
			groups[g] = append(groups[g], d)
		}
	}
	var b []byte
	if t.hold > 0 {
		b = appendRecord(b, &record{kind: recHold, exp: t.hold})
	}
	for k, ds := range groups {
		for len(ds) > 0 {
			n := min(len(ds), MaxDigests)
			b = appendRecord(b, &record{kind: recGrant, host: t.hosts[k.host], exp: k.exp, digests: ds[:n]})
			ds = ds[n:]
		}
	}
	rerr := spindle.ReplaceFile(t.path, b, 0o600, true)
	// Whether or not the new journal took the old one's name (the rename
	// may be done when the directory sync fails), go on writing to the
	// file that has the name: grants written to the old file once it is
	// replaced would be lost at the next start. If it cannot be opened,
	// the table refuses grants rather than lose them.
	f, err := os.OpenFile(t.path, os.O_RDWR, 0o600)
	var size int64
	if err == nil {
		if size, err = f.Seek(0, io.SeekEnd); err != nil {
			f.Close()
		}
	}
	t.f.Close()
	if err != nil {
		t.f, t.size = nil, 0
		return spindle.E(spindle.IO, errors.Join(rerr, fmt.Errorf("reopen the lease journal after compacting it: %w", err)))
	}
	t.f, t.size = f, size
	return rerr
}

// Close closes the journal.
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.f == nil {
		return nil
	}
	err := t.f.Close()
	t.f = nil
	if err != nil {
		return spindle.E(spindle.Op("lease.Close"), spindle.IO, err)
	}
	return nil
}

// TableStats describes a Table.
type TableStats struct {
	Leases      int       // Leases held (live, or expired and not yet pruned).
	Blocks      int       // Blocks with a lease.
	Hosts       int       // Dir hosts that have held a lease.
	Refused     int64     // Leases refused for a quota since the table opened.
	PausedUntil time.Time // Collection is paused until then; zero if not.
	JournalSize int64     // Bytes in the journal.
}

// Stats returns the table's figures.
func (t *Table) Stats() TableStats {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := TableStats{Leases: t.total, Blocks: len(t.leases), Hosts: len(t.hosts), Refused: t.refused, JournalSize: t.size}
	if t.hold > t.cfg.Now().UnixNano() {
		st.PausedUntil = time.Unix(0, t.hold)
	}
	return st
}
