package dirlog

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"

	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/access"
)

// # Checkpoints
//
// A checkpoint is the folded tree of one user's log at sequence N, so that
// a host starting up, a new mirror or an auditor need not replay the log
// from entry 1, and so that a host can drop entries 1 to N (compaction).
// It holds, for every item of the tree, the signed entry that put it and
// the signed renames that moved it since: everything that makes its value
// in the tree map, each still carrying its writer's signature. It also
// holds the history of every Group file (the signed entry of each version
// and the sequence it took effect at), since other users' logs may name a
// group as it was at an earlier point (see dep). With them it carries the
// hash of entry N and the map root after it, and the dir host signs the
// whole.
//
// A verifier checks every entry's signature with the key its writer held
// (see [HeldKeys]), rebuilds the tree from the items and recomputes the map
// root, which must be the signed one; a head at N must name the same hash
// and root. What a checkpoint cannot show is the entries it dropped: that
// the deleted items were deleted by writers with the right to. For those
// the verifier relies on the host's signature, or on an older checkpoint
// or log it holds (see DESIGN.md, "Directory logs").

const (
	checkpointMagic   = "SPDLC2"
	checkpointContext = "spindle.dev/dirlog checkpoint v2\n"
	// Version 1 checkpoints, before the log tree, are still read: a tree
	// folded from one has no log tree until the host checkpoints again.
	checkpointMagicV1   = "SPDLC1"
	checkpointContextV1 = "spindle.dev/dirlog checkpoint v1\n"
	// chunkMagic starts each record of a checkpoint stored in a log: a
	// checkpoint may be larger than one record may be.
	chunkMagic = "SPDLK1"
	chunkSize  = 64 << 20
	// maxCheckpoint bounds a checkpoint's encoding.
	maxCheckpoint = 1 << 34
)

// A Checkpoint is the folded tree of a user's log at sequence Seq, signed
// by a dir host (see the package comment on checkpoints).
type Checkpoint struct {
	User spindle.UserName
	Seq  int64
	Hash Hash // Hash of entry Seq.
	Root Hash // Root of the tree map after entry Seq.
	Time spindle.Time
	// Entries are the signed entries the items and group versions refer
	// to, each once, in the order of their sequence numbers.
	Entries []*Entry
	// Items are the tree's items, parents before children, children in
	// name order.
	Items  []CheckpointItem
	Groups []GroupHistory // Sorted by name.
	// Host, HostKey and Sig are the signing dir host, as in a [Head].
	Host    string
	HostKey []byte
	Sig     spindle.Signature
	// LogHashes are the stored hashes of the Merkle tree of the log's
	// first Seq entries (see [LogTree]): what a host that dropped the
	// entries needs to go on signing log roots and proving steps from
	// before the checkpoint. Empty in a version 1 checkpoint.
	LogHashes []Hash
	// v1 marks a checkpoint decoded from the version 1 encoding.
	v1 bool
}

// A CheckpointItem is one item of a checkpoint's tree.
type CheckpointItem struct {
	Src   int   // Index in Entries of the put, link or mkdir that made it.
	Moves []int // Indexes in Entries of the renames that moved it, oldest first.
	// Sequence is the item's DirEntry.Sequence: the last entry that
	// changed it or, for a directory, anything below it.
	Sequence int64
	// Prior holds the signed records a re-wrap of a moved file inherited
	// from the file it replaced (see signedRecords); usually none.
	Prior [][]byte
}

// A GroupHistory is every version of one Group file.
type GroupHistory struct {
	Name     spindle.PathName
	Versions []GroupVersion // In order of Seq.
}

// A GroupVersion is the state of a Group file from Seq on: the contents of
// entry Src (an index in Entries), or no file if Src is -1.
type GroupVersion struct {
	Seq int64
	Src int
}

// Head returns the checkpoint's position as an unsigned head, for
// comparing with a signed head (see [CheckHead]).
func (cp *Checkpoint) Head() *Head {
	h := &Head{User: cp.User, Seq: cp.Seq, Hash: cp.Hash, Root: cp.Root, Time: cp.Time}
	if lt := cp.logTree(); lt != nil {
		h.LogRoot, _ = lt.Root(cp.Seq)
	}
	return h
}

