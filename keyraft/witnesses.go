package keyraft

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"golang.org/x/mod/sumdb/note"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/keyraft/witness"
)

// Witnesses. When the configuration names witnesses and a quorum of
// them (keylog.ChangeAddWitness, ChangeWitnessQuorum), clients take a
// head only with that many witnesses' cosignatures, so a member gathers
// them in each round, after the members' signatures: it asks every
// witness at once, with the consistency proof from the tree the witness
// cosigned last and the configuration changes it lacks (see package
// keyraft/witness), and waits for the quorum. A witness that is down
// slows nothing while the others make the quorum; one that says it has
// another tree (witness.StaleError) is asked again from that one.

// A witnessView is what a member last learnt a witness has cosigned.
type witnessView struct {
	size, config int64
}

// A WitnessSeen is what a member last heard from a witness: the size of
// the tree it cosigned for this member last, and when; the error of the
// last request, if it failed.
type WitnessSeen struct {
	Size int64
	At   time.Time
	Err  string
}

// seen records the outcome of a request to witness id.
func (c *Cluster) seen(id string, size int64, err error) {
	c.witMu.Lock()
	defer c.witMu.Unlock()
	ws := c.witSeen[id]
	if err != nil {
		ws.Err = err.Error()
	} else {
		ws = WitnessSeen{Size: size, At: time.Now()}
	}
	c.witSeen[id] = ws
}

// WitnessesSeen returns what this member last heard from each witness,
// by ID.
func (c *Cluster) WitnessesSeen() map[string]WitnessSeen {
	c.witMu.Lock()
	defer c.witMu.Unlock()
	return maps.Clone(c.witSeen)
}

// witnessed returns head, the members' cosigned head of tree hi, with
// the cosignatures of a quorum of the witnesses the configuration names
// added; head itself if it names none.
func (c *Cluster) witnessed(ctx context.Context, hi keylog.HeadInfo, head []byte) ([]byte, error) {
	c.fsm.mu.RLock()
	ws, k := c.fsm.st.cfg.Witnesses()
	c.fsm.mu.RUnlock()
	if k == 0 {
		return head, nil
	}
	if c.cfg.Witness == nil {
		return nil, spindle.E(spindle.Transient, fmt.Sprintf("the configuration needs %d witnesses' cosignatures, and this member has no way to ask them", k))
	}
	type answer struct {
		id   string
		line []byte
		err  error
	}
	answers := make(chan answer, len(ws))
	for id, vkey := range ws {
		go func() {
			line, err := c.askWitness(ctx, id, vkey, hi, head)
			c.seen(id, hi.N, err)
			answers <- answer{id, line, err}
		}()
	}
	var errs []error
	got := 0
	out := head
	for range ws {
		a := <-answers
		if a.err != nil {
			errs = append(errs, fmt.Errorf("witness %s: %w", a.id, a.err))
			continue
		}
		out, _ = witness.AddCosignature(out, a.line)
		if got++; got == k {
			return out, nil
		}
	}
	err := spindle.E(spindle.Transient, fmt.Errorf("tree head of %d leaves: %d of the %d witnesses cosigned, %d needed: %w", hi.N, got, len(ws), k, errors.Join(errs...)))
	c.log.Warn("could not gather the witnesses' cosignatures", "err", err)
	return nil, err
}

// askWitness asks witness id to cosign head and returns its cosignature
// line, checked against the witness's verifier key vkey.
func (c *Cluster) askWitness(ctx context.Context, id, vkey string, hi keylog.HeadInfo, head []byte) ([]byte, error) {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return nil, err
	}
	c.witMu.Lock()
	view := c.witViews[id]
	c.witMu.Unlock()
	for try := 0; ; try++ {
		req := &witness.Request{Head: head, OldSize: view.size, ConfigAfter: view.config}
		if view.size > 0 && view.size < hi.N {
			if req.Proof, err = c.ConsistencyProof(ctx, view.size, hi.N); err != nil {
				return nil, err
			}
		}
		for after := view.config; after < hi.Config; {
			ps, err := c.ConfigProofs(ctx, after, head)
			if err != nil {
				return nil, err
			}
			if len(ps) == 0 {
				return nil, spindle.E(spindle.Internal, fmt.Sprintf("no configuration change after %d of the %d the head names", after, hi.Config))
			}
			req.Config = append(req.Config, ps...)
			after += int64(len(ps))
		}
		start := time.Now()
		line, err := c.cfg.Witness(ctx, id, req)
		var se *witness.StaleError
		if errors.As(err, &se) && try == 0 {
			view = witnessView{config: se.Config}
			if len(se.Head) > 0 {
				whi, perr := keylog.ParseHead(se.Head)
				if perr != nil {
					return nil, spindle.E(spindle.Integrity, fmt.Errorf("the witness says it cosigned a head that is none: %w", perr))
				}
				view.size = whi.N
			}
			c.log.Debug("witness has another tree; asking again", "witness", id, "size", view.size, "config", view.config)
			continue
		}
		if err != nil {
			return nil, err
		}
		signed, err := witness.AddCosignature(head, line)
		if err == nil {
			_, err = note.Open(signed, note.VerifierList(v))
		}
		if err != nil {
			return nil, spindle.E(spindle.Integrity, fmt.Errorf("the witness's cosignature does not verify with its key: %w", err))
		}
		c.witMu.Lock()
		c.witViews[id] = witnessView{size: hi.N, config: hi.Config}
		c.witMu.Unlock()
		c.log.Debug("witness cosigned", "witness", id, "size", hi.N, "took", time.Since(start))
		return line, nil
	}
}
