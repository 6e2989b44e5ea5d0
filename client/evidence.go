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

	"spindle.dev"
	"spindle.dev/dirlog"
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

// Kinds of evidence.
const (
	EvidenceRollback = "rollback" // Heads: the newest seen, then the older one served.
	EvidenceFork     = "fork"     // Heads: two with one sequence number and different hashes or roots.
	EvidenceBadEntry = "bad-entry"
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
	Note  string        // The error the client reported, one line.
}

// Marshal encodes e as text, one field a line, heads and entry in base64.
func (e *Evidence) Marshal() []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s\nkind %s\nuser %s\npeer %s\ntime %d\n", evidenceMagic, e.Kind, e.User, e.Peer, e.Time)
	for _, h := range e.Heads {
		fmt.Fprintf(&b, "head %s\n", base64.StdEncoding.EncodeToString(h.Marshal()))
	}
	if e.Entry != nil {
		fmt.Fprintf(&b, "entry %s\n", base64.StdEncoding.EncodeToString(e.Entry.Marshal()))
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
		if key != "head" && seen[key] {
			return nil, bad(line, "second %q", key)
		}
		seen[key] = true
		switch key {
		case "kind":
			switch val {
			case EvidenceRollback, EvidenceFork, EvidenceBadEntry:
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
	for _, k := range []string{"kind", "user"} {
		if !seen[k] {
			return nil, spindle.E(op, spindle.Invalid, "evidence has no "+k)
		}
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
	name := filepath.Join(dir, fmt.Sprintf("%s-%s-%d-%x", e.Kind, e.User, seq, sum[:6]))
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
