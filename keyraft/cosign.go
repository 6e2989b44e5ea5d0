package keyraft

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
)

// Cosigned tree heads.
//
// A head that one member signs alone would tie clients to that member, and
// would let a member that the operators removed go on signing heads of a
// log of its own making. So a tree head counts only when it carries the
// signatures of a majority of the members recorded in the configuration in
// force at its tree size, which the head names (HeadInfo.Config). A member
// gathers the signatures for its current tree in rounds: it signs the head
// itself and asks the other members ([Config.Cosign]) to sign the same
// text, which each does only if its own log has that tree and that
// configuration ([Cluster.SignHead]). Lookups are proved against the
// newest cosigned head that holds the record, so a round runs only when a
// lookup, a history or Head needs a newer tree than the last round made.
//
// Clients follow the members through the log itself: the configuration
// changes (each signed by an operator) are leaves of the tree, and a head
// naming a newer configuration comes with the changes in between, proved
// against it ([Cluster.ConfigProofs], [keylog.ConfigLog],
// [keylog.NewFollowingChecker]).
// A removed member is not in the configuration of any later head, so its
// signature counts for nothing there; it would take a majority of some
// configuration's members to sign a false head.

// cosignTimeout bounds a round of cosigning.
const cosignTimeout = 5 * time.Second

// cosignGrace is how long a round that has a majority's signatures waits
// for the other members' (see cosignOnce).
const cosignGrace = 100 * time.Millisecond

// A cosignRound is one round of gathering signatures, shared by every
// caller that waits for it.
type cosignRound struct {
	done chan struct{} // Closed when the round ends.
	err  error         // Its failure, if any; set before done is closed.
}

// signHead returns the signed note of tree head h.
func signHead(s note.Signer, h keylog.HeadInfo) ([]byte, error) {
	return note.Sign(&note.Note{Text: string(keylog.FormatHead(h))}, s)
}

