package replica

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
)

// Quotas per peer. Config.HoldLimit bounds what all other nodes together
// may place here; Config.PeerHoldLimit bounds what each may. A copy
// another node pushes is charged to it, in bytes, until the block is
// deleted here (collected, see [Store.Forget], or trimmed), and the
// charges are kept in a journal (Config.QuotaFile), fsynced before the
// push is acknowledged, so that a restart does not give every node its
// quota again. A block is charged to one node only, the first that
// pushed it.
//
// The journal is a text file of lines "+ PEER REF BYTES" (a charge) and
// "- REF" (a block deleted). A line cut short by a crash is dropped when
// the journal is read; the journal is written afresh, with the charges
// alone, when it has grown to more than twice as many lines.

// DefaultPeerHoldLimit is the default Config.PeerHoldLimit.
const DefaultPeerHoldLimit = 4 << 30

// A charge is a block held here for another node.
type charge struct {
	peer peer.ID
	n    int64
}

// quotas are the charges of the copies other nodes pushed here.
type quotas struct {
	limit int64
	path  string // The journal; "" keeps the charges in memory.

	mu     sync.Mutex // Guards everything below; held across journal writes.
	f      *os.File
	lines  int
	byPeer map[peer.ID]int64
	byRef  map[spindle.Ref]charge
}

// openQuotas reads the journal at path, creating it if absent.
func openQuotas(path string, limit int64) (*quotas, error) {
	q := &quotas{limit: limit, path: path, byPeer: make(map[peer.ID]int64), byRef: make(map[spindle.Ref]charge)}
	if path == "" {
		return q, nil
	}
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("reading the replica quotas: %w", err)
	}
	// A last line without its newline was cut short: drop it.
	if i := bytes.LastIndexByte(data, '\n'); i+1 < len(data) {
		data = data[:i+1]
	}
	for n, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		if err := q.replay(line); err != nil {
			return nil, fmt.Errorf("replica quotas %s, line %d: %w", path, n+1, err)
		}
		q.lines++
	}
	if err := q.rewrite(); err != nil {
		return nil, err
	}
	return q, nil
}

// replay applies one line of the journal.
func (q *quotas) replay(line string) error {
	f := strings.Fields(line)
	switch {
	case len(f) == 4 && f[0] == "+":
		p, err := peer.Decode(f[1])
		if err != nil {
			return err
		}
		n, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("bad size %q", f[3])
		}
		q.add(p, spindle.Ref(f[2]), n)
	case len(f) == 2 && f[0] == "-":
		q.remove(spindle.Ref(f[1]))
	default:
		return fmt.Errorf("bad line %q", line)
	}
	return nil
}

func (q *quotas) add(p peer.ID, ref spindle.Ref, n int64) {
	if _, ok := q.byRef[ref]; ok {
		return
	}
	q.byRef[ref] = charge{p, n}
	q.byPeer[p] += n
}

func (q *quotas) remove(ref spindle.Ref) bool {
	c, ok := q.byRef[ref]
	if !ok {
		return false
	}
	delete(q.byRef, ref)
	if q.byPeer[c.peer] -= c.n; q.byPeer[c.peer] <= 0 {
		delete(q.byPeer, c.peer)
	}
	return true
}

// rewrite writes the journal afresh with the charges alone, durably, and
// opens it for appending. q.mu is held or q is not shared yet.
func (q *quotas) rewrite() error {
	if q.path == "" {
		return nil
	}
	if q.f != nil {
		q.f.Close()
		q.f = nil
	}
	var b strings.Builder
	for ref, c := range q.byRef {
		fmt.Fprintf(&b, "+ %s %s %d\n", c.peer, ref, c.n)
	}
	if err := os.MkdirAll(filepath.Dir(q.path), 0o700); err != nil {
		return fmt.Errorf("replica quotas: %w", err)
	}
	if err := spindle.ReplaceFile(q.path, []byte(b.String()), 0o600, true); err != nil {
		return fmt.Errorf("replica quotas: %w", err)
	}
	f, err := os.OpenFile(q.path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("replica quotas: %w", err)
	}
	q.f, q.lines = f, len(q.byRef)
	return nil
}

// append writes lines to the journal and syncs it. q.mu is held.
func (q *quotas) append(lines string, n int) error {
	if q.f == nil {
		return nil
	}
	if _, err := q.f.WriteString(lines); err != nil {
		return fmt.Errorf("replica quotas: %w", err)
	}
	if err := q.f.Sync(); err != nil {
		return fmt.Errorf("replica quotas: %w", err)
	}
	if q.lines += n; q.lines > 2*len(q.byRef)+1024 {
		return q.rewrite()
	}
	return nil
}

// charge charges a copy of ref, n bytes, to p, if p's quota allows it; a
// block charged already is not charged again. It fails with
// [spindle.Full] naming the quota, or with an IO error if the journal
// cannot be written.
func (q *quotas) charge(p peer.ID, ref spindle.Ref, n int64) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if _, ok := q.byRef[ref]; ok {
		return nil
	}
	if held := q.byPeer[p]; held+n > q.limit {
		return spindle.E(spindle.Full, fmt.Sprintf("block %s, %d bytes: this node holds %d bytes of blocks pushed by %s, and takes up to %d from one node", ref, n, held, p, q.limit))
	}
	q.add(p, ref, n)
	if err := q.append(fmt.Sprintf("+ %s %s %d\n", p, ref, n), 1); err != nil {
		q.remove(ref)
		return spindle.E(spindle.IO, err)
	}
	return nil
}

// release takes back the charges of refs, deleted here or never stored.
func (q *quotas) release(refs ...spindle.Ref) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	var b strings.Builder
	n := 0
	for _, ref := range refs {
		if q.remove(ref) {
			fmt.Fprintf(&b, "- %s\n", ref)
			n++
		}
	}
	if n == 0 {
		return nil
	}
	if err := q.append(b.String(), n); err != nil {
		return spindle.E(spindle.IO, err)
	}
	return nil
}

// held returns the bytes charged to p.
func (q *quotas) held(p peer.ID) int64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.byPeer[p]
}

// close closes the journal.
func (q *quotas) close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.f == nil {
		return nil
	}
	err := q.f.Close()
	q.f = nil
	return err
}
