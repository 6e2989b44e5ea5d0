// Package witness makes a node a witness of the key cluster's
// transparency log.
//
// A client that checks the log alone is safe from a cluster that rewrites
// history only once it has seen a head; before that, and while it is
// offline, a majority of some configuration's members (old members whose
// keys were stolen after they left, say) can show it a log of their own
// making. A witness closes that gap the way Go's checksum database and
// Sigsum close it: it is an independent party that cosigns a tree head
// only if the head is signed as clients demand (a majority of the members
// of the configuration it names, followed through the log as a client
// follows them: [keylog.NewFollowingChecker]) and extends the newest head
// it has cosigned, which it stores durably before it answers. It never
// cosigns two heads that disagree, so a client that demands a witness's
// cosignature cannot be shown a fork unless the witness sees it too.
//
// A request carries what the witness needs (in the manner of C2SP's
// tlog-witness): the head, the size of the tree the requester believes
// the witness cosigned last with the consistency proof from that tree,
// and the configuration changes the witness has not seen, each proved in
// the head's tree. A witness that cosigned another tree says so
// ([StaleError]), and the requester asks again with a proof from that
// one. A head that does not extend the witness's is refused, and the two
// heads are kept as evidence in the form `spin audit -evidence` checks.
//
// A cosignature is a sumdb/note signature of the head's text by the
// witness's Ed25519 note key, named [KeyName] of the witness's ID: added
// to the head, it verifies with the witness's verifier key, and clients
// that do not know the witness ignore it.
package witness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// KeyName returns the name of the note key of the witness with the given
// ID (a node's peer ID).
func KeyName(id string) string { return keylog.WitnessKeyName(id) }

// Config configures a witness.
type Config struct {
	// Dir holds the witness's state: its note key (notekey), the newest
	// head it cosigned with the configuration changes up to it (keylog),
	// and the evidence of forks it was shown (evidence/). Required.
	Dir string
	// ID names the witness: its note key is named KeyName(ID).
	ID string
	// Boot is the note verifier key of a member of the cluster the
	// witness follows, which ties it to that cluster as a client's
	// pinned key does: the first head it cosigns must name a
	// configuration with that member, or, while the configuration
	// records none, be signed by it (see keylog.NewFollowingChecker).
	// Required; a witness with state follows the cluster it first
	// followed, whatever Boot says then.
	Boot string
}

// A Witness cosigns heads of one key cluster's log. It is safe for
// concurrent use; cosignings run one at a time.
type Witness struct {
	dir    string
	boot   string // The verifier key of the member first trusted,
	pin    string // and that member's ID.
	signer note.Signer
	vkey   string

	mu       sync.Mutex // Held across a cosigning: the check, the store, the signature.
	chk      *keylog.Checker
	advanced time.Time // When a newer head was last stored.
}

const (
	stateHeader = "spindle.dev key log witness v1"
	stateFile   = "keylog"
	keyFile     = "notekey"
	evidenceDir = "evidence"
)

// Open opens the witness whose state is in cfg.Dir, making it (and a new
// note key) if there is none. A state file that does not verify is an
// error that names it: the witness must not forget what it cosigned.
func Open(cfg Config) (*Witness, error) {
	const op spindle.Op = "witness.Open"
	if cfg.Dir == "" || cfg.ID == "" || strings.TrimSpace(cfg.Boot) == "" {
		return nil, spindle.E(op, spindle.Invalid, "a witness needs a directory, an ID and the verifier key of a member of the cluster it follows")
	}
	pin, err := keylog.MemberOfVerifierKey(strings.TrimSpace(cfg.Boot))
	if err != nil {
		return nil, spindle.E(op, err)
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, evidenceDir), 0o700); err != nil {
		return nil, spindle.E(op, spindle.IO, err)
	}
	w := &Witness{dir: cfg.Dir, boot: strings.TrimSpace(cfg.Boot), pin: pin}
	if err := w.loadKey(KeyName(cfg.ID)); err != nil {
		return nil, spindle.E(op, err)
	}
	path := filepath.Join(cfg.Dir, stateFile)
	data, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if w.chk, err = keylog.NewWitnessChecker(nil, w.boot); err != nil {
			return nil, spindle.E(op, err)
		}
	case err != nil:
		return nil, spindle.E(op, spindle.IO, err)
	default:
		if w.chk, err = w.parseState(data); err != nil {
			return nil, spindle.E(op, spindle.Damaged, fmt.Errorf("witness state %s: %w; restore it from a backup: a witness that forgets what it cosigned can be made to cosign a fork", path, err))
		}
	}
	return w, nil
}

