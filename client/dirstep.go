package client

import (
	"context"
	"errors"
	"fmt"

	"spindle.dev"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
)

// A head signed by a dir host could skip over the log: a made-up hash one
// past the newest head the client saw, or the head of an older state
// under a new sequence number. So a head that moves the client past its
// floor must come with the proof that its log extends the floor's: a
// consistency proof over the Merkle tree of the log's entries, whose root
// both heads sign (dirlog.CheckStep). The proof is hashes only, so every
// reader may have it. The client asks for it (dir.step) only when a head
// moves it; a host that cannot prove the step fails the call.
//
// A floor that commits to no log root (the head the client's own append
// left, unsigned, or a version 2 head kept from before) is not a point a
// step can be checked from: the step is checked from the anchor instead,
// the newest signed head with a log root the client has seen, which is
// below the floor. With no anchor either, the client takes the next
// signed head as it did before, and checks the steps after it.

// The requests a step costs go out after the answer whose head moved
// the client: a round trip more. So a lookup and a whichaccess name the
// point the client checks steps from (stepFrom), and the host adds the
// answers to those requests to its answer (wire.StepAnswers), which
// checkStep takes as it takes the answers it asks for, and checks alike.

// stepFrom returns the sequence of the head of owner's log from which
// checkStep would check a step to a newer head (see above), 0 if none.
func (r *remote) stepFrom(owner spindle.UserName) int64 {
	if r.heads == nil {
		return 0
	}
	floor := r.heads.floor(owner)
	if floor == nil {
		return 0
	}
	if anchor := r.heads.anchor(owner); !floor.HasLogRoot() && anchor != nil && anchor.User == owner && anchor.Seq < floor.Seq {
		return anchor.Seq
	}
	return floor.Seq
}

// A stepPrefetch is the StepAnswers that came with got.
type stepPrefetch struct {
	got *dirlog.Head
	sa  *wire.StepAnswers
}

type stepPrefetchKey struct{}

// withStepAnswers returns ctx carrying the step answers that came with
// the answer resp, whose head is got, if any.
func withStepAnswers(ctx context.Context, resp any, got *dirlog.Head) context.Context {
	a, ok := resp.(wire.StepAnswering)
	if !ok || a.StepAnswers() == nil {
		return ctx
	}
	return context.WithValue(ctx, stepPrefetchKey{}, &stepPrefetch{got: got, sa: a.StepAnswers()})
}

// stepAnswers returns the step answers ctx carries for the step from
// floor to got, or nil.
func stepAnswers(ctx context.Context, floor, got *dirlog.Head) *wire.StepAnswers {
	p, _ := ctx.Value(stepPrefetchKey{}).(*stepPrefetch)
	if p == nil || floor == nil || p.got != got || p.sa.From != floor.Seq {
		return nil
	}
	return p.sa
}

// checkStep checks that got, a head that came with an answer, extends
// floor, the newest head seen when the call was made, or from anchor (see
// above). Every failure is Integrity and names both heads.
func (r *remote) checkStep(ctx context.Context, floor, anchor, got *dirlog.Head) error {
	if floor == nil || floor.User != got.User {
		return nil
	}
	var through *dirlog.Head // A head the owner's entries must pass through.
	if !floor.HasLogRoot() && anchor != nil && anchor.User == got.User && anchor.Seq < floor.Seq && got.Seq >= floor.Seq {
		// Also a head at the floor's own sequence: the floor says
		// nothing of the map root there.
		floor, through = anchor, floor
	}
	if got.Seq <= floor.Seq {
		return nil
	}
	if !floor.HasLogRoot() {
		return r.stepEntries(ctx, floor, through, got)
	}
	if !got.HasLogRoot() || floor.Seq == 0 {
		if err := dirlog.CheckStep(floor, got, nil); err != nil {
			return err
		}
		return r.stepEntries(ctx, floor, through, got)
	}
	// The owner's checks of the entries and the map step go on while the
	// proof is fetched: a step costs one round trip, not three.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	own := make(chan error, 1)
	go func() { own <- r.stepEntries(ctx, floor, through, got) }()
	if err := r.proveStep(ctx, floor, got); err != nil {
		return err
	}
	return <-own
}

