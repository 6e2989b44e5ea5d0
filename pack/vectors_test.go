package pack

import (
	"bytes"
	"context"
	"crypto/ecdh"
	"encoding/hex"
	"encoding/json"
	"flag"
	"io"
	"os"
	"testing"

	"spindle.dev"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json from the current code")

const vectorsFile = "testdata/vectors.json"

// vectors are known answers that pin the format: if any derivation,
// encoding or signed message changes, TestVectors fails.
type vectors struct {
	Comment string       `json:"comment"`
	Keys    []keyVector  `json:"keys"`
	Packs   []packVector `json:"packs"`
	Wrap    wrapVector   `json:"wrap"`
	Entry   entryVector  `json:"entry"`
}

type keyVector struct {
	Secret    string            `json:"secret"`
	PublicKey spindle.PublicKey `json:"public_key"`
}

// packVector: a fixed file key and plaintext give fixed blocks.
type packVector struct {
	Packing    string             `json:"packing"`
	FileKey    string             `json:"file_key,omitempty"`
	Size       int                `json:"size"` // Plaintext byte i is byte(i % 251).
	Commitment string             `json:"commitment,omitempty"`
	Blocks     []spindle.DirBlock `json:"blocks"`
	BlockSum   string             `json:"block_sum"`
	Signed     string             `json:"signed_digest"` // For the entry in vectorEntry with these blocks.
}

type wrapVector struct {
	ReaderSecret   string `json:"reader_secret"`
	EphemeralKey   string `json:"ephemeral_key"`
	Nonce          string `json:"nonce"`
	FileKey        string `json:"file_key"`
	Wrap           string `json:"wrap"`
	CommitmentNote string `json:"commitment_note"`
}

// entryVector is a complete signed ee entry, readable by the reader.
type entryVector struct {
	WriterSecret string            `json:"writer_secret"`
	ReaderSecret string            `json:"reader_secret"`
	Entry        spindle.DirEntry  `json:"entry"`
	Blocks       map[string]string `json:"stored_blocks"` // Ref → hex.
	Plaintext    string            `json:"plaintext"`
}

func vectorPlaintext(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

func secretFrom(t *testing.T, text string) Secret {
	t.Helper()
	s, err := ParseSecret(text)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// computeVectors computes every deterministic vector from the inputs in v.
func computeVectors(t *testing.T, in *vectors) *vectors {
	out := &vectors{Comment: in.Comment, Entry: in.Entry}
	for _, kv := range in.Keys {
		k, err := FromSecret(alice, secretFrom(t, kv.Secret))
		if err != nil {
			t.Fatal(err)
		}
		out.Keys = append(out.Keys, keyVector{Secret: kv.Secret, PublicKey: k.PublicKey()})
	}
	signer := testKeys(t, alice, 1)
	for _, pv := range in.Packs {
		packing, err := spindle.ParsePacking(pv.Packing)
		if err != nil {
			t.Fatal(err)
		}
		s := newMemBlocks()
		e := &spindle.DirEntry{Name: "alice@example.com/vector", Time: 1 << 62}
		w, err := NewWriter(context.Background(), e, Config{Packing: packing, Signer: signer, Put: s.put})
		if err != nil {
			t.Fatal(err)
		}
		if packing == spindle.EEPack {
			if err := w.setFileKey(unhex(t, pv.FileKey), []spindle.PublicKey{signer.PublicKey()}); err != nil {
				t.Fatal(err)
			}
		}
		w.Write(vectorPlaintext(pv.Size))
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		p, digests, sum, err := decodeEntry(e)
		if err != nil {
			t.Fatal(err)
		}
		_ = digests
		o := packVector{Packing: pv.Packing, FileKey: pv.FileKey, Size: pv.Size, Blocks: e.Blocks, BlockSum: hex.EncodeToString(sum[:])}
		if packing == spindle.EEPack {
			o.Commitment = hex.EncodeToString(p.commitment[:])
		}
		o.Signed = hex.EncodeToString(signedDigest(e, sum, p.commitment, p.stripes))
		out.Packs = append(out.Packs, o)
	}
	wv := in.Wrap
	reader, err := FromSecret(bob, secretFrom(t, wv.ReaderSecret))
	if err != nil {
		t.Fatal(err)
	}
	eph, err := ecdh.P256().NewPrivateKey(unhex(t, wv.EphemeralKey))
	if err != nil {
		t.Fatal(err)
	}
	rk, _ := parseReaderKey(reader.PublicKey())
	fileKey := unhex(t, wv.FileKey)
	w, err := sealWrap(fileKey, commit(fileKey), rk, eph, [12]byte(unhex(t, wv.Nonce)))
	if err != nil {
		t.Fatal(err)
	}
	wv.Wrap = hex.EncodeToString(w.append(nil))
	out.Wrap = wv
	return out
}

func TestVectors(t *testing.T) {
	data, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	var want vectors
	if err := json.Unmarshal(data, &want); err != nil {
		t.Fatal(err)
	}
	got := computeVectors(t, &want)
	if *update {
		if want.Entry.Entry.Name == "" {
			got.Entry = makeEntryVector(t)
		}
		b, _ := json.MarshalIndent(got, "", "  ")
		if err := os.WriteFile(vectorsFile, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	gotJSON, _ := json.MarshalIndent(got, "", "  ")
	wantJSON, _ := json.MarshalIndent(&want, "", "  ")
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Fatalf("the format has drifted from %s:\ngot  %s\nwant %s", vectorsFile, gotJSON, wantJSON)
	}

	// The wrap opens with the reader's key to the file key.
	wv := want.Wrap
	reader, _ := FromSecret(bob, secretFrom(t, wv.ReaderSecret))
	w, err := decodeWrap(unhex(t, wv.Wrap))
	if err != nil {
		t.Fatal(err)
	}
	fileKey := unhex(t, wv.FileKey)
	if key, err := openWrap(&w, reader.current, commit(fileKey)); err != nil || !bytes.Equal(key, fileKey) {
		t.Fatalf("vector wrap does not open: %v", err)
	}

	// The stored entry, signed with a randomized signature when the vectors
	// were made, still verifies and decrypts.
	ev := want.Entry
	writer, _ := FromSecret(alice, secretFrom(t, ev.WriterSecret))
	reader, _ = FromSecret(bob, secretFrom(t, ev.ReaderSecret))
	blocks := make(map[spindle.Ref][]byte)
	for ref, h := range ev.Blocks {
		blocks[spindle.Ref(ref)] = unhex(t, h)
	}
	r, err := NewReader(context.Background(), &ev.Entry, ReadConfig{Keys: reader, WriterKeys: []spindle.PublicKey{writer.PublicKey()},
		Get: func(_ context.Context, ref spindle.Ref) ([]byte, error) { return blocks[ref], nil }})
	if err != nil {
		t.Fatalf("vector entry: %v", err)
	}
	plain, err := io.ReadAll(r)
	if err != nil || string(plain) != ev.Plaintext {
		t.Fatalf("vector entry reads %q, %v; want %q", plain, err, ev.Plaintext)
	}
}

func makeEntryVector(t *testing.T) entryVector {
	ev := entryVector{
		WriterSecret: "lusab-babad-gutih-tugad.gutuk-bisog-mudof-sakat",
		ReaderSecret: "fidok-rudij-lanop-vimug.hasot-kulib-zovap-ragin",
		Plaintext:    "Known answers keep the format from drifting.\n",
		Blocks:       map[string]string{},
	}
	writer, _ := FromSecret(alice, secretFrom(t, ev.WriterSecret))
	reader, _ := FromSecret(bob, secretFrom(t, ev.ReaderSecret))
	s := newMemBlocks()
	ev.Entry = spindle.DirEntry{Name: "alice@example.com/docs/vector.txt", Time: 1764763200000000000}
	if err := Pack(context.Background(), &ev.Entry, bytes.NewReader([]byte(ev.Plaintext)), Config{Signer: writer, Readers: []spindle.PublicKey{reader.PublicKey()}, Put: s.put}); err != nil {
		t.Fatal(err)
	}
	for ref, b := range s.m {
		ev.Blocks[string(ref)] = hex.EncodeToString(b)
	}
	return ev
}