// loadKey reads the witness's note key, or makes one.
func (w *Witness) loadKey(name string) error {
	path := filepath.Join(w.dir, keyFile)
	b, err := os.ReadFile(path)
	skey := strings.TrimSpace(string(b))
	switch {
	case errors.Is(err, os.ErrNotExist):
		if skey, _, err = note.GenerateKey(rand.Reader, name); err != nil {
			return spindle.E(spindle.Internal, err)
		}
		if err := spindle.ReplaceFile(path, []byte(skey+"\n"), 0o600, true); err != nil {
			return spindle.E(spindle.IO, fmt.Errorf("write note key: %w", err))
		}
	case err != nil:
		return spindle.E(spindle.IO, fmt.Errorf("read note key: %w", err))
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		return spindle.E(spindle.Damaged, fmt.Errorf("note key %s: %v", path, err))
	}
	if s.Name() != name {
		return spindle.E(spindle.Invalid, fmt.Sprintf("note key %s is named %q, want %q: the witness's ID changed", path, s.Name(), name))
	}
	vkey, err := keylog.VerifierKeyOf(skey)
	if err != nil {
		return spindle.E(spindle.Damaged, fmt.Errorf("note key %s: %v", path, err))
	}
	w.signer, w.vkey = s, vkey
	return nil
}

// VerifierKey returns the note verifier key that checks the witness's
// cosignatures, for a cluster's configuration to name.
func (w *Witness) VerifierKey() string { return w.vkey }

// Head returns the newest head the witness cosigned, or nil, and the
// number of configuration changes it knows.
func (w *Witness) Head() ([]byte, int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.chk.Head(), int64(len(w.chk.ConfigEntries()))
}

// Advanced returns when the witness last stored a newer head, or the
// zero time if it has not since it was opened.
func (w *Witness) Advanced() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.advanced
}

// A Request asks a witness to cosign Head.
type Request struct {
	Head []byte // A tree head, signed by the members.
	// OldSize is the size of the tree the requester believes the
	// witness cosigned last (0 for none), and Proof the consistency
	// proof that Head's tree extends it.
	OldSize int64
	Proof   tlog.TreeProof
	// Config holds the configuration changes after the first
	// ConfigAfter, each proved in Head's tree, up to the one Head
	// names; none if the witness knows them.
	ConfigAfter int64
	Config      []*keylog.Proof
}

// A StaleError says that the witness cosigned another tree than the
// request assumed, or knows other configuration changes: the requester
// asks again from Head and Config.
type StaleError struct {
	Head   []byte // The newest head the witness cosigned, or nil.
	Config int64  // The configuration changes it knows.
}

func (e *StaleError) Error() string {
	size := int64(0)
	if hi, err := keylog.ParseHead(e.Head); err == nil {
		size = hi.N
	}
	return fmt.Sprintf("the witness cosigned a tree of %d records and knows %d configuration changes: ask again from those", size, e.Config)
}