// SignHead signs the text of a tree head (as [keylog.FormatHead] writes it)
// for another member gathering signatures, if and only if this member's
// log has that tree and that configuration; it waits, bounded by ctx and
// the apply timeout, for its replica to apply the tree. It returns the
// signed note. Malformed text is Invalid; a tree or configuration this
// member's log does not have is Integrity; a tree it has not applied in
// time is Transient.
func (c *Cluster) SignHead(ctx context.Context, text []byte) ([]byte, error) {
	const op spindle.Op = "keyraft.SignHead"
	hi, err := keylog.ParseHeadText(text)
	if err != nil {
		return nil, spindle.E(op, err)
	}
	deadline := time.Now().Add(c.cfg.ApplyTimeout)
	for {
		c.fsm.mu.RLock()
		size := c.fsm.st.size()
		var th tlog.Hash
		var seq int64
		if hi.N <= size {
			th, err = c.fsm.st.treeHash(hi.N)
			seq = c.fsm.st.seqAt(hi.N)
		}
		c.fsm.mu.RUnlock()
		if hi.N <= size {
			if err != nil {
				return nil, spindle.E(op, spindle.Internal, err)
			}
			if th != hi.Hash || seq != hi.Config {
				return nil, spindle.E(op, spindle.Integrity, fmt.Sprintf(
					"refusing to sign a tree head of %d leaves with configuration %d: this member's log has configuration %d and another tree there", hi.N, hi.Config, seq))
			}
			h, err := signHead(c.signer, hi)
			if err != nil {
				return nil, spindle.E(op, spindle.Internal, err)
			}
			return h, nil
		}
		if time.Now().After(deadline) {
			return nil, spindle.E(op, spindle.Transient, fmt.Sprintf("this member has applied %d leaves, not the %d of the head", size, hi.N))
		}
		select {
		case <-ctx.Done():
			return nil, spindle.E(op, spindle.Transient, ctx.Err())
		case <-c.quit:
			return nil, spindle.E(op, spindle.Transient, "member shut down")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// quorumHead returns the newest cosigned head, running a round of
// cosigning first unless that head has at least minN leaves.
func (c *Cluster) quorumHead(ctx context.Context, minN int64) (keylog.HeadInfo, []byte, error) {
	if hi, h, ok, err := c.soloHead(); ok {
		return hi, h, err
	}
	c.fsm.mu.RLock()
	size := c.fsm.st.size()
	c.fsm.mu.RUnlock()
	c.cosMu.Lock()
	if c.cosHead != nil && c.cosInfo.N >= minN {
		hi, h := c.cosInfo, c.cosHead
		// Keep the heads served fresh, without making this caller
		// wait: a round in the background when the tree has grown, at
		// most every refreshInterval.
		if size > hi.N && time.Since(c.cosAt) > refreshInterval {
			c.nextRound()
		}
		c.cosMu.Unlock()
		return hi, h, nil
	}
	// Wait for a round that starts after this call, so that it covers
	// every leaf applied before it.
	r := c.nextRound()
	c.cosMu.Unlock()
	select {
	case <-r.done:
	case <-ctx.Done():
		return keylog.HeadInfo{}, nil, spindle.E(spindle.Transient, fmt.Errorf("waiting for a cosigned tree head: %w", ctx.Err()))
	}
	c.cosMu.Lock()
	defer c.cosMu.Unlock()
	if c.cosHead != nil && c.cosInfo.N >= minN {
		return c.cosInfo, c.cosHead, nil
	}
	if r.err != nil {
		return keylog.HeadInfo{}, nil, r.err
	}
	return keylog.HeadInfo{}, nil, spindle.E(spindle.Transient, fmt.Sprintf("no cosigned tree head of %d leaves yet", minN))
}

// nextRound returns the round that starts next, asking for one if none
// is asked for, and starts the goroutine that runs rounds if it is not
// running. The caller holds c.cosMu.
func (c *Cluster) nextRound() *cosignRound {
	if c.cosNext == nil {
		c.cosNext = &cosignRound{done: make(chan struct{})}
	}
	if !c.cosRunning {
		c.cosRunning = true
		go c.cosignRounds()
	}
	return c.cosNext
}

// refreshInterval is how often a member with cosigned heads starts a round
// to bring the head it serves up to its current tree.
const refreshInterval = 250 * time.Millisecond

// soloHead returns the head of this member's current tree signed by this
// member alone, when that is all a head needs or can get: no members
// recorded (a cluster set up without an init change, as in tests), no way
// to reach the others (Config.Cosign nil), or this member the only one.
// It signs each tree once. ok is false when the head needs others.
func (c *Cluster) soloHead() (hi keylog.HeadInfo, head []byte, ok bool, err error) {
	c.fsm.mu.RLock()
	st := c.fsm.st
	self, nm := st.cfg.IsMember(c.cfg.ID), st.cfg.NumMembers()
	_, witnesses := st.cfg.Witnesses()
	if c.cfg.Cosign != nil && nm > 0 && !(self && nm == 1) || witnesses > 0 {
		c.fsm.mu.RUnlock()
		return keylog.HeadInfo{}, nil, false, nil
	}
	n := st.size()
	th, err := st.treeHash(n)
	hi = keylog.HeadInfo{Tree: tlog.Tree{N: n, Hash: th}, Config: st.cfg.Seq()}
	c.fsm.mu.RUnlock()
	if err != nil {
		return keylog.HeadInfo{}, nil, true, spindle.E(spindle.Internal, err)
	}
	c.cosMu.Lock()
	defer c.cosMu.Unlock()
	if c.cosHead != nil && c.cosInfo == hi {
		return hi, c.cosHead, true, nil
	}
	head, err = signHead(c.signer, hi)
	if err != nil {
		return keylog.HeadInfo{}, nil, true, spindle.E(spindle.Internal, err)
	}
	c.cosInfo, c.cosHead = hi, head
	return hi, head, true, nil
}

// cosignRounds runs the rounds callers ask for, one at a time, until none
// is waiting.
func (c *Cluster) cosignRounds() {
	for {
		c.cosMu.Lock()
		r := c.cosNext
		c.cosNext = nil
		if r == nil {
			c.cosRunning = false
			c.cosMu.Unlock()
			return
		}
		c.cosMu.Unlock()
		r.err = c.cosignOnce()
		c.cosMu.Lock()
		c.cosAt = time.Now()
		c.cosMu.Unlock()
		close(r.done)
	}
}

// cosignOnce gathers a majority's signatures on the head of this member's
// current tree and makes it the newest cosigned head.
func (c *Cluster) cosignOnce() error {
	ctx, cancel := context.WithTimeout(context.Background(), cosignTimeout)
	defer cancel()
	go func() {
		select {
		case <-c.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	c.fsm.mu.RLock()
	st := c.fsm.st
	n := st.size()
	th, err := st.treeHash(n)
	hi := keylog.HeadInfo{Tree: tlog.Tree{N: n, Hash: th}, Config: st.cfg.Seq()}
	members := st.cfg.Members()
	c.fsm.mu.RUnlock()
	if err != nil {
		return spindle.E(spindle.Internal, err)
	}
	own, err := signHead(c.signer, hi)
	if err != nil {
		return spindle.E(spindle.Internal, err)
	}
	text := keylog.FormatHead(hi)
	_, self := members[c.cfg.ID]
	if len(members) == 0 || c.cfg.Cosign == nil || (self && len(members) == 1) {
		// See soloHead.
		head, err := c.witnessed(ctx, hi, own)
		if err != nil {
			return err
		}
		c.setCosigned(hi, head)
		return nil
	}
	need := len(members)/2 + 1
	var lines [][]byte
	got := 0
	if self {
		lines = append(lines, own[len(text)+1:])
		got++
	}
	type answer struct {
		id   string
		line []byte
		err  error
	}
	answers := make(chan answer, len(members))
	asked := 0
	for id, vkey := range members {
		if id == c.cfg.ID {
			continue
		}
		asked++
		go func() {
			line, err := c.askCosign(ctx, id, vkey, text)
			answers <- answer{id, line, err}
		}()
	}
	var errs []error
	for ; asked > 0 && got < need; asked-- {
		a := <-answers
		if a.err != nil {
			errs = append(errs, fmt.Errorf("member %s: %w", a.id, a.err))
			continue
		}
		lines = append(lines, a.line)
		got++
	}
	// The others' signatures too, if they come at once: a client that
	// trusted only the member that started the cluster takes the first
	// head naming members only if that member signed it (see signers),
	// and a majority may well be the others.
	if got >= need && asked > 0 {
		grace := time.NewTimer(cosignGrace)
	more:
		for ; asked > 0; asked-- {
			select {
			case a := <-answers:
				if a.err == nil {
					lines = append(lines, a.line)
					got++
				}
			case <-grace.C:
				break more
			}
		}
		grace.Stop()
	}
	if got < need {
		err := spindle.E(spindle.Transient, fmt.Errorf("tree head of %d leaves: %d of the %d members signed, %d needed: %w", n, got, len(members), need, errors.Join(errs...)))
		c.log.Warn("could not cosign the key log's tree head", "err", err)
		return err
	}
	head := append(bytes.Clone(text), '\n')
	for _, l := range lines {
		head = append(head, l...)
	}
	if head, err = c.witnessed(ctx, hi, head); err != nil {
		return err
	}
	c.setCosigned(hi, head)
	return nil
}

// askCosign asks member id to sign text and returns its signature line,
// checked against the member's verifier key vkey.
func (c *Cluster) askCosign(ctx context.Context, id, vkey string, text []byte) ([]byte, error) {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, err
	}
	signed, err := c.cfg.Cosign(ctx, id, text)
	if err != nil {
		return nil, err
	}
	n, err := note.Open(signed, note.VerifierList(v))
	if err != nil {
		return nil, fmt.Errorf("its signed head: %v", err)
	}
	if n.Text != string(text) {
		return nil, errors.New("it signed another text")
	}
	s := n.Sigs[0]
	return fmt.Appendf(nil, "— %s %s\n", s.Name, s.Base64), nil
}

// setCosigned makes head the newest cosigned head if it is newer.
func (c *Cluster) setCosigned(hi keylog.HeadInfo, head []byte) {
	c.cosMu.Lock()
	defer c.cosMu.Unlock()
	if c.cosHead == nil || hi.N > c.cosInfo.N || (hi.N == c.cosInfo.N && len(head) > len(c.cosHead)) {
		c.cosInfo, c.cosHead = hi, head
	}
}
