package client

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"path"
	"strings"
	"time"

	"spindle.dev"
	"spindle.dev/access"
	"spindle.dev/dirlog"
)

// Answers bound to their names.
//
// The node is a stranger (see the threat model in shared/DESIGN.md): it
// may serve any signed entry, or text of its own, under any name, unless
// every entry the client uses proves that it belongs at the name asked
// for. So:
//
//   - An answer's entry must carry the name asked for; a lookup that stops
//     at a link must name a link above the name asked for.
//   - A file's writer signs its name in the packdata (package pack), and
//     readers verify that signature against SignedPath. A host sets
//     SignedName only when a rename moves an entry (it refuses one a
//     writer sets), and then serves, in DirEntry.Signed, the rename log
//     entries that moved it: each is signed by the user who renamed, and
//     the client checks that they lead, in log order, from the signed
//     name to the name it asked for.
//   - Access and Group files and links have no packdata: their text or
//     target is signed in the log entry that put them, which the host
//     serves first in DirEntry.Signed. For Access and Group files that
//     entry, and every rename that moved them, must be signed by the
//     tree's owner, with a key the key cluster's log shows the owner
//     held (writerKeys). Their text is used only once verified, and
//     inline text is never accepted for any other file.
//
// Renames carry signed records rather than re-signing what they move: a
// rename is one log entry whatever it moves, so moving a directory of
// thousands of files stays one signature and one atomic step, the
// original writer of each file stays its writer (re-signing would make
// the renamer vouch for contents it may not be able to read), and the
// records are already in the log, so trees written before this check
// verify too.
//
// What is proved is authorship at a name, not freshness: that the newest
// entry at a name is the one served, and that no nearer Access file was
// left out, is for the signed heads and map proofs of the directory state.

// verifyTTL is how long a verified entry is taken as verified again
// without checking its signatures (the keys of its signers are cached for
// keyCacheTTL too).
const verifyTTL = time.Minute

// maxVerified bounds the cache of verified entries.
const maxVerified = 4096

// verified looks up or records, under c.mu, that the entry with digest d
// was verified.
func (c *Client) wasVerified(d [32]byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.verified[d]
	return ok && time.Since(at) < verifyTTL
}

func (c *Client) noteVerified(d [32]byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.verified == nil || len(c.verified) >= maxVerified {
		c.verified = make(map[[32]byte]time.Time)
	}
	c.verified[d] = time.Now()
}

// verifiedDigest identifies what verifyEntry checks of an entry.
func verifiedDigest(e *spindle.DirEntry) [32]byte {
	h := sha256.New()
	var n [8]byte
	put := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	put([]byte(e.Name))
	put([]byte(e.SignedName))
	put([]byte(e.Link))
	put([]byte(e.Writer))
	put(e.Inline)
	put([]byte{byte(e.Attr)})
	for _, r := range e.Signed {
		put(r)
	}
	var d [32]byte
	h.Sum(d[:0])
	return d
}

// answerFor checks that e, the answer to a request about name, is name's.
func answerFor(e *spindle.DirEntry, name spindle.PathName) error {
	if e == nil {
		return spindle.E(name, spindle.Integrity, "node answered with no entry")
	}
	if e.Name != name {
		return spindle.E(name, spindle.Integrity, fmt.Sprintf("node answered with the entry of %s", e.Name))
	}
	return nil
}

// isRules reports whether name is an Access or Group file.
func isRules(name spindle.PathName) bool {
	return access.IsAccessFile(name) || access.IsGroupFile(name)
}