// Cosign checks req.Head and returns the witness's cosignature of it: a
// note signature line to add to the head ([AddCosignature]). The head
// must be signed by a majority of the members of the configuration it
// names and extend the newest head the witness cosigned; the witness
// stores it durably, if it is newer, before it signs. A head of the same
// tree as the newest is cosigned again; an older one is Stale. A head
// that does not extend the newest is refused as Integrity, and the two
// are kept as evidence if they prove a fork.
func (w *Witness) Cosign(ctx context.Context, req *Request) ([]byte, error) {
	const op spindle.Op = "witness.Cosign"
	hi, err := keylog.ParseHead(req.Head)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	cur, known := w.chk.Tree(), int64(len(w.chk.ConfigEntries()))
	stale := func() error {
		return spindle.E(op, spindle.Stale, &StaleError{Head: w.chk.Head(), Config: known})
	}
	switch {
	case hi.N < cur.N:
		return nil, stale()
	case hi.N > cur.N && req.OldSize != cur.N:
		return nil, stale()
	case hi.Config > known && req.ConfigAfter != known:
		return nil, stale()
	}
	chk := w.chk
	if cur.N == 0 {
		// The first head: checked on a checker of its own, kept only if
		// it is of the cluster the witness follows.
		if chk, err = keylog.NewWitnessChecker(nil, w.boot); err != nil {
			return nil, spindle.E(op, err)
		}
	}
	if _, err := chk.Update(ctx, req.Head, &given{req: req, known: known}); err != nil {
		var fe *keylog.ForkError
		if errors.As(err, &fe) {
			if file, serr := w.keepFork(fe); serr == nil {
				return nil, spindle.E(op, spindle.Integrity, fmt.Errorf("%w (evidence saved in %s)", err, file))
			}
		}
		return nil, spindle.E(op, err)
	}
	if cur.N == 0 {
		if m := chk.Members(); len(m) > 0 && m[w.pin] != w.boot {
			return nil, spindle.E(op, spindle.Integrity, fmt.Sprintf("the head is of a cluster without member %s, whose key this witness follows: it witnesses another cluster's log", w.pin))
		}
		w.chk = chk
	}
	if hi.N > cur.N || int64(len(w.chk.ConfigEntries())) > known || cur.N == 0 {
		if err := spindle.ReplaceFile(filepath.Join(w.dir, stateFile), w.state(), 0o600, true); err != nil {
			// Not cosigned; the head stays the one in memory, which a
			// restart forgets: it was signed by no witness.
			return nil, spindle.E(op, spindle.IO, fmt.Errorf("storing the head before cosigning it: %w", err))
		}
		w.advanced = time.Now()
	}
	return w.sign(req.Head)
}

// given answers the checker's questions from a request: the one
// consistency proof and the configuration changes it carries.
type given struct {
	req   *Request
	known int64
}

func (g *given) ConsistencyProof(_ context.Context, oldSize, newSize int64) (tlog.TreeProof, error) {
	if oldSize != g.req.OldSize {
		return nil, spindle.E(spindle.Invalid, fmt.Sprintf("the request proves consistency from %d records, the witness has %d", g.req.OldSize, oldSize))
	}
	return g.req.Proof, nil
}

func (g *given) ConfigProofs(_ context.Context, after int64, _ []byte) ([]*keylog.Proof, error) {
	if after != g.req.ConfigAfter {
		return nil, spindle.E(spindle.Invalid, fmt.Sprintf("the request carries configuration changes after %d, the witness has %d", g.req.ConfigAfter, after))
	}
	return g.req.Config, nil
}

// sign returns the witness's note signature line of head's text.
func (w *Witness) sign(head []byte) ([]byte, error) {
	text, err := headText(head)
	if err != nil {
		return nil, err
	}
	signed, err := note.Sign(&note.Note{Text: text}, w.signer)
	if err != nil {
		return nil, spindle.E(spindle.Internal, err)
	}
	return signed[len(text)+1:], nil
}

// headText returns the text of a signed head.
func headText(head []byte) (string, error) {
	_, err := note.Open(head, nil)
	var unverified *note.UnverifiedNoteError
	if !errors.As(err, &unverified) {
		return "", spindle.E(spindle.Invalid, fmt.Errorf("tree head: %v", err))
	}
	return unverified.Note.Text, nil
}

// AddCosignature returns head with the signature line sig added, as
// Cosign returned it. It checks only the form: clients check every
// signature against the keys they know.
func AddCosignature(head, sig []byte) ([]byte, error) {
	if _, err := headText(head); err != nil {
		return nil, err
	}
	name, _, ok := bytes.Cut(bytes.TrimPrefix(sig, []byte("— ")), []byte(" "))
	if !bytes.HasPrefix(sig, []byte("— ")) || !ok || !bytes.HasSuffix(sig, []byte("\n")) || bytes.Count(sig, []byte("\n")) != 1 {
		return nil, spindle.E(spindle.Invalid, fmt.Sprintf("a cosignature is one note signature line, not %q", sig))
	}
	if bytes.Contains(head, append([]byte("\n— "), append(name, ' ')...)) {
		return head, nil // Signed by that key already.
	}
	return append(bytes.Clone(head), sig...), nil
}

