package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/node/wire/wiretest"
	"spindle.dev/p2p"
)

// A small file's block goes with its entry to a node that takes it, and
// comes back with the entry a lookup finds: no block request is made
// either way, and the file reads back. A file of a large block sends it
// apart, as before.
func TestSmallFileBlocksTravelWithEntry(t *testing.T) {
	e := newRoundsEnv(t)
	e.rtt = 0
	data := []byte("a small file")
	if _, log := e.put(t, "ann@example.com", ann("small"), data); strings.Contains(log, "block.") {
		t.Errorf("a put of a small file made a block request: %s", log)
	}
	if _, log := e.get(t, "ann@example.com", ann("small"), data); strings.Contains(log, "block.") {
		t.Errorf("a get of a small file made a block request: %s", log)
	}
	big := bytes.Repeat([]byte("y"), wire.MaxInlineBlock+1)
	if _, log := e.put(t, "ann@example.com", ann("big"), big); !strings.Contains(log, "block.put") {
		t.Errorf("a put of a file of a block larger than %d bytes sent it with the entry: %s", wire.MaxInlineBlock, log)
	}
	if _, log := e.get(t, "ann@example.com", ann("big"), big); !strings.Contains(log, "block.get") {
		t.Errorf("a get of a file of a block larger than %d bytes had it with the entry: %s", wire.MaxInlineBlock, log)
	}
}

// alterAnswers puts a handler in front of n's client protocol that
// passes each request's answer, decoded, through alter.
func alterAnswers(t *testing.T, e *roundsEnv, alter func(req *wiretest.Request, resp *wiretest.Response)) {
	n := e.n
	p2p.Handle(context.Background(), n.Host(), wire.ClientProtocol, wire.MaxMessage, func(ctx context.Context, remote peer.ID, data []byte) ([]byte, error) {
		out, err := n.ServeClient(ctx, remote, data)
		var req wiretest.Request
		if err != nil || wire.Decode(data, &req) != nil {
			return out, err
		}
		resp, _ := wiretest.DecodeResponse(out)
		if resp == nil {
			return out, err
		}
		alter(&req, resp)
		return wire.Encode(resp)
	})
}

// An older node says nothing of taking blocks with entries: the client
// sends them apart and fetches them apart, and the file reads back.
func TestOlderNodeGetsBlocksApart(t *testing.T) {
	e := newRoundsEnv(t)
	e.rtt = 0
	alterAnswers(t, e, func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.Auth {
			resp.TakesBlocks = false
		}
	})
	data := []byte("a small file")
	if _, log := e.put(t, "ann@example.com", ann("small"), data); !strings.Contains(log, "block.put") {
		t.Errorf("a put through an older node sent no block apart: %s", log)
	}
	if _, log := e.get(t, "ann@example.com", ann("small"), data); !strings.Contains(log, "block.get") {
		t.Errorf("a get through an older node fetched no block apart: %s", log)
	}
}

// A node that hands back another block with the entry than the one the
// writer signed is caught: the block is not taken, and the reader asks
// for it again through the block protocol, checked (pack's Refetch), and
// reads the file the writer wrote, never the forged bytes.
func TestLookupWithForgedBlockIsCaught(t *testing.T) {
	e := newRoundsEnv(t)
	e.rtt = 0
	data := []byte("a small file")
	e.put(t, "ann@example.com", ann("small"), data)
	forged := false
	alterAnswers(t, e, func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method == wire.DirLookup && len(resp.Blocks) > 0 {
			resp.Blocks[0] = bytes.Clone(resp.Blocks[0])
			resp.Blocks[0][len(resp.Blocks[0])-1] ^= 1
			forged = true
		}
	})
	c, rc := e.dial(t, "ann@example.com")
	f, err := c.Open(context.Background(), ann("small"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(f)
	f.Close()
	if !forged {
		t.Fatal("no block came with the lookup to forge")
	}
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read of a file whose block the node forged with its entry: %q, %v; want the file as written", got, err)
	}
	if _, log := rc.Count(); !strings.Contains(log, "block.") {
		t.Errorf("the forged block was not asked for again: %s", log)
	}
}