// logTree returns the log tree the checkpoint carries, or nil.
func (cp *Checkpoint) logTree() *LogTree {
	if cp.v1 {
		return nil
	}
	stored := make([]tlog.Hash, len(cp.LogHashes))
	for i, h := range cp.LogHashes {
		stored[i] = tlog.Hash(h)
	}
	lt, err := LogTreeFrom(cp.Seq, stored)
	if err != nil {
		return nil
	}
	return lt
}

// body returns the canonical encoding of every field but Sig.
func (cp *Checkpoint) body() []byte {
	magic := checkpointMagic
	if cp.v1 {
		magic = checkpointMagicV1
	}
	b := append([]byte(nil), magic...)
	b = appendString(b, string(cp.User))
	b = binary.BigEndian.AppendUint64(b, uint64(cp.Seq))
	b = append(b, cp.Hash[:]...)
	b = append(b, cp.Root[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(cp.Time))
	b = binary.BigEndian.AppendUint32(b, uint32(len(cp.Entries)))
	for _, e := range cp.Entries {
		b = appendBytes(b, e.Marshal())
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(cp.Items)))
	for _, it := range cp.Items {
		b = binary.BigEndian.AppendUint32(b, uint32(it.Src))
		b = binary.BigEndian.AppendUint32(b, uint32(len(it.Moves)))
		for _, m := range it.Moves {
			b = binary.BigEndian.AppendUint32(b, uint32(m))
		}
		b = binary.BigEndian.AppendUint64(b, uint64(it.Sequence))
		b = binary.BigEndian.AppendUint32(b, uint32(len(it.Prior)))
		for _, p := range it.Prior {
			b = appendBytes(b, p)
		}
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(cp.Groups)))
	for _, g := range cp.Groups {
		b = appendString(b, string(g.Name))
		b = binary.BigEndian.AppendUint32(b, uint32(len(g.Versions)))
		for _, v := range g.Versions {
			b = binary.BigEndian.AppendUint64(b, uint64(v.Seq))
			b = binary.BigEndian.AppendUint32(b, uint32(v.Src+1))
		}
	}
	if !cp.v1 {
		b = binary.BigEndian.AppendUint32(b, uint32(len(cp.LogHashes)))
		for _, h := range cp.LogHashes {
			b = append(b, h[:]...)
		}
	}
	b = appendString(b, cp.Host)
	return appendString(b, string(cp.HostKey))
}

// Digest returns the digest the host signs: the SHA-256 of a context
// string and the encoding of every field but the signature.
func (cp *Checkpoint) Digest() []byte {
	h := sha256.New()
	if cp.v1 {
		h.Write([]byte(checkpointContextV1))
	} else {
		h.Write([]byte(checkpointContext))
	}
	h.Write(cp.body())
	return h.Sum(nil)
}

// Sign signs the checkpoint as host s.
func (cp *Checkpoint) Sign(s HeadSigner) error {
	cp.Host, cp.HostKey = s.HostID(), s.HostKey()
	sig, err := s.Sign(cp.Digest())
	if err != nil {
		return spindle.E(spindle.Op("dirlog.Checkpoint.Sign"), cp.User, err)
	}
	cp.Sig = sig
	return nil
}

// Marshal returns the canonical encoding of the checkpoint, signature
// included. [UnmarshalCheckpoint] accepts exactly the encodings Marshal
// produces.
func (cp *Checkpoint) Marshal() []byte { return appendBytes(cp.body(), cp.Sig) }

// UnmarshalCheckpoint decodes a checkpoint encoded by [Checkpoint.Marshal].
// It checks the structure only (every index in range, sequence numbers in
// order); [Checkpoint.Verify] checks signatures and the tree. Errors are
// Invalid.
func UnmarshalCheckpoint(data []byte) (*Checkpoint, error) {
	const op spindle.Op = "dirlog.UnmarshalCheckpoint"
	cp, err := decodeCheckpoint(data)
	if err != nil {
		return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("malformed checkpoint: %w", err))
	}
	return cp, nil
}

