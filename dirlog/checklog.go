package dirlog

import (
	"fmt"
	"strings"

	"spindle.dev"
)

// CheckLog checks a signed head against the whole log it claims to be the
// state of: the entries form a log from its start, the head names its last
// entry (sequence number and hash), and the map root the head commits to
// is the one the entries make ([MapRoot]). It checks neither the head's
// signature nor the entries' (their writers' keys are needed). A
// mismatch is Integrity, with both values as evidence.
func CheckLog(entries []*Entry, h *Head) error {
	const op spindle.Op = "dirlog.CheckLog"
	if int64(len(entries)) != h.Seq {
		return spindle.E(op, spindle.Integrity, h.User, fmt.Sprintf("the head is at sequence %d, the log has %d entries", h.Seq, len(entries)))
	}
	root, err := MapRoot(entries)
	if err != nil {
		return spindle.E(op, spindle.Integrity, h.User, err)
	}
	var last Hash
	if len(entries) > 0 {
		last = entries[len(entries)-1].Hash()
	}
	if err := headNames(op, h, last, root); err != nil {
		return err
	}
	return logRootNamed(op, h, &LogTree{}, entries)
}

// CheckLogFrom is [CheckLog] for a compacted log: it checks a signed head
// against a checkpoint and the entries after it. The checkpoint's items
// must make its map root (see [Checkpoint.Verify], which also checks
// signatures), the entries must follow it, and the head must name the
// last of them and the map root they make. A mismatch is Integrity.
func CheckLogFrom(cp *Checkpoint, tail []*Entry, h *Head) error {
	const op spindle.Op = "dirlog.CheckLog"
	if cp == nil {
		return CheckLog(tail, h)
	}
	if cp.User != h.User {
		return spindle.E(op, spindle.Invalid, h.User, "checkpoint of "+string(cp.User))
	}
	t, err := cp.Fold()
	if err != nil {
		return spindle.E(op, spindle.Integrity, h.User, err)
	}
	if got := cp.Seq + int64(len(tail)); got != h.Seq {
		return spindle.E(op, spindle.Integrity, h.User, fmt.Sprintf("the head is at sequence %d, the log has a checkpoint at %d and %d entries after it", h.Seq, cp.Seq, len(tail)))
	}
	vals := make(map[spindle.PathName]Hash)
	if t.Root != nil {
		for _, it := range cp.Items {
			e := cp.Entries[it.Src]
			name, val := e.Entry.Name, e.Hash()
			for _, mi := range it.Moves {
				m := cp.Entries[mi]
				name = spindle.PathName(string(m.NewName) + strings.TrimPrefix(string(name), string(m.Entry.Name)))
				val = MovedValue(m.Hash(), val)
			}
			vals[name] = val
		}
	}
	root, last, err := foldMap(vals, cp.Seq, cp.Hash, tail)
	if err != nil {
		return spindle.E(op, spindle.Integrity, h.User, err)
	}
	if err := headNames(op, h, last, root); err != nil {
		return err
	}
	if lt := cp.logTree(); lt != nil {
		return logRootNamed(op, h, lt, tail)
	}
	return nil // A version 1 checkpoint: the log tree before it is unknown.
}

// logRootNamed checks that head h, if it commits to a log root, names the
// root of the log tree lt extended with entries.
func logRootNamed(op spindle.Op, h *Head, lt *LogTree, entries []*Entry) error {
	if !h.HasLogRoot() {
		return nil
	}
	for _, e := range entries {
		lt.Append(e.Hash())
	}
	root, err := lt.Root(lt.Len())
	if err != nil {
		return spindle.E(op, spindle.Integrity, h.User, err)
	}
	if root != h.LogRoot {
		return spindle.E(op, spindle.Integrity, h.User, fmt.Sprintf("the log up to %d makes log root %s, the head signed by %s says %s", h.Seq, root, h.Host, h.LogRoot))
	}
	return nil
}

// headNames checks that head h names the log's last entry, of hash last,
// and the map root the log makes.
func headNames(op spindle.Op, h *Head, last, root Hash) error {
	switch {
	case last != h.Hash:
		return spindle.E(op, spindle.Integrity, h.User, fmt.Sprintf("entry %d has hash %s, the head signed by %s says %s", h.Seq, last, h.Host, h.Hash))
	case root != h.Root:
		return spindle.E(op, spindle.Integrity, h.User, fmt.Sprintf("the log up to %d makes map root %s, the head signed by %s says %s", h.Seq, root, h.Host, h.Root))
	}
	return nil
}
