package client

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

// Directory state a client can prove.
//
// Every head of a user's log that comes with an answer must be signed by
// a dir host the user's key record names (by peer ID; the record comes
// from the key cluster's transparency log, so the node a client talks
// through cannot choose it), and must not go back on the newest head the
// client has seen (see dirHeads). The head commits to a map of the whole
// tree (dirlog.MapRoot), and:
//
//   - a Lookup's entry comes with a proof that its name maps, in that
//     map, to the value its signed entries make, and the entry must be
//     the one they put (dirlog.Proved.Matches): not an older version of
//     the file, nor another file's;
//   - a NotExist comes with a proof that the name is not in the map;
//   - a WhichAccess answer proves the governing Access file, current,
//     and the absence of every Access file nearer the name.
//
// A writer signs its next entry on top of a head checked the same way, so
// a node cannot fork the log under it without signing two heads for one
// sequence number, which is evidence. Every entry answered is matched
// with the signed entry that put it, links, directories and entries
// marked incomplete included (see matchEntry). What is not proved: that a
// Glob listed every match (a map keyed by hashed names has no range
// proofs; each entry listed is still signed by its writer), and a file
// the reader may not read, which is proved present only and of which the
// client keeps only the name.

// maxHeadsVerified bounds the cache of verified head signatures.
const maxHeadsVerified = 1024

// verifyHead checks that h is signed by one of its user's dir hosts and,
// if witnessed is set (a head that proves an answer), that as many of the
// user's other dir hosts as its key record asks (spindle.User.DirQuorum)
// cosigned it. Heads verified in the last verifyTTL are not verified
// again.
func (c *Client) verifyHead(ctx context.Context, h *dirlog.Head, witnessed bool) error {
	d := sha256.Sum256(h.Marshal())
	if witnessed {
		d[0] ^= 1 // Checked for a quorum, not only for the signature.
	}
	c.mu.Lock()
	at, ok := c.headsOK[d]
	c.mu.Unlock()
	if ok && time.Since(at) < verifyTTL {
		return nil
	}
	err := c.verifyHeadWith(ctx, h, false, witnessed)
	if err != nil {
		// The record may have changed since it was cached: a dir host
		// was added. Look again once.
		err = c.verifyHeadWith(ctx, h, true, witnessed)
	}
	if err != nil {
		return err
	}
	c.mu.Lock()
	if c.headsOK == nil || len(c.headsOK) >= maxHeadsVerified {
		c.headsOK = make(map[[32]byte]time.Time)
	}
	c.headsOK[d] = time.Now()
	c.mu.Unlock()
	return nil
}

// verifyHeadWith checks h against its user's key record, looked up again
// if fresh is set, and its cosignatures too if witnessed is set.
func (c *Client) verifyHeadWith(ctx context.Context, h *dirlog.Head, fresh, witnessed bool) error {
	u, err := c.lookupUser(ctx, h.User, fresh)
	if err != nil {
		return spindle.E(h.User, spindle.Integrity, fmt.Errorf("cannot check the head of the log: %w", err))
	}
	if len(u.DirHosts) == 0 {
		// Nobody hosts the tree: it does not exist, whatever a node
		// says about it.
		return spindle.E(spindle.PathName(h.User+"/"), spindle.NotExist, ErrNoDirHost)
	}
	if err := h.Verify(dirHosts(u.DirHosts)); err != nil {
		return err
	}
	if witnessed {
		// A head signed over a map its log does not give is caught by
		// the hosts that replayed the log, even for a reader that has
		// never seen the tree.
		return h.VerifyCosigs(dirHosts(u.DirHosts), u.DirQuorum)
	}
	return nil
}

// dirHosts is a dirlog.HeadVerifier that accepts heads signed by the
// peers a key record names as dir hosts.
type dirHosts []spindle.PeerAddr

