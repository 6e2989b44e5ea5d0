package client

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"spindle.dev"
	"spindle.dev/dirlog"
)

// A node answers for the directory logs it keeps, and could answer from an
// older state of a log than it once showed: hide a file that was put, bring
// back one that was removed, or show an Access file from before a reader
// was revoked. Entries are signed by their writers, so it cannot make any
// up, but a rollback needs no forgery. So the client remembers, for every
// tree it has looked at, the newest head (the log's sequence number and
// hash) it has seen, in Config.DirHeads across commands, and checks every
// head that comes with an answer against it (dirlog.CheckHead): an older
// sequence number is a rollback, another hash at the same one a fork.
// Either fails the call with an Integrity error naming both heads. Heads
// are signed by a dir host the tree's key record names (see dirproofs.go),
// so two heads for one sequence number are evidence a third party can
// check; comparing heads between readers comes with mirrors and published
// heads.

// dirHeads is the newest head a client has seen of each user's log, kept
// in a file: one line per user, "USER SEQ HASH SIGNED-HEAD ANCHOR", the
// fourth field the head as its dir host signed it, in base64 ("-", or
// absent, if it was not signed: the head a client's own append left),
// and the fifth, if the newest head is not one, the newest signed head
// that commits to a log root: the anchor a step is checked from (see
// dirstep.go).
type dirHeads struct {
	file string

	mu      sync.Mutex
	heads   map[spindle.UserName]*dirlog.Head
	anchors map[spindle.UserName]*dirlog.Head // Signed, with a log root.
	dirty   bool
}

// openDirHeads reads the heads in file; a file that does not exist is an
// empty one.
func openDirHeads(file string) (*dirHeads, error) {
	data, err := os.ReadFile(file)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, spindle.E(spindle.IO, err)
	}
	heads, anchors, err := parseDirHeads(file, data)
	if err != nil {
		return nil, err
	}
	return &dirHeads{file: file, heads: heads, anchors: anchors}, nil
}

// parseDirHeads parses the content of the heads file named file.
func parseDirHeads(file string, data []byte) (heads, anchors map[spindle.UserName]*dirlog.Head, err error) {
	heads = map[spindle.UserName]*dirlog.Head{}
	anchors = map[spindle.UserName]*dirlog.Head{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for line := 1; sc.Scan(); line++ {
		h, anchor, err := parseHeadLine(sc.Text())
		if err != nil {
			return nil, nil, spindle.E(spindle.Invalid, fmt.Errorf("%s:%d: %w", file, line, err))
		}
		heads[h.User] = h
		if anchor != nil {
			anchors[h.User] = anchor
		}
	}
	return heads, anchors, nil
}

// isAnchor reports whether h is a head a step can be checked from: signed,
// committing to a log root.
func isAnchor(h *dirlog.Head) bool { return h != nil && len(h.Sig) > 0 && h.HasLogRoot() }

func parseHeadLine(line string) (h, anchor *dirlog.Head, err error) {
	h, err = parseHeadFields(line)
	if err != nil {
		return nil, nil, err
	}
	if isAnchor(h) {
		anchor = h
	}
	if f := strings.Fields(line); len(f) == 5 {
		b, err := base64.StdEncoding.DecodeString(f[4])
		if err != nil {
			return nil, nil, fmt.Errorf("anchor head is not base64: %v", err)
		}
		a, err := dirlog.UnmarshalHead(b)
		if err != nil {
			return nil, nil, err
		}
		if a.User != h.User || a.Seq >= h.Seq || !isAnchor(a) {
			return nil, nil, fmt.Errorf("anchor head of %s at %d does not fit the line's head at %d", a.User, a.Seq, h.Seq)
		}
		anchor = a
	}
	return h, anchor, nil
}

func parseHeadFields(line string) (*dirlog.Head, error) {
	f := strings.Fields(line)
	if len(f) < 3 || len(f) > 5 {
		return nil, fmt.Errorf("want USER SEQ HASH [SIGNED-HEAD [ANCHOR]], got %q", line)
	}
	user, err := spindle.CleanUser(spindle.UserName(f[0]))
	if err != nil {
		return nil, err
	}
	seq, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || seq < 0 {
		return nil, fmt.Errorf("bad sequence number %q", f[1])
	}
	h := &dirlog.Head{User: user, Seq: seq}
	if b, err := hex.DecodeString(f[2]); err != nil || len(b) != len(h.Hash) {
		return nil, fmt.Errorf("bad hash %q", f[2])
	} else {
		copy(h.Hash[:], b)
	}
	if len(f) >= 4 && f[3] != "-" {
		// The signed head itself, kept as evidence for a later fork
		// or rollback (see evidence.go).
		b, err := base64.StdEncoding.DecodeString(f[3])
		if err != nil {
			return nil, fmt.Errorf("signed head is not base64: %v", err)
		}
		sh, err := dirlog.UnmarshalHead(b)
		if err != nil {
			return nil, err
		}
		if sh.User != h.User || sh.Seq != h.Seq || sh.Hash != h.Hash {
			return nil, fmt.Errorf("signed head of %s at %d does not match the line", sh.User, sh.Seq)
		}
		h = sh
	}
	return h, nil
}

// floor returns a copy of the newest head seen of owner's log, or nil.
func (d *dirHeads) floor(owner spindle.UserName) *dirlog.Head {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h := d.heads[owner]; h != nil {
		c := *h
		return &c
	}
	return nil
}

// anchor returns a copy of the newest signed head with a log root seen of
// owner's log, or nil: the point a step is checked from when the newest
// head is one the client's own append left, unsigned.
func (d *dirHeads) anchor(owner spindle.UserName) *dirlog.Head {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h := d.anchors[owner]; h != nil {
		c := *h
		return &c
	}
	return nil
}

// signer returns the dir host that signed the newest signed head seen of
// owner's log, or "".
func (d *dirHeads) signer(owner spindle.UserName) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h := d.heads[owner]; h != nil && len(h.Sig) > 0 {
		return h.Host
	}
	if h := d.anchors[owner]; h != nil {
		return h.Host
	}
	return ""
}