// verifyEntry checks that e belongs at e.Name, as the package comment above
// describes: for an Access or Group file or a link, the signed entry that
// put it; for every entry, the signed renames from the name its writer
// signed. A file's own signature is checked where its packdata is used
// (pack.NewReader, pack.Verify). Every failure is Integrity.
func (c *Client) verifyEntry(ctx context.Context, e *spindle.DirEntry) error {
	if e.Attr.IsDir() {
		return nil // Directories hold nothing a reader takes from the node.
	}
	rules := isRules(e.Name)
	link := e.Attr.IsLink()
	if !rules && !link && e.SignedName == "" && len(e.Signed) == 0 {
		if e.Inline != nil {
			return spindle.E(e.Name, spindle.Integrity, "node served inline contents for a file that is not an Access or Group file")
		}
		return nil // The file's packdata signs its name.
	}
	d := verifiedDigest(e)
	if c.wasVerified(d) {
		return nil
	}
	if err := c.verifyRecords(ctx, e, rules, link); err != nil {
		return err
	}
	c.noteVerified(d)
	return nil
}

func (c *Client) verifyRecords(ctx context.Context, e *spindle.DirEntry, rules, link bool) error {
	p, err := spindle.Parse(e.Name)
	if err != nil {
		return spindle.E(e.Name, spindle.Integrity, err)
	}
	owner := p.User()
	what := "file"
	switch {
	case rules:
		what = class(e.Name)
	case link:
		what = "link"
	}
	recs := make([]*dirlog.Entry, len(e.Signed))
	for i, b := range e.Signed {
		r, err := dirlog.UnmarshalEntry(b)
		if err != nil {
			return spindle.E(e.Name, spindle.Integrity, fmt.Errorf("signed record %d of the %s: %w", i, what, err))
		}
		if r.Tree() != owner {
			return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("signed record %d of the %s is of %s's tree", i, what, r.Tree()))
		}
		recs[i] = r
	}
	name := e.SignedPath()
	var last int64
	if rules || link {
		if len(recs) == 0 {
			return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("the %s carries no signed entry of its writer (a node older than this client sends none: upgrade it)", what))
		}
		put := recs[0]
		recs = recs[1:]
		if err := c.checkPutRecord(ctx, e, put, owner, rules, what); err != nil {
			return err
		}
		last = put.Seq
	} else if e.Inline != nil {
		return spindle.E(e.Name, spindle.Integrity, "node served inline contents for a file that is not an Access or Group file")
	}
	for _, r := range recs {
		if r.Op != dirlog.OpRename {
			return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("a record of a %s, not a rename, offered as moving the %s", r.Op, what))
		}
		if r.Seq <= last {
			return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("rename records out of log order (%d after %d)", r.Seq, last))
		}
		last = r.Seq
		if rules && r.Writer != owner {
			return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("the %s was moved by %s, not by its owner %s", what, r.Writer, owner))
		}
		rest, ok := under(name, r.Entry.Name)
		if !ok {
			return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("a rename of %s offered as moving %s", r.Entry.Name, name))
		}
		if err := c.checkSig(ctx, r); err != nil {
			return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("rename of %s to %s: %v", r.Entry.Name, r.NewName, err))
		}
		name = r.NewName + spindle.PathName(rest)
	}
	if name != e.Name {
		if name == e.SignedPath() {
			return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("the %s was signed as %s, and no signed rename moved it here", what, name))
		}
		return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("the signed renames lead to %s, not here", name))
	}
	return nil
}

// checkPutRecord checks put, the signed entry that made the Access or
// Group file or link e: signed, by the owner for rules, at e's signed name
// with e's text or target.
func (c *Client) checkPutRecord(ctx context.Context, e *spindle.DirEntry, put *dirlog.Entry, owner spindle.UserName, rules bool, what string) error {
	want := dirlog.OpLink
	if rules {
		want = dirlog.OpPut
	}
	d := &put.Entry
	switch {
	case put.Op != want:
		return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("the %s's signed entry is a %s", what, put.Op))
	case rules && put.Writer != owner:
		return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("the %s was written by %s, not by its owner %s", what, put.Writer, owner))
	case d.Name != e.SignedPath():
		return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("the %s's signed entry is of %s", what, d.Name))
	case rules && !bytes.Equal(d.Inline, e.Inline):
		return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("the %s's text differs from the text its owner signed", what))
	case d.Link != e.Link:
		return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("the %s's target %s is not the one its writer signed, %s", what, e.Link, d.Link))
	case d.Attr != e.Attr&^spindle.AttrIncomplete:
		return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("the %s's attributes differ from its signed entry", what))
	case e.Writer != "" && e.Writer != put.Writer:
		return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("the %s names writer %s, its signed entry %s", what, e.Writer, put.Writer))
	}
	if err := c.checkSig(ctx, put); err != nil {
		return spindle.E(e.Name, spindle.Integrity, fmt.Sprintf("the %s's signed entry: %v", what, err))
	}
	return nil
}