// proveStep checks the consistency proof that got's log extends floor's.
func (r *remote) proveStep(ctx context.Context, floor, got *dirlog.Head) error {
	var resp *wire.DirStepResponse
	var err error
	if sa := stepAnswers(ctx, floor, got); sa != nil && sa.Proof != nil {
		resp = &wire.DirStepResponse{Proof: sa.Proof}
	} else {
		resp, err = call[wire.DirStepRequest, wire.DirStepResponse](ctx, r, wire.DirStep, got.User, &wire.DirStepRequest{User: got.User, From: floor.Seq, To: got.Seq})
	}
	if err != nil {
		if errors.Is(err, spindle.Transient) || ctx.Err() != nil {
			return err
		}
		return spindle.E(spindle.Integrity, got.User, fmt.Errorf("the head at sequence %d (%s) from %s moves past the head at %d (%s) the client saw, and the dir host gives no proof that it extends it: %w", got.Seq, got.Hash, hostOf(got), floor.Seq, floor.Hash, err))
	}
	p, err := dirlog.UnmarshalConsistencyProof(resp.Proof)
	if err != nil {
		return spindle.E(spindle.Integrity, got.User, fmt.Errorf("the proof that the head at %d (%s) from %s extends the head at %d (%s): %w", got.Seq, got.Hash, hostOf(got), floor.Seq, floor.Hash, err))
	}
	return dirlog.CheckStep(floor, got, p)
}

// stepEntries runs r.ownStep, if set.
func (r *remote) stepEntries(ctx context.Context, floor, through, got *dirlog.Head) error {
	if r.ownStep == nil {
		return nil
	}
	return r.ownStep(ctx, floor, through, got)
}

// hostOf names the host that signed h.
func hostOf(h *dirlog.Head) string {
	if h.Host == "" {
		return "the dir host (unsigned)"
	}
	return "host " + h.Host
}

// maxStepEntries bounds the entries an owner's client fetches to check a
// step of her own log; a longer step fails (a clear error, not a silent
// acceptance): audit the log (spin audit) to move past it. It is far
// above what one client writes between two reads: a bulk import of a
// photo library of 100,000 files is one step, checked in some seconds.
// A step longer than a host keeps map steps of (dirlog.MapStepWindow) has
// its entries checked as they come, not kept.
const maxStepEntries = 1 << 22

// checkOwnStep checks, for the owner of got's log, who may read every
// entry, the entries of the step from floor to got: numbered and chained
// from floor's hash to got's, through the hash of through if it is set,
// each signed by a writer whose key held at its place; and that got's map
// root is the one they make from floor's (see checkMapStep). A
// consistency proof says only that the log tree grew; a head one past
// the floor with a made-up hash extends it too.
func (c *Client) checkOwnStep(ctx context.Context, floor, through, got *dirlog.Head) error {
	if got.User != c.user || floor == nil || floor.User != got.User || got.Seq <= floor.Seq {
		return nil
	}
	if got.Seq-floor.Seq > maxStepEntries {
		return spindle.E(spindle.Integrity, got.User, fmt.Sprintf("the head at sequence %d (%s) from %s is %d entries past the head at %d (%s) the client saw, more than it checks (%d); run spin audit", got.Seq, got.Hash, hostOf(got), got.Seq-floor.Seq, floor.Seq, floor.Hash, maxStepEntries))
	}
	bad := func(format string, args ...any) error {
		return spindle.E(spindle.Integrity, got.User, fmt.Sprintf("the head at sequence %d (%s) from %s does not extend the head at %d (%s) the client saw: ", got.Seq, got.Hash, hostOf(got), floor.Seq, floor.Hash)+fmt.Sprintf(format, args...))
	}
	var mapStep chan mapStepAnswer
	long := got.Seq-floor.Seq > dirlog.MapStepWindow // No host keeps a map step this long.
	sa := stepAnswers(ctx, floor, got)
	if !floor.Root.IsZero() && !long && sa != nil && sa.MapStep != nil {
		mapStep = make(chan mapStepAnswer, 1)
		mapStep <- mapStepAnswer{&wire.DirMapStepResponse{Step: sa.MapStep}, nil}
	} else if !floor.Root.IsZero() && !long {
		// Fetched while the entries are.
		ctx2, cancel := context.WithCancel(ctx)
		defer cancel()
		mapStep = make(chan mapStepAnswer, 1)
		go func() {
			resp, err := call[wire.DirMapStepRequest, wire.DirMapStepResponse](ctx2, c.svc, wire.DirMapStep, c.user, &wire.DirMapStepRequest{User: c.user, From: floor.Seq})
			mapStep <- mapStepAnswer{resp, err}
		}()
	}
	prev, seq := floor.Hash, floor.Seq
	var entries []*dirlog.Entry
	if !long {
		entries = make([]*dirlog.Entry, 0, got.Seq-floor.Seq)
	}
	for seq < got.Seq {
		var resp *wire.DirEntriesResponse
		var err error
		if sa != nil && len(sa.Log) > 0 && seq == floor.Seq {
			resp = &wire.DirEntriesResponse{Log: sa.Log}
		} else {
			resp, err = call[wire.DirEntriesRequest, wire.DirEntriesResponse](ctx, c.svc, wire.DirEntries, c.user, &wire.DirEntriesRequest{User: c.user, From: seq + 1, Max: got.Seq - seq})
		}
		if err != nil {
			if errors.Is(err, spindle.Transient) || errors.Is(err, spindle.IO) || ctx.Err() != nil {
				return err // The host or the way to it failed: no answer, not a lie.
			}
			if errors.Is(err, spindle.NotExist) {
				// The log was compacted past the floor: the entries
				// before the checkpoint are gone, and the step stands
				// on its consistency proof, as for any reader.
				c.log.Debug("the log was compacted past the head the client saw; only the step's consistency proof was checked", "from", seq, "to", got.Seq, "host", hostOf(got), "err", err)
				return nil
			}
			return bad("the entries between them cannot be had: %v", err)
		}
		if len(resp.Log) == 0 {
			return bad("the host gave none of the entries from %d", seq+1)
		}
		if int64(len(resp.Log)) > got.Seq-seq {
			return bad("the host sent %d entries for %d", len(resp.Log), got.Seq-seq)
		}
		for _, b := range resp.Log {
			e, err := dirlog.UnmarshalEntry(b)
			if err != nil {
				return bad("entry %d: %v", seq+1, err)
			}
			if e.Seq != seq+1 || e.Prev != prev {
				return bad("entry %d is not the one after %d (%s)", e.Seq, seq, prev)
			}
			if through != nil && e.Seq == through.Seq && e.Hash() != through.Hash {
				return bad("entry %d is %s, not the %s the client's own append left", e.Seq, e.Hash(), through.Hash)
			}
			if err := c.checkSig(ctx, e); err != nil {
				if errors.Is(err, spindle.IO) {
					return err
				}
				return bad("entry %d (%s of %s by %s): %v", e.Seq, e.Op, e.Entry.Name, e.Writer, err)
			}
			prev, seq = e.Hash(), e.Seq
			if !long {
				entries = append(entries, e)
			}
		}
	}
	if prev != got.Hash {
		return bad("the log's entry %d is %s", seq, prev)
	}
	if mapStep == nil {
		// A floor without a map root: nothing to undo to; or a step
		// longer than a host keeps map steps of.
		return nil
	}
	a := <-mapStep
	return c.checkMapStep(floor, got, entries, a.resp, a.err)
}