func (hosts dirHosts) VerifyHead(user spindle.UserName, host string, key, digest, sig []byte) error {
	listed := false
	for _, a := range hosts {
		if info, err := p2p.ParsePeerAddr(a); err == nil && info.ID.String() == host {
			listed = true
			break
		}
	}
	if !listed {
		return fmt.Errorf("%s is not a dir host of %s (the key record names %d)", host, user, len(hosts))
	}
	return p2p.VerifyPeerSig(host, key, digest, sig)
}

// putSeqs remembers, for entries whose proofs a client checked, the
// sequence number of the put that made them: the position that decides
// which of the writer's keys may have signed them (spindle.User.DirSeq).
// An entry's own Sequence moves on when a rename moves it, and is the
// node's word; the put's position is proved.
type putSeqs struct {
	mu      sync.Mutex
	seqs    map[[32]byte]signedPos
	anchors map[spindle.UserName]signedPos // See noteAnchors.
}

// maxPutSeqs bounds putSeqs.
const maxPutSeqs = 1 << 14

func putSeqKey(d *spindle.DirEntry) [32]byte {
	h := sha256.New()
	for _, b := range [][]byte{[]byte(d.Name), d.Packdata, d.Inline, []byte(d.Link), []byte(d.Writer)} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	var k [32]byte
	h.Sum(k[:0])
	return k
}

// note records that d, proved by pr, was put at pr's first entry.
func (p *putSeqs) note(d *spindle.DirEntry, pr *dirlog.Proved) {
	k := putSeqKey(d)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seqs == nil || len(p.seqs) >= maxPutSeqs {
		p.seqs = make(map[[32]byte]signedPos)
	}
	p.seqs[k] = entryPos(pr.Entries[0])
	p.noteAnchors(pr.Entries)
}

// signedAt returns the position at which d's writer signed it: the proved
// position and anchor of its put if d was proved, else d.Sequence, judged
// as an unanchored entry of the first format.
func (p *putSeqs) signedAt(d *spindle.DirEntry) signedPos {
	unproved := signedPos{seq: d.Sequence, legacy: true}
	if p == nil {
		return unproved
	}
	k := putSeqKey(d)
	p.mu.Lock()
	defer p.mu.Unlock()
	if s, ok := p.seqs[k]; ok {
		return s
	}
	return unproved
}

// matches checks that d is the entry pr proves and remembers its put's
// position.
func (p *putSeqs) matches(d *spindle.DirEntry, pr *dirlog.Proved) error {
	if err := pr.Matches(d); err != nil {
		return err
	}
	p.note(d, pr)
	return nil
}

// checkLookup checks the proof that comes with the answer to a Lookup of
// name: resp and err, as the node sent them.
func (r *remote) checkLookup(name spindle.PathName, resp *wire.DirLookupResponse, err error) error {
	p, perr := spindle.Parse(name)
	if perr != nil {
		return nil // The node's error says what is wrong with the name.
	}
	name = p.Path()
	kind := spindle.KindOf(err)
	var present bool
	switch {
	case err == nil && resp.Entry != nil, kind == spindle.NotDir && resp.Entry != nil:
		present = true // An entry, or a link met on the way.
	case kind == spindle.NotExist, kind == spindle.NotDir:
	default:
		return nil // A denial or a failure: nothing to prove.
	}
	if kind == spindle.NotExist {
		return checkNotExist(name, resp)
	}
	pr, perr := oneProof(name, resp)
	if perr != nil {
		return perr
	}
	if !present {
		// NotDir: a file on the way, which the name cannot be under.
		if pr.Name != name || pr.Proof.End == dirlog.EndIncluded {
			return spindle.E(name, spindle.Integrity, "node answered that it does not exist, without proof of that")
		}
		return nil
	}
	d := resp.Entry
	if pr.Name != d.Name || pr.Proof.End != dirlog.EndIncluded {
		return spindle.E(name, spindle.Integrity, fmt.Sprintf("node answered with %s and a proof of %s", d.Name, pr.Name))
	}
	return r.matchEntry(d, pr)
}