// check checks a head that came with an answer: against floor, the newest
// head seen when the call was made, for a rollback or a fork, and against
// the newest head seen now for a fork. It remembers the head if it is the
// newest.
func (d *dirHeads) check(floor, h *dirlog.Head) error {
	if floor != nil && floor.User == h.User {
		if err := dirlog.CheckHead(floor, h); err != nil {
			return err
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if a := d.anchors[h.User]; isAnchor(h) && (a == nil || h.Seq > a.Seq) {
		c := *h
		d.anchors[h.User] = &c
		d.dirty = true
	}
	seen := d.heads[h.User]
	if seen != nil && seen.Seq == h.Seq {
		if err := dirlog.CheckHead(seen, h); err != nil {
			return err // A fork.
		}
		if len(seen.Sig) == 0 && len(h.Sig) > 0 {
			// Keep the head as signed, the evidence a fork needs.
			c := *h
			d.heads[h.User] = &c
			d.dirty = true
		}
		return nil
	}
	if seen == nil || h.Seq > seen.Seq {
		c := *h
		d.heads[h.User] = &c
		d.dirty = true
	}
	return nil
}

// save writes the heads to the file if any changed.
func (d *dirHeads) save() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.dirty || d.file == "" {
		return nil
	}
	err := updateState(d.file, func(old []byte) []byte {
		// Another command may have saved newer heads since this one
		// read the file: keep the newest of each. A file that does not
		// parse is replaced.
		if on, anchors, err := parseDirHeads(d.file, old); err == nil {
			for u, h := range on {
				if mine := d.heads[u]; mine == nil || h.Seq > mine.Seq {
					d.heads[u] = h
				}
			}
			for u, a := range anchors {
				if mine := d.anchors[u]; mine == nil || a.Seq > mine.Seq {
					d.anchors[u] = a
				}
			}
		}
		var b strings.Builder
		for _, u := range slices.Sorted(maps.Keys(d.heads)) {
			h := d.heads[u]
			fmt.Fprintf(&b, "%s %d %s", h.User, h.Seq, h.Hash)
			if len(h.Sig) > 0 {
				fmt.Fprintf(&b, " %s", base64.StdEncoding.EncodeToString(h.Marshal()))
			}
			if a := d.anchors[u]; a != nil && a.Seq < h.Seq {
				if len(h.Sig) == 0 {
					b.WriteString(" -")
				}
				fmt.Fprintf(&b, " %s", base64.StdEncoding.EncodeToString(a.Marshal()))
			}
			b.WriteString("\n")
		}
		return []byte(b.String())
	})
	if err != nil {
		return err
	}
	d.dirty = false
	return nil
}

// updateState replaces one of the client's state files (its key log or
// its directory heads) with what merge makes of its current content (nil
// if there is none). Every spin command of a user saves these files, so
// the read, merge and write happen under a lock on NAME.lock that other
// commands wait for: without it, two commands saving at once could each
// drop what the other had just saved, lowering the floor against which
// later answers are checked. The file is not synced: one lost in a crash
// only lowers that floor, and syncing would slow every command.
func updateState(name string, merge func(old []byte) []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return spindle.E(spindle.IO, err)
	}
	lock, err := spindle.LockFile(name+".lock", true)
	if err != nil {
		return err
	}
	defer lock.Unlock()
	old, err := os.ReadFile(name)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return spindle.E(spindle.IO, err)
	}
	return spindle.ReplaceFile(name, merge(old), 0o600, false)
}
