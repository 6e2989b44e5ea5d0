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
// A floor that commits to no log root (a version 2 head kept from before,
// or the head the client's own append left) is not a point a step can be
// checked from: the client takes the next signed head as it did before,
// and checks the steps after it.

// checkStep checks that got, a head that came with an answer, extends
// floor, the newest head seen when the call was made. Every failure is
// Integrity and names both heads.
func (r *remote) checkStep(ctx context.Context, floor, got *dirlog.Head) error {
	if floor == nil || floor.User != got.User || got.Seq <= floor.Seq {
		return nil
	}
	if !floor.HasLogRoot() {
		return r.stepEntries(ctx, floor, got)
	}
	if !got.HasLogRoot() || floor.Seq == 0 {
		if err := dirlog.CheckStep(floor, got, nil); err != nil {
			return err
		}
		return r.stepEntries(ctx, floor, got)
	}
	resp, err := call[wire.DirStepRequest, wire.DirStepResponse](ctx, r, wire.DirStep, got.User, &wire.DirStepRequest{User: got.User, From: floor.Seq, To: got.Seq})
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
	if err := dirlog.CheckStep(floor, got, p); err != nil {
		return err
	}
	return r.stepEntries(ctx, floor, got)
}

// stepEntries runs r.ownStep, if set.
func (r *remote) stepEntries(ctx context.Context, floor, got *dirlog.Head) error {
	if r.ownStep == nil {
		return nil
	}
	return r.ownStep(ctx, floor, got)
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
// acceptance): audit the log (spin audit) to move past it.
const maxStepEntries = 1 << 14

// checkOwnStep checks, for the owner of got's log, who may read every
// entry, the entries of the step from floor to got: numbered and chained
// from floor's hash to got's, each signed by a writer whose key held at
// its place. A consistency proof says only that the log tree grew; a
// head one past the floor with a made-up hash extends it too.
func (c *Client) checkOwnStep(ctx context.Context, floor, got *dirlog.Head) error {
	if got.User != c.user || floor == nil || floor.User != got.User || got.Seq <= floor.Seq {
		return nil
	}
	if got.Seq-floor.Seq > maxStepEntries {
		return spindle.E(spindle.Integrity, got.User, fmt.Sprintf("the head at sequence %d (%s) from %s is %d entries past the head at %d (%s) the client saw, more than it checks (%d); run spin audit", got.Seq, got.Hash, hostOf(got), got.Seq-floor.Seq, floor.Seq, floor.Hash, maxStepEntries))
	}
	bad := func(format string, args ...any) error {
		return spindle.E(spindle.Integrity, got.User, fmt.Sprintf("the head at sequence %d (%s) from %s does not extend the head at %d (%s) the client saw: ", got.Seq, got.Hash, hostOf(got), floor.Seq, floor.Hash)+fmt.Sprintf(format, args...))
	}
	prev, seq := floor.Hash, floor.Seq
	for seq < got.Seq {
		resp, err := call[wire.DirEntriesRequest, wire.DirEntriesResponse](ctx, c.svc, wire.DirEntries, c.user, &wire.DirEntriesRequest{User: c.user, From: seq + 1, Max: got.Seq - seq})
		if err != nil {
			if errors.Is(err, spindle.Transient) || ctx.Err() != nil {
				return err
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
			if err := c.checkSig(ctx, e); err != nil {
				if errors.Is(err, spindle.IO) {
					return err
				}
				return bad("entry %d (%s of %s by %s): %v", e.Seq, e.Op, e.Entry.Name, e.Writer, err)
			}
			prev, seq = e.Hash(), e.Seq
		}
	}
	if prev != got.Hash {
		return bad("the log's entry %d is %s", seq, prev)
	}
	return nil
}
