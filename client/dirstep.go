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
	if floor == nil || floor.User != got.User || got.Seq <= floor.Seq || !floor.HasLogRoot() {
		return nil
	}
	if !got.HasLogRoot() {
		return dirlog.CheckStep(floor, got, nil)
	}
	if floor.Seq == 0 {
		return dirlog.CheckStep(floor, got, nil)
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
	return dirlog.CheckStep(floor, got, p)
}

// hostOf names the host that signed h.
func hostOf(h *dirlog.Head) string {
	if h.Host == "" {
		return "the dir host (unsigned)"
	}
	return "host " + h.Host
}