// matchEntry checks that d, an entry a node answered with pr (a verified
// proof that d's name is in the tree), is the entry the signed head holds
// at that name: every entry the client acts on, links, directories and
// entries marked incomplete included, is matched with the signed entries
// the proof carries (dirlog.Proved.Matches), so that an older genuine
// entry under the genuine proof of its name is refused.
//
// The one entry that cannot be matched is that of a file the reader may
// not read whose signed entry holds blocks or packdata (dirlog.Withholds):
// the reader may not see them, so its proof carries no signed entries and
// proves the name present only. The client then refuses to act on
// anything the node says of it: it keeps the name and that it is a file
// the reader may not read (AttrIncomplete), and clears every other field
// of d (size, time, writer, packing, sequence), which would be the node's
// word. Anything else served without signed entries, a directory or link
// (which hide nothing, and which a host proves whole whatever the reader
// may read), an Access or Group file or a whole entry, is refused.
func (r *remote) matchEntry(d *spindle.DirEntry, pr *dirlog.Proved) error {
	if len(pr.Entries) > 0 {
		return r.puts.matches(d, pr)
	}
	if d.Attr != spindle.AttrIncomplete || isRules(d.Name) {
		return spindle.E(d.Name, spindle.Integrity, "node answered with an entry and no signed entries to match it with (only a file you may not read comes without them)")
	}
	*d = spindle.DirEntry{Name: d.Name, Attr: spindle.AttrIncomplete}
	return nil
}

// checkNotExist checks the proof that name does not exist: of its absence
// or of a directory above it, with the directories above that.
func checkNotExist(name spindle.PathName, resp *wire.DirLookupResponse) error {
	if resp.Head == nil || len(resp.Proofs) == 0 {
		return spindle.E(name, spindle.Integrity, "node answered that it does not exist, without proof of that")
	}
	prs := make([]*dirlog.Proved, len(resp.Proofs))
	for i, b := range resp.Proofs {
		pr, err := dirlog.UnmarshalProved(b)
		if err != nil {
			return spindle.E(name, spindle.Integrity, err)
		}
		prs[i] = pr
	}
	pr := prs[0]
	pr.Head, pr.Above = resp.Head, prs[1:]
	if err := pr.VerifyNotExist(name); err != nil {
		return spindle.E(name, spindle.Integrity, fmt.Errorf("node answered that it does not exist, without proof of that: %w", err))
	}
	return nil
}

// oneProof decodes and verifies the one proof of a Lookup answer.
func oneProof(name spindle.PathName, resp *wire.DirLookupResponse) (*dirlog.Proved, error) {
	if resp.Head == nil || len(resp.Proofs) != 1 {
		return nil, spindle.E(name, spindle.Integrity, "node answered without a proof against a signed head (a node older than this client sends none: upgrade it)")
	}
	pr, err := dirlog.UnmarshalProved(resp.Proofs[0])
	if err != nil {
		return nil, spindle.E(name, spindle.Integrity, err)
	}
	pr.Head = resp.Head
	if err := pr.Verify(); err != nil {
		return nil, err
	}
	return pr, nil
}

