package client

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/keyraft/keylog"
)

// Evidence of a dir host's misbehaviour.
//
// When a client catches a host going back on a head (a rollback), two
// validly signed heads with one sequence number (a fork), or an entry whose
// signature does not verify, it saves what it saw in a file under
// Config.Evidence, so that it can be shown to others: the signed heads, or
// the bad entry with the head that covered it. Anyone can check such a
// file against the user's key record (Client.VerifyEvidence, spin audit
// -evidence FILE). A fork and a bad entry are proved by the file alone; a
// rollback proves only that both heads were signed by dir hosts of the
// user, since an old head stays validly signed: that the older was served
// after the newer was seen is the reporter's word.
//
// A fork of the key cluster's log (two heads signed by its members that
// cannot both be of one append-only log, see keylog.Fork) is kept the same
// way, as a key-fork: the two signed heads, and for heads of different
// sizes the prefix hash and consistency proof that show the larger log
// does not start with the smaller. It is checked against the cluster's
// members as the verifying client follows them.

// Kinds of evidence.
const (
	EvidenceRollback = "rollback" // Heads: the newest seen, then the older one served.
	EvidenceFork     = "fork"     // Heads: two with one sequence number and different hashes or roots.
	EvidenceBadEntry = "bad-entry"
	EvidenceKeyFork  = "key-fork" // The key cluster's log: Fork.
)

const evidenceMagic = "spindle evidence v1"

// maxEvidence bounds an evidence file: two heads, or one entry and a head.
const maxEvidence = dirlog.MaxEntrySize*4/3 + 1<<16

// Evidence is what a client saw that shows a dir host misbehaved.
type Evidence struct {
	Kind  string
	User  spindle.UserName // Whose log.
	Peer  string           // The peer that served the offending answer.
	Time  spindle.Time     // When the client saw it.
	Heads []*dirlog.Head
	Entry *dirlog.Entry // For EvidenceBadEntry.
	Fork  *keylog.Fork  // For EvidenceKeyFork; User is then empty.
	Note  string        // The error the client reported, one line.
}

// Marshal encodes e as text, one field a line, heads and entry in base64.
func (e *Evidence) Marshal() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nkind %s\n", evidenceMagic, e.Kind)
	if e.User != "" {
		fmt.Fprintf(&b, "user %s\n", e.User)
	}
	fmt.Fprintf(&b, "peer %s\ntime %d\n", e.Peer, e.Time)
	for _, h := range e.Heads {
		fmt.Fprintf(&b, "head %s\n", base64.StdEncoding.EncodeToString(h.Marshal()))
	}
	if e.Entry != nil {
		fmt.Fprintf(&b, "entry %s\n", base64.StdEncoding.EncodeToString(e.Entry.Marshal()))
	}
	if f := e.Fork; f != nil {
		fmt.Fprintf(&b, "keyhead %s\nkeyhead %s\n", base64.StdEncoding.EncodeToString(f.Seen), base64.StdEncoding.EncodeToString(f.Served))
		if len(f.Proof) > 0 {
			fmt.Fprintf(&b, "prefix %s\nproof %s\n", f.Prefix, base64.StdEncoding.EncodeToString(keylog.MarshalTreeProof(f.Proof)))
		}
	}
	if e.Note != "" {
		fmt.Fprintf(&b, "note %s\n", oneLine(e.Note))
	}
	return b.Bytes()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// UnmarshalEvidence decodes an evidence file. It checks the structure, not
