package keylog

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
)

// A ConfigProver proves the cluster's configuration changes. A member
// ([spindle.dev/keyraft.Cluster]) implements it; so does a client
// reaching a member remotely.
type ConfigProver interface {
	// ConfigProofs returns the configuration changes after the first
	// after ones, in order, each with its inclusion proof in the tree of
	// head, up to the configuration head names. It may return only the
	// first few of them (at least one while any remain): the checker
	// asks again for the rest.
	ConfigProofs(ctx context.Context, after int64, head []byte) ([]*Proof, error)
}

// A ConfigEntry is a configuration change as a leaf of the log.
type ConfigEntry struct {
	Index  int64  // Its leaf index.
	Change []byte // Its encoding (EncodeChange).
}

// A ConfigLog is a client's copy of the cluster's configuration changes,
// from the first, each checked as the members check it (signed by an
// operator, or by an admitted node operator for its own member, in
// sequence), so that it knows the members in force at every tree size
// without taking any member's word for them. It is not safe for
// concurrent use; a [Checker] guards its own.
type ConfigLog struct {
	entries []ConfigEntry
	members []map[string]string // members[s]: the members after change s; members[0] is empty.
	cfg     ConfigState         // The configuration after every change.
}

// NewConfigLog returns the log of a client that has seen no change yet.
func NewConfigLog() *ConfigLog {
	return &ConfigLog{members: []map[string]string{{}}, cfg: NewConfigState()}
}

// RestoreConfigLog rebuilds a client's config log from its entries, as
// [ConfigLog.Entries] returned them, checking each change again. Entries
// that do not follow from each other are Invalid.
func RestoreConfigLog(entries []ConfigEntry) (*ConfigLog, error) {
	l := NewConfigLog()
	for _, e := range entries {
		if err := l.add(e.Index, e.Change); err != nil {
			return nil, spindle.E(spindle.Op("keylog.RestoreConfigLog"), spindle.Invalid, err)
		}
	}
	return l, nil
}

// Seq returns the number of changes in the log.
func (l *ConfigLog) Seq() int64 { return int64(len(l.entries)) }

// Entries returns the changes, oldest first, for the client to store.
func (l *ConfigLog) Entries() []ConfigEntry { return slices.Clone(l.entries) }

// Members returns the members (note verifier keys by ID) in force after
// the first seq changes, or nil if the log has fewer.
func (l *ConfigLog) Members(seq int64) map[string]string {
	if seq < 0 || seq >= int64(len(l.members)) {
		return nil
	}
	return maps.Clone(l.members[seq])
}

// verifiersOf returns the verifiers of members' note verifier keys, which
// the configuration checked when it recorded them.
func verifiersOf(members map[string]string) note.Verifiers {
	var list []note.Verifier
	for _, id := range slices.Sorted(maps.Keys(members)) {
		if v, err := note.NewVerifier(members[id]); err == nil {
			list = append(list, v)
		}
	}
	return note.VerifierList(list...)
}

func (l *ConfigLog) clone() *ConfigLog {
	return &ConfigLog{entries: slices.Clone(l.entries), members: slices.Clone(l.members), cfg: l.cfg.Clone()}
}

// add checks the change enc, leaf index of the log, against the
// configuration so far and applies it.
func (l *ConfigLog) add(index int64, enc []byte) error {
	if n := len(l.entries); n > 0 && index <= l.entries[n-1].Index {
		return fmt.Errorf("configuration change %d is leaf %d, not after leaf %d of the one before", n+1, index, l.entries[n-1].Index)
	}
	ch, err := DecodeChange(enc)
	if err != nil {
		return err
	}
	dup, err := l.cfg.Check(ch, true)
	if err == nil && dup {
		err = fmt.Errorf("configuration change %d repeats the one before", ch.Seq)
	}
	if err != nil {
		return fmt.Errorf("configuration change at leaf %d: %w", index, err)
	}
	l.cfg.Apply(ch, enc)
	l.entries = append(l.entries, ConfigEntry{Index: index, Change: bytes.Clone(enc)})
	l.members = append(l.members, l.cfg.Members())
	return nil
}

// seqAt returns the number of changes of the log among the first n leaves.
func (l *ConfigLog) seqAt(n int64) int64 {
	i, _ := slices.BinarySearchFunc(l.entries, n, func(e ConfigEntry, n int64) int {
		switch {
		case e.Index < n:
			return -1
		case e.Index > n:
			return 1
		}
		return 0
	})
	return int64(i)
}

// NewFollowingChecker returns a checker that trusts the cluster whose
// configuration changes cl holds (an empty log for a client that trusts
// the first cluster it meets), and follows its members through the log: a
// head counts when a majority of the members of the configuration it
// names signed it, and a head naming a configuration newer than the
// client's comes with the changes in between, proved in its tree, each
// checked as the members check it. So the client is tied to no member,
// and a member that was removed cannot sign a head the client accepts.
// The checker owns cl from then on.
//
// boot is the note verifier key of the member the client first trusted
// (or "" for none). It stands for the members while the configuration
// records none: a cluster that one node bootstrapped and whose operator
// has not made the init change yet, whose heads that node signs alone.
// Once the client has accepted such a head, the head that first names
// recorded members must carry boot's signature too, so that a node cannot
// slip in an init change of its own making.
func NewFollowingChecker(cl *ConfigLog, boot string) (*Checker, error) {
	if cl == nil {
		cl = NewConfigLog()
	}
	c := &Checker{cfg: cl}
	if boot = strings.TrimSpace(boot); boot != "" {
		id, err := MemberOfVerifierKey(boot)
		if err != nil {
			return nil, spindle.E(spindle.Op("keylog.NewFollowingChecker"), err)
		}
		if _, err := note.NewVerifier(boot); err != nil {
			return nil, spindle.E(spindle.Op("keylog.NewFollowingChecker"), spindle.Invalid, fmt.Errorf("verifier key %q: %v", boot, err))
		}
		c.boot = map[string]string{id: boot}
	}
	return c, nil
}