// state returns the content of the state file.
func (w *Witness) state() []byte {
	var b bytes.Buffer
	b.WriteString(stateHeader + "\n")
	if w.boot != "" {
		fmt.Fprintf(&b, "boot %s\n", w.boot)
	}
	for _, e := range w.chk.ConfigEntries() {
		fmt.Fprintf(&b, "change %d %s\n", e.Index, base64.StdEncoding.EncodeToString(e.Change))
	}
	b.WriteString("head\n")
	b.Write(w.chk.Head())
	return b.Bytes()
}

// parseState rebuilds the checker from a state file, checking every
// change and the head's signatures again.
func (w *Witness) parseState(data []byte) (*keylog.Checker, error) {
	rest, ok := bytes.CutPrefix(data, []byte(stateHeader+"\n"))
	if !ok {
		return nil, fmt.Errorf("not a witness state (want %q first)", stateHeader)
	}
	boot := ""
	var changes []keylog.ConfigEntry
	for line := 2; ; line++ {
		l, after, ok := bytes.Cut(rest, []byte("\n"))
		if !ok {
			return nil, fmt.Errorf("line %d: no head", line)
		}
		rest = after
		key, val, _ := strings.Cut(string(l), " ")
		switch key {
		case "boot":
			boot = val
		case "change":
			idx, enc, _ := strings.Cut(val, " ")
			i, err := strconv.ParseInt(idx, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: bad leaf index %q", line, idx)
			}
			ch, err := base64.StdEncoding.DecodeString(enc)
			if err != nil {
				return nil, fmt.Errorf("line %d: bad change: %v", line, err)
			}
			changes = append(changes, keylog.ConfigEntry{Index: i, Change: ch})
		case "head":
			// The cluster the witness first followed, whatever key it
			// was opened with since: a member that later left the
			// cluster may be the one a node names now.
			pin, err := keylog.MemberOfVerifierKey(boot)
			if err != nil {
				return nil, err
			}
			w.boot, w.pin = boot, pin
			cl, err := keylog.RestoreConfigLog(changes)
			if err != nil {
				return nil, err
			}
			chk, err := keylog.NewWitnessChecker(cl, boot)
			if err != nil {
				return nil, err
			}
			if len(rest) > 0 {
				if err := chk.Trust(rest); err != nil {
					return nil, err
				}
			}
			return chk, nil
		default:
			return nil, fmt.Errorf("line %d: unknown %q", line, key)
		}
	}
}

// keepFork saves the evidence of a fork in the form a client keeps it
// (spin audit -evidence checks it), and returns the file's name.
func (w *Witness) keepFork(fe *keylog.ForkError) (string, error) {
	f := fe.Fork
	var b bytes.Buffer
	fmt.Fprintf(&b, "spindle evidence v1\nkind key-fork\npeer %s\ntime %d\n", w.signer.Name(), spindle.Now())
	fmt.Fprintf(&b, "keyhead %s\nkeyhead %s\n", base64.StdEncoding.EncodeToString(f.Seen), base64.StdEncoding.EncodeToString(f.Served))
	if len(f.Proof) > 0 {
		fmt.Fprintf(&b, "prefix %s\nproof %s\n", f.Prefix, base64.StdEncoding.EncodeToString(keylog.MarshalTreeProof(f.Proof)))
	}
	fmt.Fprintf(&b, "note %s\n", strings.Join(strings.Fields("witness refused: "+fe.Why), " "))
	hi, _ := keylog.ParseHead(f.Served)
	name := filepath.Join(w.dir, evidenceDir, fmt.Sprintf("key-fork-%d-%d", hi.N, spindle.Now()))
	if err := spindle.ReplaceFile(name, b.Bytes(), 0o600, true); err != nil {
		return "", err
	}
	return name, nil
}
