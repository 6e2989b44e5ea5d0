package keyraft

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// Command types in the Raft log. The numbers are part of the stored format.
const (
	cmdPut   byte = 1 // Followed by EncodeRecord of the record.
	cmdBatch byte = 2 // Followed by a batch of records; see encodeBatch.
)

// snapshotMagic starts an encoded snapshot.
const snapshotMagic = "SPKS\x01"

// fsm is the Raft state machine: the state behind a lock. Raft calls Apply,
// Snapshot and Restore from one goroutine; readers take the read lock.
type fsm struct {
	mu sync.RWMutex
	st *state
}

var _ raft.FSM = (*fsm)(nil)

func newFSM() *fsm {
	st := newState()
	st.sigs = new(sigCache)
	return &fsm{st: st}
}

// applied is the response of a successful Apply.
type applied struct {
	index int64 // Leaf index of the record; -1 when the request repeated the current record.
}

// Apply decodes a command, checks it against the state exactly as the
// leader did before proposing it, and applies it. A refused command leaves
// the state unchanged and its error is the response, so every member that
// replays the log refuses it too.
func (f *fsm) Apply(l *raft.Log) any {
	const op spindle.Op = "keyraft.Apply"
	if len(l.Data) == 0 {
		return spindle.E(op, spindle.Invalid, fmt.Sprintf("empty command at raft index %d", l.Index))
	}
	switch l.Data[0] {
	case cmdPut:
		enc := bytes.Clone(l.Data[1:])
		u, err := keylog.DecodeRecord(enc)
		if err != nil {
			return spindle.E(op, err)
		}
		return f.applyOne(op, u, enc, nil)
	case cmdBatch:
		items, err := decodeBatch(l.Data)
		if err != nil {
			return spindle.E(op, fmt.Errorf("raft index %d: %w", l.Index, err))
		}
		f.preverify(items)
		res := make(batchResult, len(items))
		for i, it := range items {
			if it.ch != nil {
				res[i] = f.applyChange(op, it.ch)
			} else {
				res[i] = f.applyOne(op, it.u, it.enc, it.grant)
			}
		}
		return res
	}
	return spindle.E(op, spindle.Invalid, fmt.Sprintf("unknown command %d at raft index %d", l.Data[0], l.Index))
}

// preverify verifies the record signatures of a batch in parallel, one
// goroutine a CPU, and notes those that verify in the state's signature
// memo, before Apply checks and applies the batch's items in order, each
// against the state its predecessors left. The check itself is unchanged:
// it verifies every record's signature under the key the state then
// requires, and takes the memo's word only for that very key and record,
// so a record whose signer is changed by an earlier item of the same batch
// (a rotation, a base user registered) is verified again, in order. The
// outcome of every check is the same as without preverify, on every
// member; preverify only spreads the verifying over the CPUs.
//
// A follower cannot skip the verification on the leader's word: members
// are run by different operators, and a leader that lies would then have
// every member apply records it forged.
func (f *fsm) preverify(items []decodedItem) {
	workers := min(runtime.GOMAXPROCS(0), len(items))
	if workers < 2 {
		return
	}
	type job struct {
		key spindle.PublicKey
		it  *decodedItem
	}
	jobs := make([]job, 0, len(items))
	f.mu.RLock()
	for i := range items {
		it := &items[i]
		if it.u == nil {
			continue
		}
		if key, ok := f.st.signerOf(it.u); ok && !f.st.sigs.verified(key, it.enc) {
			jobs = append(jobs, job{key, it})
		}
	}
	sigs := f.st.sigs
	f.mu.RUnlock()
	if len(jobs) < 2 {
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, len(jobs)) {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(jobs)) {
					return
				}
				j := jobs[i]
				if spindle.Verify(j.key, keylog.SigningDigest(j.it.u), j.it.u.Signature) == nil {
					sigs.add(j.key, j.it.enc)
				}
			}
		})
	}
	wg.Wait()
}