// NewWitnessChecker returns the following checker of a witness, which
// checks heads as [NewFollowingChecker]'s does except for the witnesses'
// cosignatures: it is asked for one before the others cosign.
func NewWitnessChecker(cl *ConfigLog, boot string) (*Checker, error) {
	c, err := NewFollowingChecker(cl, boot)
	if err != nil {
		return nil, err
	}
	c.witness = true
	return c, nil
}

// ConfigEntries returns the configuration changes a following checker
// knows, for the client to store with its newest head.
func (c *Checker) ConfigEntries() []ConfigEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg == nil {
		return nil
	}
	return c.cfg.Entries()
}

// Members returns the members of the newest configuration a following
// checker knows, or nil for a checker of fixed keys.
func (c *Checker) Members() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg == nil {
		return nil
	}
	return c.cfg.Members(c.cfg.Seq())
}

// signers returns the members whose signatures a head naming
// configuration seq of cl needs: those it records or, while it records
// none, the member the client first trusted.
func (c *Checker) signers(cl *ConfigLog, seq int64) map[string]string {
	if m := cl.Members(seq); len(m) > 0 || c.boot == nil {
		return m
	}
	return c.boot
}

// verifyFollowing checks head for a following checker: it extends a copy
// of the checker's config log with the changes up to the head's
// configuration, proved in its tree (asked of prover), checks that the
// head names the configuration its tree has, and that a majority of that
// configuration's members signed it. It returns the head's tree and the
// extended log. The caller holds c.upd.
func (c *Checker) verifyFollowing(ctx context.Context, head []byte, prover TreeProver, witnesses bool) (tlog.Tree, *ConfigLog, error) {
	hi, err := ParseHead(head)
	if err != nil {
		return tlog.Tree{}, nil, err
	}
	c.mu.Lock()
	cl := c.cfg
	c.mu.Unlock()
	if hi.Config > cl.Seq() {
		cp, ok := prover.(ConfigProver)
		if !ok || prover == nil {
			return tlog.Tree{}, nil, spindle.E(spindle.Invalid, fmt.Sprintf("head names configuration %d, this client knows %d, and no prover to show the changes", hi.Config, cl.Seq()))
		}
		cl = cl.clone()
		for cl.Seq() < hi.Config {
			ps, err := cp.ConfigProofs(ctx, cl.Seq(), head)
			if err != nil {
				return tlog.Tree{}, nil, fmt.Errorf("configuration changes %d to %d: %w", cl.Seq()+1, hi.Config, err)
			}
			if len(ps) == 0 {
				return tlog.Tree{}, nil, spindle.E(spindle.Integrity, fmt.Sprintf("head names configuration %d, and the node shows no change after %d", hi.Config, cl.Seq()))
			}
			for _, p := range ps {
				if p == nil || cl.Seq() >= hi.Config {
					return tlog.Tree{}, nil, spindle.E(spindle.Integrity, fmt.Sprintf("the node shows more configuration changes than the %d the head names", hi.Config))
				}
				if p.Index < 0 || p.Index >= hi.N {
					return tlog.Tree{}, nil, spindle.E(spindle.Integrity, fmt.Sprintf("configuration change %d is leaf %d, outside the head's tree of %d", cl.Seq()+1, p.Index, hi.N))
				}
				if err := tlog.CheckRecord(p.Inclusion, hi.N, hi.Hash, p.Index, tlog.RecordHash(p.Record)); err != nil {
					return tlog.Tree{}, nil, spindle.E(spindle.Integrity, fmt.Errorf("configuration change %d is not leaf %d of the head's tree: %v", cl.Seq()+1, p.Index, err))
				}
				if err := cl.add(p.Index, p.Record); err != nil {
					return tlog.Tree{}, nil, spindle.E(spindle.Integrity, fmt.Errorf("the cluster's log holds a configuration change its members should have refused: %w", err))
				}
			}
		}
	}
	// The head's tree holds exactly the changes it names: change
	// hi.Config is in it and the next one is not.
	if got := cl.seqAt(hi.N); got != hi.Config {
		return tlog.Tree{}, nil, spindle.E(spindle.Integrity, fmt.Sprintf("head of %d leaves names configuration %d, but the log has %d changes among them", hi.N, hi.Config, got))
	}
	members := c.signers(cl, hi.Config)
	if c.boot != nil && len(cl.Members(hi.Config)) > 0 && len(c.cfg.Members(c.cfg.Seq())) == 0 && c.Head() != nil {
		// The first head with recorded members that this client sees,
		// after heads without: the member it trusted signs it too.
		if _, _, err := VerifyQuorum(head, c.boot); err != nil {
			return tlog.Tree{}, nil, spindle.E(spindle.Integrity, fmt.Errorf("the first head naming recorded members is not signed by the member this client trusted: %w", err))
		}
	}
	if _, _, err := VerifyQuorum(head, members); err != nil {
		return tlog.Tree{}, nil, err
	}
	// The witnesses of the newest configuration known, the head's or
	// the client's own: a head naming an older configuration is of a
	// log the witnesses saw then, or of a fork they did not see.
	if ws, k := cl.cfg.Witnesses(); k > 0 && witnesses {
		if _, err := VerifyWitnesses(head, ws, k); err != nil {
			return tlog.Tree{}, nil, err
		}
	}
	return hi.Tree, cl, nil
}
