package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft"
)

// A client does not take the key records its node hands it on trust: a
// node that substituted a reader's key could read every file wrapped for
// that reader. With a key log (ClientConfig.KeyLog) every record comes with
// a proof that it is in the key cluster's transparency log, under a tree
// head signed by the cluster, and every head is checked to extend the
// newest one the client has seen before (keyraft.Checker). A node can then
// neither make up a record nor rewrite or fork the log without the client
// noticing; what it can still do is answer with an older head, which
// serves at most records that were once valid, or refuse to answer.
//
// The key log file holds the cluster's note verifier key on its first line
// and the newest signed tree head seen after it. The first client to use a
// file that does not exist yet asks its node for the verifier key and
// trusts it from then on, as ssh does with a host key.

// keyLog is a client's view of the key cluster's transparency log.
type keyLog struct {
	file    string
	vkey    string
	checker *keyraft.Checker
	saved   []byte // The head last written to file.
}

// openKeyLog reads the key log in file, or, if there is none, starts one
// with the verifier key the node gives.
func (c *Client) openKeyLog(ctx context.Context, file string) (*keyLog, error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		resp, err := c.svc.call(ctx, &request{Method: mKeyVerifier})
		if err != nil {
			return nil, fmt.Errorf("asking the node for the key cluster's verifier key: %w", err)
		}
		l, err := newKeyLog(file, string(resp.Data), nil)
		if err != nil {
			return nil, err
		}
		c.log.Info("trusting the key cluster's tree heads from now on", "verifier", l.vkey, "file", file)
		return l, l.save()
	}
	if err != nil {
		return nil, spindle.E(spindle.IO, err)
	}
	vkey, head, _ := strings.Cut(string(data), "\n")
	l, err := newKeyLog(file, vkey, []byte(head))
	if err != nil {
		return nil, spindle.E(spindle.Invalid, fmt.Errorf("key log %s: %w", file, err))
	}
	// Say so at once if the node belongs to another cluster, rather than
	// fail each lookup with a head signed by a key nobody trusts.
	resp, err := c.svc.call(ctx, &request{Method: mKeyVerifier})
	if err != nil {
		return nil, fmt.Errorf("asking the node for the key cluster's verifier key: %w", err)
	}
	if theirs := strings.TrimSpace(string(resp.Data)); theirs != l.vkey {
		return nil, spindle.E(spindle.Integrity, fmt.Sprintf(
			"the node's key cluster signs with %s, but this client trusts only %s (from %s); "+
				"if you moved to another cluster on purpose, remove that file or run spin init -force", theirs, l.vkey, file))
	}
	return l, nil
}

func newKeyLog(file, vkey string, head []byte) (*keyLog, error) {
	vkey = strings.TrimSpace(vkey)
	checker, err := keyraft.NewChecker(vkey)
	if err != nil {
		return nil, err
	}
	l := &keyLog{file: file, vkey: vkey, checker: checker}
	if len(head) > 0 {
		if err := checker.Trust(head); err != nil {
			return nil, err
		}
		l.saved = head
	}
	return l, nil
}

// save writes the newest head seen to the file, if it changed.
func (l *keyLog) save() error {
	head := l.checker.Head()
	if l.saved != nil && bytes.Equal(head, l.saved) {
		return nil
	}
	if err := replaceFile(l.file, append([]byte(l.vkey+"\n"), head...)); err != nil {
		return err
	}
	l.saved = head
	return nil
}

// A prover asks the node for consistency proofs of the key cluster's log.
type prover struct{ svc *remote }

// ConsistencyProof implements keyraft.TreeProver.
func (p prover) ConsistencyProof(ctx context.Context, oldSize, newSize int64) (tlog.TreeProof, error) {
	resp, err := p.svc.call(ctx, &request{Method: mKeyConsistency, Seq: oldSize, Size: newSize})
	if err != nil {
		return nil, err
	}
	return keyraft.UnmarshalTreeProof(resp.Data)
}

// provedRecord asks the node for name's key record with its proof and
// checks both against the key log.
func (c *Client) provedRecord(ctx context.Context, name spindle.UserName) (*spindle.User, error) {
	resp, err := c.svc.call(ctx, &request{Method: mKeyProof, User: name})
	if err != nil {
		return nil, err
	}
	p, err := keyraft.UnmarshalProof(resp.Data)
	if err != nil {
		return nil, err
	}
	return c.keyLog.checker.VerifyLookup(ctx, p, name, prover{c.svc})
}

// provedHistory returns every key name has held, oldest first, each proved
// to be in the key log.
func (c *Client) provedHistory(ctx context.Context, name spindle.UserName) ([]spindle.PublicKey, error) {
	resp, err := c.svc.call(ctx, &request{Method: mKeyProofs, User: name})
	if err != nil {
		return nil, err
	}
	var keys []spindle.PublicKey
	for _, data := range resp.Proofs {
		p, err := keyraft.UnmarshalProof(data)
		if err != nil {
			return nil, err
		}
		u, err := c.keyLog.checker.VerifyLookup(ctx, p, name, prover{c.svc})
		if err != nil {
			return nil, err
		}
		keys = append(keys, u.PublicKey)
	}
	return keys, nil
}
