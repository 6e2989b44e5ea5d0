package node

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/keyraft/witness"
	"spindle.dev/node/wire"
)

// Witnessing. A node started with Config.Witness (spin node -witness)
// cosigns heads of its key cluster's log for whoever asks: the members,
// as they sign heads. It keeps its state in Home/witness; see package
// keyraft/witness for what it checks and keeps.

// openWitness opens the node's witness, which follows the key cluster the
// node uses (its verifier key ties the witness to it).
func (n *Node) openWitness() error {
	dir := filepath.Join(n.cfg.Home, "witness")
	if n.cfg.Home == "" {
		return spindle.E(spindle.Invalid, "a witness keeps its state on disk: give the node a home")
	}
	w, err := witness.Open(witness.Config{Dir: dir, ID: n.host.ID().String(), Boot: n.VerifierKey()})
	if err != nil {
		return err
	}
	n.witness.Store(w)
	return nil
}

func (n *Node) serveWitnessCosign(ctx context.Context, _ *caller, req *wire.WitnessCosignRequest) (*wire.WitnessCosignResponse, error) {
	w := n.witness.Load()
	if w == nil {
		return nil, spindle.E(spindle.NotExist, "this node is not a witness (spin node -witness)")
	}
	wreq := &witness.Request{Head: req.Head, OldSize: req.OldSize, ConfigAfter: req.ConfigAfter}
	var err error
	if len(req.Proof) > 0 {
		if wreq.Proof, err = keylog.UnmarshalTreeProof(req.Proof); err != nil {
			return nil, err
		}
	}
	if len(req.Config) > 0 {
		if wreq.Config, err = keylog.UnmarshalProofs(req.Config); err != nil {
			return nil, err
		}
	}
	sig, err := w.Cosign(ctx, wreq)
	if err == nil {
		n.witnessAdvanced()
	}
	var se *witness.StaleError
	if errors.As(err, &se) {
		return &wire.WitnessCosignResponse{Head: se.Head, Config: se.Config}, err
	}
	return &wire.WitnessCosignResponse{Sig: sig}, err
}

func (n *Node) serveWitnessHead(_ context.Context, _ *caller, _ *wire.WitnessHeadRequest) (*wire.WitnessHeadResponse, error) {
	w := n.witness.Load()
	if w == nil {
		return nil, spindle.E(spindle.NotExist, "this node is not a witness (spin node -witness)")
	}
	head, cfg := w.Head()
	return &wire.WitnessHeadResponse{Head: head, Config: cfg, Verifier: []byte(w.VerifierKey())}, nil
}

// askWitness asks the witness id, a peer ID, to cosign a head of the key
// cluster's log (keyraft.Config.Witness); this node's own witness is
// asked directly.
func (n *Node) askWitness(ctx context.Context, id string, req *witness.Request) ([]byte, error) {
	pid, err := peer.Decode(id)
	if err != nil {
		return nil, spindle.E(spindle.Invalid, fmt.Sprintf("witness ID %q is not a peer ID: %v", id, err))
	}
	if pid == n.host.ID() {
		w := n.witness.Load()
		if w == nil {
			return nil, spindle.E(spindle.NotExist, "this node is named a witness but does not run one (spin node -witness)")
		}
		sig, err := w.Cosign(ctx, req)
		if err == nil {
			n.witnessAdvanced()
		}
		return sig, err
	}
	wreq := &wire.WitnessCosignRequest{Head: req.Head, OldSize: req.OldSize, ConfigAfter: req.ConfigAfter}
	if len(req.Proof) > 0 {
		wreq.Proof = keylog.MarshalTreeProof(req.Proof)
	}
	if len(req.Config) > 0 {
		if wreq.Config, err = keylog.MarshalProofs(req.Config); err != nil {
			return nil, err
		}
	}
	n.findAddrs(ctx, pid)
	resp, err := callNode[wire.WitnessCosignRequest, wire.WitnessCosignResponse](ctx, n, peer.AddrInfo{ID: pid}, wire.WitnessCosign, wreq)
	if errors.Is(err, spindle.Stale) && resp != nil {
		return nil, spindle.E(spindle.Stale, &witness.StaleError{Head: resp.Head, Config: resp.Config})
	}
	if err != nil {
		return nil, err
	}
	return resp.Sig, nil
}