// checkSig checks a log entry's signature against its writer's keys: the
// current key, and then those held before a rotation.
func (c *Client) checkSig(ctx context.Context, r *dirlog.Entry) error {
	digest := r.SignedDigest()
	// The keys that may sign the entry at its place in its log.
	at := &spindle.DirEntry{Name: r.Entry.Name, Writer: r.Writer, Sequence: r.Seq}
	err := c.tryWriterKeys(ctx, at, entryPos(r), func(keys []spindle.PublicKey) error {
		for _, k := range keys {
			if spindle.Verify(k, digest, r.Sig) == nil {
				return nil
			}
		}
		return spindle.Integrity
	})
	if err == spindle.Integrity {
		return fmt.Errorf("signature does not verify with a key of %s", r.Writer)
	}
	return err
}

// under reports whether name is dir or lies below it, and returns the rest
// of name after dir.
func under(name, dir spindle.PathName) (string, bool) {
	rest, ok := strings.CutPrefix(string(name), string(dir))
	if !ok || rest != "" && !strings.HasPrefix(rest, "/") {
		return "", false // A sibling such as dir2, or a root, which no rename moves.
	}
	return rest, true
}

// class names an Access or Group file's kind for messages.
func class(name spindle.PathName) string {
	if access.IsAccessFile(name) {
		return "Access file"
	}
	return "Group file"
}

// rulesText returns the text of the Access or Group file e, answered for
// name, once it is verified as its owner's.
func (c *Client) rulesText(ctx context.Context, e *spindle.DirEntry, name spindle.PathName) ([]byte, error) {
	if err := answerFor(e, name); err != nil {
		return nil, err
	}
	if !isRules(e.Name) {
		return nil, spindle.E(name, spindle.Integrity, "node answered with an entry that is not an Access or Group file")
	}
	if e.Attr != spindle.AttrNone {
		return nil, spindle.E(name, spindle.Integrity, "node answered with a directory or link for an Access or Group file")
	}
	if err := c.verifyEntry(ctx, e); err != nil {
		return nil, err
	}
	return e.Inline, nil
}

// checkGoverns checks that the Access file a, answered to WhichAccess of
// name, lies in name's tree in name's directory or above it.
func checkGoverns(a *spindle.DirEntry, name spindle.PathName) error {
	if !access.IsAccessFile(a.Name) {
		return spindle.E(name, spindle.Integrity, fmt.Sprintf("node answered WhichAccess with %s, which is not an Access file", a.Name))
	}
	ap, err := spindle.Parse(a.Name)
	if err != nil {
		return spindle.E(name, spindle.Integrity, err)
	}
	p, err := spindle.Parse(name)
	if err != nil {
		return err
	}
	if !p.HasPrefix(ap.Dir()) {
		return spindle.E(name, spindle.Integrity, fmt.Sprintf("node answered WhichAccess with %s, which does not govern it", a.Name))
	}
	return nil
}

// checkGlob checks that the entries of a Glob answer match pattern.
func checkGlob(pattern string, es []*spindle.DirEntry) error {
	for _, e := range es {
		if e == nil {
			return spindle.E(spindle.PathName(pattern), spindle.Integrity, "node answered with an empty entry")
		}
		if ok, err := path.Match(pattern, string(e.Name)); err == nil && !ok {
			return spindle.E(spindle.PathName(pattern), spindle.Integrity, fmt.Sprintf("node answered with %s, which the pattern does not match", e.Name))
		}
	}
	return nil
}