// A node takes no more blocks with entries than wire.MaxInlineBlocks, and
// none larger than wire.MaxInlineBlock: each is a clear Invalid error, and
// nothing is appended.
func TestNodeBoundsBlocksWithEntries(t *testing.T) {
	e := newRoundsEnv(t)
	c, _ := e.dial(t, "ann@example.com")
	for _, tc := range []struct {
		what   string
		blocks [][]byte
	}{
		{"too many blocks", bytes.Split(bytes.Repeat([]byte("b,"), wire.MaxInlineBlocks+1), []byte(","))[:wire.MaxInlineBlocks+1]},
		{"a block too large", [][]byte{make([]byte, wire.MaxInlineBlock+1)}},
	} {
		_, err := c.svc.call(context.Background(), &wiretest.Request{Method: wire.DirBatch, Batch: [][]byte{[]byte("not an entry")}, Blocks: tc.blocks})
		if !spindle.Match(spindle.E(spindle.Op("node.AppendBlocks"), spindle.Invalid), err) {
			t.Errorf("%s with an entry: %v, want the node's Invalid for the blocks", tc.what, err)
		}
	}
}

// The answers to a step's requests that come with a lookup are checked
// as those requests' answers are: a host that alters any of them is
// caught, with Integrity, and the read fails.
func TestStepAnswersWithLookupAreChecked(t *testing.T) {
	for _, part := range []string{"entries", "map step", "proof"} {
		t.Run(part, func(t *testing.T) {
			e := newRoundsEnv(t)
			e.rtt = 0
			data := []byte("a small file")
			e.put(t, "ann@example.com", ann("a"), data)
			c, _ := e.dial(t, "ann@example.com")
			mustRead(t, c, ann("a"), data) // The head the client saw: signed, with a log root.
			c.Close()
			e.put(t, "ann@example.com", ann("b"), data) // Moves the head past it.
			e.put(t, "ann@example.com", ann("c"), data)
			altered := false
			alterAnswers(t, e, func(req *wiretest.Request, resp *wiretest.Response) {
				if req.Method != wire.DirLookup || resp.Step == nil {
					return
				}
				flip := func(b []byte) []byte {
					if len(b) == 0 {
						return b
					}
					b = bytes.Clone(b)
					b[len(b)/2] ^= 1
					altered = true
					return b
				}
				switch part {
				case "entries":
					if len(resp.Step.Log) > 0 {
						resp.Step.Log[0] = flip(resp.Step.Log[0])
					}
				case "map step":
					resp.Step.MapStep = flip(resp.Step.MapStep)
				case "proof":
					resp.Step.Proof = flip(resp.Step.Proof)
				}
			})
			c, rc := e.dial(t, "ann@example.com")
			_, err := c.Open(context.Background(), ann("c"))
			if !altered {
				n, log := rc.Count()
				t.Fatalf("no step answers came with the lookup to alter (%d rounds: %s)", n, log)
			}
			if !errors.Is(err, spindle.Integrity) {
				t.Fatalf("a lookup whose step answers the host altered: %v, want Integrity", err)
			}
		})
	}
}

// The key records of the readers that come with a whichaccess answer are
// checked as a key proof's answer is: a put that would wrap the file's
// key for a reader's record the node forged fails with Integrity.
func TestReaderProofsWithWhichAccessAreChecked(t *testing.T) {
	e := newRoundsEnv(t)
	e.rtt = 0
	ctx := context.Background()
	setup, _ := e.dial(t, "ann@example.com")
	if _, err := setup.MakeDirectory(ctx, "@/shared"); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Put(ctx, "@/shared/Access", strings.NewReader("*: ann@example.com\nread: bob@example.com\n"), 0, nil); err != nil {
		t.Fatal(err)
	}
	setup.Close()
	forged := false
	alterAnswers(t, e, func(req *wiretest.Request, resp *wiretest.Response) {
		if req.Method != wire.DirWhich || len(resp.KeyProofs) == 0 {
			return
		}
		p, err := keylog.UnmarshalProof(resp.KeyProofs[0])
		if err != nil {
			t.Errorf("a proof that came with whichaccess: %v", err)
			return
		}
		p.Index++
		if resp.KeyProofs[0], err = p.MarshalBinary(); err != nil {
			t.Error(err)
		}
		forged = true
	})
	c, _ := e.dial(t, "ann@example.com")
	_, err := c.Put(ctx, "@/shared/f", strings.NewReader("for bob"), spindle.EEPack, nil)
	if !forged {
		t.Fatal("no key proof came with whichaccess to forge")
	}
	if !errors.Is(err, spindle.Integrity) {
		t.Fatalf("a put whose reader's key proof the node forged: %v, want Integrity", err)
	}
}