func decodeCheckpoint(data []byte) (*Checkpoint, error) {
	d := decoder{b: data}
	cp := &Checkpoint{}
	switch string(d.take(len(checkpointMagic), "magic")) {
	case checkpointMagic:
	case checkpointMagicV1:
		cp.v1 = true
	default:
		d.fail("bad magic")
	}
	cp.User = spindle.UserName(d.string(spindle.MaxUserNameLen, "user"))
	cp.Seq = int64(d.u64("sequence"))
	copy(cp.Hash[:], d.take(len(cp.Hash), "hash"))
	copy(cp.Root[:], d.take(len(cp.Root), "map root"))
	cp.Time = spindle.Time(d.u64("time"))
	// count reads a count of things each at least min bytes long, so
	// that a hostile count cannot make the decoder allocate much more
	// than the data holds.
	count := func(min int, what string) int {
		n := d.u32(what)
		if d.err == nil && uint64(n)*uint64(min) > uint64(len(d.b)) {
			d.fail("%d %s in %d bytes", n, what, len(d.b))
		}
		if d.err != nil {
			return 0
		}
		return int(n)
	}
	if d.err == nil && cp.Seq < 0 {
		d.fail("negative sequence %d", cp.Seq)
	}
	n := count(4, "entries")
	for i := 0; i < n && d.err == nil; i++ {
		b := d.take(int(d.u32("entry length")), "entry")
		if d.err != nil {
			break
		}
		e, err := UnmarshalEntry(b)
		if err != nil {
			d.fail("entry %d: %v", i, err)
			break
		}
		if i > 0 && e.Seq <= cp.Entries[i-1].Seq || e.Seq < 1 || e.Seq > cp.Seq {
			d.fail("entry %d has sequence %d, out of order or beyond the checkpoint at %d", i, e.Seq, cp.Seq)
		}
		cp.Entries = append(cp.Entries, e)
	}
	index := func(what string) int {
		i := d.u32(what)
		if d.err == nil && int(i) >= len(cp.Entries) {
			d.fail("%s %d of %d entries", what, i, len(cp.Entries))
		}
		return int(i)
	}
	n = count(20, "items")
	for i := 0; i < n && d.err == nil; i++ {
		it := CheckpointItem{Src: index("item entry")}
		m := count(4, "moves")
		for j := 0; j < m && d.err == nil; j++ {
			it.Moves = append(it.Moves, index("move"))
		}
		it.Sequence = int64(d.u64("item sequence"))
		p := count(4, "prior records")
		for j := 0; j < p && d.err == nil; j++ {
			it.Prior = append(it.Prior, d.bytes(MaxEntrySize, "prior record"))
		}
		cp.Items = append(cp.Items, it)
	}
	n = count(8, "groups")
	for i := 0; i < n && d.err == nil; i++ {
		g := GroupHistory{Name: spindle.PathName(d.string(MaxNameLen, "group name"))}
		if i > 0 && d.err == nil && g.Name <= cp.Groups[i-1].Name {
			d.fail("group %s out of order", g.Name)
		}
		m := count(12, "group versions")
		for j := 0; j < m && d.err == nil; j++ {
			v := GroupVersion{Seq: int64(d.u64("group version sequence")), Src: int(d.u32("group version entry")) - 1}
			if d.err == nil && (v.Src >= len(cp.Entries) || v.Seq < 1 || v.Seq > cp.Seq || j > 0 && v.Seq <= g.Versions[j-1].Seq) {
				d.fail("group %s version %d (sequence %d, entry %d) out of range or order", g.Name, j, v.Seq, v.Src)
			}
			g.Versions = append(g.Versions, v)
		}
		cp.Groups = append(cp.Groups, g)
	}
	if !cp.v1 {
		n = count(len(Hash{}), "log hashes")
		if d.err == nil && cp.Seq <= maxLogEntries && int64(n) != tlog.StoredHashCount(cp.Seq) {
			d.fail("%d log hashes for %d entries", n, cp.Seq)
		}
		for i := 0; i < n && d.err == nil; i++ {
			var h Hash
			copy(h[:], d.take(len(h), "log hash"))
			cp.LogHashes = append(cp.LogHashes, h)
		}
	}
	cp.Host = d.string(maxHostLen, "host")
	cp.HostKey = []byte(d.string(maxKeyLen, "host key"))
	cp.Sig = d.bytes(MaxSignature, "signature")
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d trailing bytes", len(d.b))
	}
	return cp, d.err
}