// the signatures (see Client.VerifyEvidence). Errors are Invalid and name
// the line.
func UnmarshalEvidence(data []byte) (*Evidence, error) {
	const op spindle.Op = "client.UnmarshalEvidence"
	if len(data) > maxEvidence {
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("evidence of %d bytes, limit %d", len(data), maxEvidence))
	}
	bad := func(line int, format string, args ...any) error {
		return spindle.E(op, spindle.Invalid, fmt.Sprintf("evidence line %d: "+format, append([]any{line}, args...)...))
	}
	e := &Evidence{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, maxEvidence)
	seen := map[string]bool{}
	var prefix *tlog.Hash
	var proof tlog.TreeProof
	line := 0
	for sc.Scan() {
		line++
		text := sc.Text()
		if line == 1 {
			if text != evidenceMagic {
				return nil, bad(line, "not a Spindle evidence file (want %q first)", evidenceMagic)
			}
			continue
		}
		key, val, _ := strings.Cut(text, " ")
		if key != "head" && key != "keyhead" && seen[key] {
			return nil, bad(line, "second %q", key)
		}
		seen[key] = true
		switch key {
		case "kind":
			switch val {
			case EvidenceRollback, EvidenceFork, EvidenceBadEntry, EvidenceKeyFork:
			default:
				return nil, bad(line, "unknown kind %q", val)
			}
			e.Kind = val
		case "user":
			u, err := spindle.CleanUser(spindle.UserName(val))
			if err != nil {
				return nil, bad(line, "%v", err)
			}
			e.User = u
		case "peer":
			e.Peer = val
		case "time":
			t, err := strconv.ParseInt(val, 10, 64)
			if err != nil {
				return nil, bad(line, "bad time %q", val)
			}
			e.Time = spindle.Time(t)
		case "head":
			if len(e.Heads) == 2 {
				return nil, bad(line, "more than two heads")
			}
			b, err := base64.StdEncoding.DecodeString(val)
			if err != nil {
				return nil, bad(line, "head is not base64: %v", err)
			}
			h, err := dirlog.UnmarshalHead(b)
			if err != nil {
				return nil, bad(line, "%v", err)
			}
			e.Heads = append(e.Heads, h)
		case "entry":
			b, err := base64.StdEncoding.DecodeString(val)
			if err != nil {
				return nil, bad(line, "entry is not base64: %v", err)
			}
			en, err := dirlog.UnmarshalEntry(b)
			if err != nil {
				return nil, bad(line, "%v", err)
			}
			e.Entry = en
		case "keyhead":
			b, err := base64.StdEncoding.DecodeString(val)
			if err != nil {
				return nil, bad(line, "key head is not base64: %v", err)
			}
			if e.Fork == nil {
				e.Fork = &keylog.Fork{}
			}
			switch {
			case e.Fork.Seen == nil:
				e.Fork.Seen = b
			case e.Fork.Served == nil:
				e.Fork.Served = b
			default:
				return nil, bad(line, "more than two key heads")
			}
		case "prefix":
			h, err := tlog.ParseHash(val)
			if err != nil {
				return nil, bad(line, "bad prefix hash %q", val)
			}
			prefix = &h
		case "proof":
			b, err := base64.StdEncoding.DecodeString(val)
			if err != nil {
				return nil, bad(line, "proof is not base64: %v", err)
			}
			p, err := keylog.UnmarshalTreeProof(b)
			if err != nil {
				return nil, bad(line, "%v", err)
			}
			proof = p
		case "note":
			e.Note = val
		default:
			return nil, bad(line, "unknown field %q", key)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("evidence: %w", err))
	}
	if line == 0 {
		return nil, spindle.E(op, spindle.Invalid, "evidence file is empty")
	}
	if !seen["kind"] {
		return nil, spindle.E(op, spindle.Invalid, "evidence has no kind")
	}
	if !seen["user"] && e.Kind != EvidenceKeyFork {
		return nil, spindle.E(op, spindle.Invalid, "evidence has no user")
	}
	if (prefix == nil) != (proof == nil) {
		return nil, spindle.E(op, spindle.Invalid, "evidence has a prefix hash without a proof, or a proof without one")
	}
	if prefix != nil {
		if e.Fork == nil {
			return nil, spindle.E(op, spindle.Invalid, "evidence has a prefix hash and proof but no key heads")
		}
		e.Fork.Prefix, e.Fork.Proof = *prefix, proof
	}
	for _, h := range e.Heads {
		if h.User != e.User {
			return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("evidence about %s holds a head of %s", e.User, h.User))
		}
	}
	switch {
	case (e.Kind == EvidenceRollback || e.Kind == EvidenceFork) && len(e.Heads) != 2:
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("%s evidence needs two heads, has %d", e.Kind, len(e.Heads)))
	case e.Kind == EvidenceBadEntry && e.Entry == nil:
		return nil, spindle.E(op, spindle.Invalid, "bad-entry evidence has no entry")
	case e.Kind == EvidenceKeyFork && (e.Fork == nil || e.Fork.Served == nil):
		return nil, spindle.E(op, spindle.Invalid, "key-fork evidence needs two key heads")
	case e.Kind != EvidenceKeyFork && e.Fork != nil:
		return nil, spindle.E(op, spindle.Invalid, e.Kind+" evidence holds key heads")
	case e.Kind == EvidenceBadEntry && e.Entry.Tree() != e.User:
		return nil, spindle.E(op, spindle.Invalid, fmt.Sprintf("bad-entry evidence about %s holds an entry of %s", e.User, e.Entry.Tree()))
	}
	return e, nil
}

// saveEvidence writes e in dir as KIND-USER-SEQ-HASH, named by its
// content so that the same evidence found twice is one file, and returns
// the file's name.
func saveEvidence(dir string, e *Evidence) (string, error) {
	data := e.Marshal()
	sum := sha256.Sum256(data)
	var seq int64
	if len(e.Heads) > 0 {
		seq = e.Heads[len(e.Heads)-1].Seq
	}
	if e.Entry != nil {
		seq = e.Entry.Seq
	}
	if e.Fork != nil {
		if hi, err := keylog.ParseHead(e.Fork.Served); err == nil {
			seq = hi.N
		}
	}
	who := string(e.User)
	if who == "" {
		who = "cluster"
	}
	name := filepath.Join(dir, fmt.Sprintf("%s-%s-%d-%x", e.Kind, who, seq, sum[:6]))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", spindle.E(spindle.IO, err)
	}
	if err := spindle.ReplaceFile(name, data, 0o600, true); err != nil {
		return "", err
	}
	return name, nil
}

// headEvidence makes the evidence of a head refused by dirlog.CheckHead
// (err), seen the newest head seen and got the one peer served, or nil if
// either is unsigned (then there is nothing to show others).
func headEvidence(err error, seen, got *dirlog.Head, peer string) *Evidence {
	if seen == nil || got == nil || len(seen.Sig) == 0 || len(got.Sig) == 0 || !errors.Is(err, spindle.Integrity) {
		return nil
	}
	kind := EvidenceFork
	if got.Seq < seen.Seq {
		kind = EvidenceRollback
	}
	return &Evidence{Kind: kind, User: got.User, Peer: peer, Time: spindle.Now(), Heads: []*dirlog.Head{seen, got}, Note: err.Error()}
}