// applyOne checks one record, whose encoding is enc, and adds it to the
// state, returning an applied or the error that refused it.
func (f *fsm) applyOne(op spindle.Op, u *spindle.User, enc []byte, grant spindle.Signature) any {
	// Only Apply and Restore change the state and raft never runs them
	// concurrently, so the check may run under the read lock.
	f.mu.RLock()
	dup, err := f.st.checkFormed(u, enc, grant, true)
	f.mu.RUnlock()
	if err != nil {
		return spindle.E(op, err)
	}
	if dup {
		return applied{index: -1}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.st.add(u, enc); err != nil {
		return spindle.E(op, err)
	}
	return applied{index: f.st.size() - 1}
}

// applyChange checks one config change and applies it.
func (f *fsm) applyChange(op spindle.Op, ch *keylog.Change) any {
	f.mu.RLock()
	dup, err := f.st.checkChange(ch, true)
	f.mu.RUnlock()
	if err != nil {
		return spindle.E(op, err)
	}
	if dup {
		return applied{index: -1}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.st.addChange(ch); err != nil {
		return spindle.E(op, err)
	}
	return applied{index: f.st.size() - 1}
}

// Snapshot captures the records accepted so far. The entries are never
// changed once added, so the snapshot shares them.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	n := f.st.size()
	th, err := f.st.treeHash(n)
	if err != nil {
		return nil, spindle.E(spindle.Op("keyraft.Snapshot"), spindle.Internal, err)
	}
	return &snapshot{entries: f.st.entries[:n:n], tree: th}, nil
}

// Restore replaces the state with the one in a snapshot.
func (f *fsm) Restore(rc io.ReadCloser) error {
	const op spindle.Op = "keyraft.Restore"
	defer rc.Close()
	st, err := decodeSnapshot(rc)
	if err != nil {
		return spindle.E(op, err)
	}
	f.mu.Lock()
	st.sigs = f.st.sigs
	f.st = st
	f.mu.Unlock()
	return nil
}

type snapshot struct {
	entries []entry
	tree    tlog.Hash
}

// Persist writes the snapshot: the magic, the record count, each encoded
// record prefixed by its length, and the tree hash over them. The encoding
// depends only on the records, so equal states give equal snapshots.
func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	w := bufio.NewWriter(sink)
	err := encodeSnapshot(w, s.entries, s.tree)
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		sink.Cancel()
		return spindle.E(spindle.Op("keyraft.Persist"), spindle.IO, err)
	}
	return sink.Close()
}

func (s *snapshot) Release() {}

func encodeSnapshot(w io.Writer, entries []entry, tree tlog.Hash) error {
	b := []byte(snapshotMagic)
	b = binary.AppendUvarint(b, uint64(len(entries)))
	if _, err := w.Write(b); err != nil {
		return err
	}
	for _, e := range entries {
		if _, err := w.Write(binary.AppendUvarint(b[:0], uint64(len(e.enc)))); err != nil {
			return err
		}
		if _, err := w.Write(e.enc); err != nil {
			return err
		}
	}
	_, err := w.Write(tree[:])
	return err
}

// decodeSnapshot reads a snapshot written by encodeSnapshot and rebuilds the
// state by replaying its records through the policy (without signature
// checks: each record was verified when it was first accepted), then checks
// the tree hash. A malformed snapshot is Invalid; one whose records do not
// hash to its tree is Integrity.
func decodeSnapshot(r io.Reader) (*state, error) {
	br := bufio.NewReader(r)
	magic := make([]byte, len(snapshotMagic))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != snapshotMagic {
		return nil, spindle.E(spindle.Invalid, "malformed snapshot: bad magic")
	}
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, spindle.E(spindle.Invalid, fmt.Errorf("malformed snapshot: record count: %v", err))
	}
	st := newState()
	for i := uint64(0); i < n; i++ {
		size, err := binary.ReadUvarint(br)
		if err != nil {
			return nil, spindle.E(spindle.Invalid, fmt.Errorf("malformed snapshot: record %d: %v", i, err))
		}
		if size > keylog.MaxRecordSize {
			return nil, spindle.E(spindle.Invalid, fmt.Sprintf("malformed snapshot: record %d has %d bytes", i, size))
		}
		enc := make([]byte, size)
		if _, err := io.ReadFull(br, enc); err != nil {
			return nil, spindle.E(spindle.Invalid, fmt.Errorf("malformed snapshot: record %d: %v", i, err))
		}
		if keylog.IsChange(enc) {
			ch, err := keylog.DecodeChange(enc)
			if err != nil {
				return nil, spindle.E(fmt.Errorf("snapshot config change %d: %w", i, err))
			}
			dup, err := st.checkChange(ch, false)
			if err == nil && dup {
				err = errors.New("change repeats the last one")
			}
			if err != nil {
				return nil, spindle.E(spindle.Invalid, fmt.Errorf("snapshot config change %d does not follow from those before it: %w", i, err))
			}
			if err := st.addChange(ch); err != nil {
				return nil, err
			}
			continue
		}
		u, err := keylog.DecodeRecord(enc)
		if err != nil {
			return nil, spindle.E(fmt.Errorf("snapshot record %d: %w", i, err))
		}
		dup, err := st.checkFormed(u, enc, nil, false)
		if err == nil && dup {
			err = errors.New("record repeats the current one")
		}
		if err != nil {
			return nil, spindle.E(spindle.Invalid, fmt.Errorf("snapshot record %d does not follow from those before it: %w", i, err))
		}
		if err := st.add(u, enc); err != nil {
			return nil, err
		}
	}
	var want tlog.Hash
	if _, err := io.ReadFull(br, want[:]); err != nil {
		return nil, spindle.E(spindle.Invalid, "malformed snapshot: no tree hash")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		return nil, spindle.E(spindle.Invalid, "malformed snapshot: trailing bytes")
	}
	got, err := st.treeHash(st.size())
	if err != nil {
		return nil, spindle.E(spindle.Internal, err)
	}
	if got != want {
		return nil, spindle.E(spindle.Integrity, fmt.Sprintf("snapshot of %d records hashes to %v, not %v", st.size(), got, want))
	}
	return st, nil
}
