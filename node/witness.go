package node

import (
	"context"
	"errors"
	"path/filepath"

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
	n.witness = w
	return nil
}

func (n *Node) serveWitnessCosign(ctx context.Context, _ *caller, req *wire.WitnessCosignRequest) (*wire.WitnessCosignResponse, error) {
	if n.witness == nil {
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
	sig, err := n.witness.Cosign(ctx, wreq)
	var se *witness.StaleError
	if errors.As(err, &se) {
		return &wire.WitnessCosignResponse{Head: se.Head, Config: se.Config}, err
	}
	return &wire.WitnessCosignResponse{Sig: sig}, err
}

func (n *Node) serveWitnessHead(_ context.Context, _ *caller, _ *wire.WitnessHeadRequest) (*wire.WitnessHeadResponse, error) {
	if n.witness == nil {
		return nil, spindle.E(spindle.NotExist, "this node is not a witness (spin node -witness)")
	}
	head, cfg := n.witness.Head()
	return &wire.WitnessHeadResponse{Head: head, Config: cfg, Verifier: []byte(n.witness.VerifierKey())}, nil
}