// proveGlobNotExist checks a Glob's answer err, of kind NotExist: the
// directory the pattern lists (the path before its first element with a
// metacharacter), or the name a pattern without any names, does not
// exist. The answer carries the proof a Lookup of that path would (see
// checkNotExist), made from the same state as the Glob; then err stands.
//
// A node older than the proof sends none. The client then looks the path
// up, and that lookup's answer must prove it absent. As the two answers
// may come from two states of a tree that grows meanwhile, a lookup that
// finds the path returns errGlobRaced, and the Glob is asked once more
// (again set); only a node that answers NotExist again for a path its
// lookup shows is caught lying (Integrity).
// Any other error of a lookup (a denial, a failure) is returned as it is.
func (r *remote) proveGlobNotExist(ctx context.Context, pattern string, resp *wire.DirGlobResponse, err error, again bool) error {
	p, perr := spindle.Parse(spindle.PathName(pattern))
	if perr != nil {
		return err // The pattern is not one: the node's error says so.
	}
	base := p.Path()
	for i, el := range p.Elems() {
		if strings.ContainsAny(el, `*?[\`) {
			base = p.First(i).Path()
			break
		}
	}
	if resp != nil && (resp.Head != nil || len(resp.Proofs) > 0) {
		if perr := checkNotExist(base, &wire.DirLookupResponse{Head: resp.Head, Proofs: resp.Proofs}); perr != nil {
			return perr
		}
		noteProved(ctx, resp.Head)
		return err
	}
	_, lerr := r.Lookup(ctx, "", base)
	switch {
	case errors.Is(lerr, spindle.NotExist):
		return err
	case lerr != nil:
		return lerr
	case !again:
		return errGlobRaced
	}
	return spindle.E(spindle.PathName(pattern), spindle.Integrity, fmt.Sprintf("node answered twice that %s does not exist, and a lookup finds it", base))
}

// errGlobRaced says that a Glob's NotExist without proof was refuted by a
// lookup that may have seen a later state: the Glob is asked once more.
var errGlobRaced = errors.New("glob answer older than a lookup's")

// checkGlobProofs checks the proof of each entry of a Glob answer: that
// it is in the tree at its name and the entry the signed head commits to
// there (see matchEntry). (That none was left out cannot be proved.)
func (r *remote) checkGlobProofs(pattern string, resp *wire.DirGlobResponse) error {
	where := spindle.PathName(pattern)
	if len(resp.Entries) == 0 {
		return nil
	}
	if resp.Head == nil || len(resp.Proofs) != len(resp.Entries) {
		return spindle.E(where, spindle.Integrity, "node listed entries without proofs against a signed head (a node older than this client sends none: upgrade it)")
	}
	for i, d := range resp.Entries {
		if d == nil {
			return spindle.E(where, spindle.Integrity, "node answered with an empty entry")
		}
		pr, err := dirlog.UnmarshalProved(resp.Proofs[i])
		if err != nil {
			return spindle.E(where, spindle.Integrity, err)
		}
		pr.Head = resp.Head
		if pr.Name != d.Name || pr.Proof.End != dirlog.EndIncluded {
			return spindle.E(where, spindle.Integrity, fmt.Sprintf("node listed %s with a proof of %s", d.Name, pr.Name))
		}
		if err := pr.Verify(); err != nil {
			return err
		}
		if err := r.matchEntry(d, pr); err != nil {
			return err
		}
	}
	return nil
}

// checkWhichAccess checks the proof that comes with a successful
// WhichAccess answer for name.
func (r *remote) checkWhichAccess(name spindle.PathName, resp *wire.DirWhichResponse) error {
	p, err := spindle.Parse(name)
	if err != nil {
		return nil
	}
	name = p.Path()
	if resp.Head == nil || len(resp.Proofs) == 0 {
		return spindle.E(name, spindle.Integrity, "node answered which Access file governs it without a proof against a signed head (a node older than this client sends none: upgrade it)")
	}
	ap := &dirlog.AccessProved{Head: resp.Head, Name: name}
	for i, b := range resp.Proofs {
		if i == 0 && len(b) == 0 {
			continue // No Access file governs.
		}
		pr, err := dirlog.UnmarshalProved(b)
		if err != nil {
			return spindle.E(name, spindle.Integrity, err)
		}
		if i == 0 {
			ap.Found = pr
		} else {
			ap.Absent = append(ap.Absent, pr)
		}
	}
	if err := ap.Verify(); err != nil {
		return err
	}
	switch {
	case ap.Found == nil && resp.Entry != nil:
		return spindle.E(name, spindle.Integrity, fmt.Sprintf("node answered with %s and a proof that no Access file governs", resp.Entry.Name))
	case ap.Found == nil:
		return nil
	case resp.Entry == nil:
		return spindle.E(name, spindle.Integrity, "node answered that no Access file governs, with a proof of "+string(ap.Found.Name))
	}
	return r.puts.matches(resp.Entry, ap.Found)
}