// Checkpoint returns the checkpoint of t, unsigned.
func (t *Tree) Checkpoint() *Checkpoint {
	cp := &Checkpoint{User: t.user, Seq: t.Seq, Hash: t.Head, Root: t.MapRoot(), Time: spindle.Now()}
	if t.Log != nil && t.Log.Len() == t.Seq {
		for _, h := range t.Log.StoredHashes() {
			cp.LogHashes = append(cp.LogHashes, Hash(h))
		}
	} else {
		// The log tree is unknown (folded from a version 1 checkpoint):
		// say so with the old version rather than a wrong tree.
		cp.v1 = true
	}
	// Entries are collected by pointer, then numbered in sequence order.
	seen := make(map[*Entry]bool)
	var all []*Entry
	note := func(e *Entry) {
		if !seen[e] {
			seen[e] = true
			all = append(all, e)
		}
	}
	Walk(t.Root, func(n *Node) bool {
		note(n.src)
		for _, m := range n.moves {
			note(m)
		}
		return true
	})
	names := make([]spindle.PathName, 0, len(t.groups))
	for name, h := range t.groups {
		names = append(names, name)
		for _, v := range h {
			if v.src != nil {
				note(v.src)
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Seq < all[j].Seq })
	idx := make(map[*Entry]int, len(all))
	for i, e := range all {
		idx[e] = i
	}
	cp.Entries = all
	if t.Root != nil {
		Walk(t.Root, func(n *Node) bool {
			it := CheckpointItem{Src: idx[n.src], Sequence: n.Entry.Sequence}
			for _, m := range n.moves {
				it.Moves = append(it.Moves, idx[m])
			}
			if !n.Entry.Attr.IsDir() && signedRecords(n.src, nil) == nil {
				if k := len(n.Entry.Signed) - len(n.moves); k > 0 {
					it.Prior = n.Entry.Signed[:k]
				}
			}
			cp.Items = append(cp.Items, it)
			return true
		})
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	for _, name := range names {
		g := GroupHistory{Name: name}
		for _, v := range t.groups[name] {
			src := -1
			if v.src != nil {
				src = idx[v.src]
			}
			g.Versions = append(g.Versions, GroupVersion{Seq: v.seq, Src: src})
		}
		cp.Groups = append(cp.Groups, g)
	}
	return cp
}

// Verify checks the checkpoint: the host's signature, if v is not nil
// (v accepts the hosts that may vouch for cp.User); every entry's
// signature with the key its writer held (keys and history, as for
// [Audit]); and that the items make a tree whose map root is cp.Root. A
// bad checkpoint is Integrity; an error of another kind means it could not
// be decided (keys could not be learnt).
func (cp *Checkpoint) Verify(ctx context.Context, keys KeyFunc, history KeyHistoryFunc, v HeadVerifier) error {
	const op spindle.Op = "dirlog.Checkpoint.Verify"
	if v != nil {
		if err := cp.VerifySigner(v); err != nil {
			return spindle.E(op, err)
		}
	}
	if _, invalid, fatal := cp.Tree(ctx, keys, history); fatal != nil {
		return spindle.E(op, fatal)
	} else if invalid != nil {
		return spindle.E(op, spindle.Integrity, cp.User, invalid)
	}
	return nil
}

// VerifySigner checks the checkpoint's signature by a dir host with v,
// the first part of Verify: for a mirror whose host.Server.StartFrom checks the
// entries. A checkpoint without a valid signature by a host v accepts is
// Integrity.
func (cp *Checkpoint) VerifySigner(v HeadVerifier) error {
	const op spindle.Op = "dirlog.Checkpoint.VerifySigner"
	if len(cp.Sig) == 0 || cp.Host == "" {
		return spindle.E(op, spindle.Integrity, cp.User, "checkpoint is not signed by a dir host")
	}
	if err := v.VerifyHead(cp.User, cp.Host, cp.HostKey, cp.Digest(), cp.Sig); err != nil {
		return spindle.E(op, spindle.Integrity, cp.User, fmt.Errorf("checkpoint at sequence %d signed by %s: %w", cp.Seq, cp.Host, err))
	}
	return nil
}

// CheckHead compares the checkpoint with a head at the same sequence: the
// hash and map root must be the same. A head at another sequence is not
// compared. A mismatch is Integrity.
func (cp *Checkpoint) CheckHead(h *Head) error {
	if h == nil || h.Seq != cp.Seq {
		return nil
	}
	if h.User != cp.User || h.Hash != cp.Hash || h.Root != cp.Root || h.HasLogRoot() && cp.Head().HasLogRoot() && h.LogRoot != cp.Head().LogRoot {
		return spindle.E(spindle.Op("dirlog.Checkpoint.CheckHead"), spindle.Integrity, cp.User, fmt.Sprintf("checkpoint at sequence %d (%s, root %s) from %s does not match the head of %s at it (%s, root %s) from %s", cp.Seq, cp.Hash, cp.Root, cp.Host, h.User, h.Hash, h.Root, from(h)))
	}
	return nil
}

// Tree verifies every entry's signature (if keys is not nil) and rebuilds
// the tree. invalid says what is wrong with the checkpoint; fatal is a
// failure to decide.
func (cp *Checkpoint) Tree(ctx context.Context, keys KeyFunc, history KeyHistoryFunc) (t *Tree, invalid, fatal error) {
	if err := CheckUser(cp.User); err != nil {
		return nil, err, nil
	}
	if keys != nil {
		cache := make(map[spindle.UserName]spindle.PublicKey)
		cached := func(ctx context.Context, u spindle.UserName) (spindle.PublicKey, error) {
			if k, ok := cache[u]; ok {
				return k, nil
			}
			k, err := keys(ctx, u)
			if err == nil {
				cache[u] = k
			}
			return k, err
		}
		for _, e := range cp.Entries {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			if invalid, fatal := verifyHeld(ctx, cached, history, e); invalid != nil || fatal != nil {
				return nil, invalid, fatal
			}
		}
	}
	t, err := cp.Fold()
	if err != nil {
		return nil, err, nil
	}
	return t, nil, nil
}

// verifyHeld checks e's signature with its writer's current key or, with
// history, a key the writer held that may sign e (see [HeldKeys]).
func verifyHeld(ctx context.Context, keys KeyFunc, history KeyHistoryFunc, e *Entry) (invalid, fatal error) {
	invalid, fatal = VerifySignature(ctx, keys, nil, e, "")
	if fatal != nil || invalid == nil || spindle.KindOf(invalid) != spindle.Integrity {
		return invalid, fatal
	}
	if history == nil {
		// It may be a key the writer replaced since: undecided, so
		// that a host does not take its own log for damaged.
		return nil, spindle.E(spindle.Integrity, e.Entry.Name, e.Writer, fmt.Sprintf("checkpoint entry %d does not verify with the writer's current key; without a key history it cannot be told from a forgery (see Config.KeyHistory)", e.Seq))
	}
	held, err := history(ctx, e.Writer)
	if err != nil {
		return nil, spindle.E(e.Entry.Name, e.Writer, err)
	}
	for _, h := range held {
		if spindle.Verify(h.Key, e.SignedDigest(), e.Sig) == nil {
			if !h.Signs(e.Writer, e.Tree(), e.Seq, e.KeyAt, e.Legacy) {
				return spindle.E(spindle.Integrity, e.Entry.Name, e.Writer, fmt.Sprintf("entry %d, anchored at key log size %d, was signed with a key the writer replaced after entry %d of its tree, at key log index %d", e.Seq, e.KeyAt, h.Until, h.Replaced)), nil
			}
			return nil, nil
		}
	}
	return invalid, nil
}

// Fold rebuilds the tree from the items and checks its map root. It does
// not check signatures.
func (cp *Checkpoint) Fold() (*Tree, error) {
	t := NewTree(cp.User)
	t.Seq, t.Head = cp.Seq, cp.Hash
	// What the dropped entries did to Access files, and how far they
	// were anchored, is not known (see Tree.Since): the anchor is the
	// highest among the entries kept.
	t.Since = cp.Seq
	t.Log = cp.logTree() // Nil if the checkpoint carries none.
	for i, e := range cp.Entries {
		t.KeyAt = max(t.KeyAt, e.KeyAt)
		if e.Tree() != cp.User {
			return nil, fmt.Errorf("checkpoint entry %d (sequence %d) is of %s's tree", i, e.Seq, e.Tree())
		}
		if err := checkFields(e, cp.User); err != nil {
			return nil, fmt.Errorf("checkpoint entry %d (sequence %d): %w", i, e.Seq, err)
		}
		if (e.Op == OpMkdir) != (e.Op != OpDelete && e.Op != OpRename && e.Entry.Attr.IsDir()) {
			return nil, fmt.Errorf("checkpoint entry %d (sequence %d): a %s of an item with attributes %d", i, e.Seq, e.Op, e.Entry.Attr)
		}
	}
	bad := func(i int, format string, args ...any) error {
		return fmt.Errorf("checkpoint item %d: %s", i, fmt.Sprintf(format, args...))
	}
	for i, it := range cp.Items {
		e := cp.Entries[it.Src]
		if e.Op != OpPut && e.Op != OpLink && e.Op != OpMkdir {
			return nil, bad(i, "entry %d is a %s, not a put, link or mkdir", e.Seq, e.Op)
		}
		name, signedName := e.Entry.Name, e.Entry.SignedName
		signed := signedRecords(e, nil)
		if len(it.Prior) > 0 {
			if signed != nil || e.Op != OpPut || e.Entry.SignedName == "" {
				return nil, bad(i, "records inherited by an item that cannot inherit any")
			}
			for _, p := range it.Prior {
				if _, err := UnmarshalEntry(p); err != nil {
					return nil, bad(i, "inherited record: %v", err)
				}
			}
			signed = it.Prior
		}
		val, last := e.Hash(), e.Seq
		var moves []*Entry
		for _, mi := range it.Moves {
			m := cp.Entries[mi]
			if m.Op != OpRename || m.Seq <= last {
				return nil, bad(i, "move %d is a %s at sequence %d, after %d", mi, m.Op, m.Seq, last)
			}
			if name != m.Entry.Name && !strings.HasPrefix(string(name), string(m.Entry.Name)+"/") {
				return nil, bad(i, "rename %d of %s does not move %s", m.Seq, m.Entry.Name, name)
			}
			if !e.Entry.Attr.IsDir() {
				if signedName == "" {
					signedName = name
				}
				signed = append(signed[:len(signed):len(signed)], m.Marshal())
			}
			name = spindle.PathName(string(m.NewName) + strings.TrimPrefix(string(name), string(m.Entry.Name)))
			val, last = MovedValue(m.Hash(), val), m.Seq
			moves = append(moves, m)
		}
		if it.Sequence < last || it.Sequence > cp.Seq {
			return nil, bad(i, "sequence %d outside %d to %d", it.Sequence, last, cp.Seq)
		}
		n := &Node{Entry: e.Entry, src: e, moves: moves}
		n.Entry.Name, n.Entry.SignedName, n.Entry.Signed, n.Entry.Sequence = name, signedName, signed, it.Sequence
		if e.Op == OpMkdir {
			n.Kids = make(map[string]*Node)
		}
		parseControl(n)
		p, err := spindle.Parse(name)
		if err != nil || p.Path() != name || p.User() != cp.User {
			return nil, bad(i, "bad name %s", name)
		}
		if p.IsRoot() {
			if t.Root != nil || e.Op != OpMkdir {
				return nil, bad(i, "a second root, or a root that is not a directory")
			}
			t.Root = n
		} else {
			parent, _ := t.Find(p.Dir())
			if parent == nil || parent.Kids == nil {
				return nil, bad(i, "%s has no directory above it before it", name)
			}
			if parent.Kids[p.Last()] != nil {
				return nil, bad(i, "%s is in the checkpoint twice", name)
			}
			parent.Kids[p.Last()] = n
		}
		if n.Access != nil {
			t.Access[name] = n.Access
			t.accessAt[name] = last
		}
		t.Bytes += n.Entry.Size
		t.mapSet(name, val)
	}
	for _, g := range cp.Groups {
		if !access.IsGroupFile(g.Name) {
			return nil, fmt.Errorf("checkpoint group history of %s, which is not a Group file", g.Name)
		}
		var h []groupVersion
		for _, v := range g.Versions {
			gv := groupVersion{seq: v.Seq}
			if v.Src >= 0 {
				e := cp.Entries[v.Src]
				if e.Op != OpPut || e.Seq > v.Seq {
					return nil, fmt.Errorf("checkpoint group %s at %d: entry %d is not a put before it", g.Name, v.Seq, e.Seq)
				}
				grp, err := access.ParseGroup(g.Name, e.Entry.Inline)
				if err != nil {
					return nil, fmt.Errorf("checkpoint group %s at %d: %v", g.Name, v.Seq, err)
				}
				gv.g, gv.src = grp, e
			}
			h = append(h, gv)
		}
		// The last version is the file the tree holds, if any.
		n := t.Lookup(g.Name)
		if len(h) > 0 {
			last := &h[len(h)-1]
			if (n != nil && n.grp != nil) != (last.g != nil) {
				return nil, fmt.Errorf("checkpoint group %s: its history and the tree disagree on whether it exists", g.Name)
			}
			if n != nil && n.grp != nil {
				last.g = n.grp
			}
		}
		t.groups[g.Name] = h
	}
	walk2 := func(fn func(*Node)) {
		if t.Root != nil {
			Walk(t.Root, func(n *Node) bool { fn(n); return true })
		}
	}
	var missing error
	walk2(func(n *Node) {
		if n.grp != nil && missing == nil {
			if h := t.groups[n.Entry.Name]; len(h) == 0 || h[len(h)-1].g != n.grp {
				missing = fmt.Errorf("checkpoint group %s is in the tree without its history", n.Entry.Name)
			}
		}
	})
	if missing != nil {
		return nil, missing
	}
	if root := t.MapRoot(); root != cp.Root {
		return nil, fmt.Errorf("the checkpoint's items make map root %s; it says %s", root, cp.Root)
	}
	return t, nil
}

// Chunks returns the records that store the checkpoint in a log.
func (cp *Checkpoint) Chunks() [][]byte {
	b := cp.Marshal()
	n := (len(b) + chunkSize - 1) / chunkSize
	var out [][]byte
	for i := 0; i < n; i++ {
		c := append([]byte(nil), chunkMagic...)
		c = binary.BigEndian.AppendUint32(c, uint32(i))
		c = binary.BigEndian.AppendUint32(c, uint32(n))
		out = append(out, append(c, b[i*chunkSize:min(len(b), (i+1)*chunkSize)]...))
	}
	return out
}

// isChunk reports whether a log record holds part of a checkpoint.
func isChunk(rec []byte) bool {
	return strings.HasPrefix(string(rec[:min(len(rec), len(chunkMagic))]), chunkMagic)
}

// A chunker gathers the checkpoint records at the start of a log.
type chunker struct {
	data  []byte
	n     int // Chunks seen.
	total int
	done  bool
}

// add takes a record; it reports whether the record was part of the
// checkpoint. An error is Integrity.
func (c *chunker) add(rec []byte, first bool) (bool, error) {
	if !isChunk(rec) {
		if c.n > 0 && !c.done {
			return false, spindle.E(spindle.Integrity, fmt.Sprintf("checkpoint of %d records ends after %d", c.total, c.n))
		}
		return false, nil
	}
	if len(rec) < len(chunkMagic)+8 {
		return true, spindle.E(spindle.Integrity, "short checkpoint record")
	}
	i := int(binary.BigEndian.Uint32(rec[len(chunkMagic):]))
	n := int(binary.BigEndian.Uint32(rec[len(chunkMagic)+4:]))
	switch {
	case c.done || (c.n == 0 && !first):
		return true, spindle.E(spindle.Integrity, "checkpoint record inside the log, after its start")
	case i != c.n || (c.n > 0 && n != c.total) || n < 1 || int64(n)*chunkSize > maxCheckpoint:
		return true, spindle.E(spindle.Integrity, fmt.Sprintf("checkpoint record %d of %d where %d was expected", i, n, c.n))
	}
	c.total = n
	c.data = append(c.data, rec[len(chunkMagic)+8:]...)
	c.n++
	c.done = c.n == c.total
	return true, nil
}

// Checkpoint decodes the gathered checkpoint, or returns nil if there was
// none.
func (c *chunker) Checkpoint() (*Checkpoint, error) {
	if c.n == 0 {
		return nil, nil
	}
	if !c.done {
		return nil, spindle.E(spindle.Integrity, fmt.Sprintf("checkpoint of %d records ends after %d", c.total, c.n))
	}
	cp, err := UnmarshalCheckpoint(c.data)
	if err != nil {
		return nil, spindle.E(spindle.Integrity, err)
	}
	return cp, nil
}