// A mapStepAnswer is a host's answer to dir.mapstep.
type mapStepAnswer struct {
	resp *wire.DirMapStepResponse
	err  error
}

// maxMapStepRequired is the longest step whose map step the owner's client
// requires of a host: a host keeps the changes of its latest
// dirlog.MapStepWindow entries, and may have moved that far past got.
const maxMapStepRequired = dirlog.MapStepWindow / 4

// checkMapStep checks, for the owner, that the map root got signs is the
// one entries, the log's entries from floor to got (checked), make from
// floor's (see dirlog.CheckMapStep): else a host could sign the genuine
// next entry over an older map, and answer the owner's reads, those of
// her re-sharing included, from the state before it.
// resp and err are the host's answer to dir.mapstep.
func (c *Client) checkMapStep(floor, got *dirlog.Head, entries []*dirlog.Entry, resp *wire.DirMapStepResponse, err error) error {
	if err != nil {
		if errors.Is(err, spindle.Transient) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		renamed := false
		for _, e := range entries {
			renamed = renamed || e.Op == dirlog.OpRename
		}
		if errors.Is(err, spindle.NotExist) && (got.Seq-floor.Seq > maxMapStepRequired || renamed) {
			// Beyond what the host keeps: a long step, or one whose
			// renames may have moved more than it keeps changes of.
			c.log.Debug("the host keeps no map step this long; the step's entries were checked, not its map root", "from", floor.Seq, "to", got.Seq, "host", hostOf(got), "err", err)
			return nil
		}
		return spindle.E(spindle.Integrity, got.User, fmt.Errorf("the head at sequence %d (%s) from %s moves past the head at %d (%s) the client saw, and the dir host does not show that its map root follows from the entries: %w", got.Seq, got.Hash, hostOf(got), floor.Seq, floor.Hash, err))
	}
	st, err := dirlog.UnmarshalMapStep(resp.Step)
	if err != nil {
		return spindle.E(spindle.Integrity, got.User, fmt.Errorf("the map step from %d to the head at %d (%s) from %s: %w", floor.Seq, got.Seq, got.Hash, hostOf(got), err))
	}
	return dirlog.CheckMapStep(floor, got, entries, st)
}
