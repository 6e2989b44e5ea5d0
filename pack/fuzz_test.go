package pack

import (
	"bytes"
	"crypto/ecdh"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"spindle.dev"
)

// fuzzSeeds returns valid encodings for each fuzz target's seed corpus.
func fuzzSeeds(t testing.TB) map[string][][]byte {
	ak, bk := testKeys(t, alice, 1), testKeys(t, bob, 2)
	s := newMemBlocks()
	seeds := map[string][][]byte{}
	for _, packing := range packings {
		e := packFile(t, s, "alice@example.com/f", testData(100, 1), packing, ak, bk.PublicKey())
		seeds["FuzzPackdata"] = append(seeds["FuzzPackdata"], e.Packdata)
	}
	e := packFile(t, s, "alice@example.com/all", testData(100, 2), spindle.EEPack, ak, AllKey())
	seeds["FuzzPackdata"] = append(seeds["FuzzPackdata"], e.Packdata)
	for _, packing := range []spindle.Packing{spindle.EEPack, spindle.PlainPack} {
		e := packStriped(t, &stripeBlocks{memBlocks: s}, testData(2*spindle.MaxBlockSize, 4), packing, ak)
		seeds["FuzzPackdata"] = append(seeds["FuzzPackdata"], e.Packdata)
	}
	dir := t.TempDir()
	ak.Rotate(Secret{5})
	if err := ak.Save(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{PrivateKeyFile, ArchiveFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		seeds["FuzzKeyFile"] = append(seeds["FuzzKeyFile"], b)
	}
	w, _ := fuzzWrapFixture(t)
	seeds["FuzzWrap"] = append(seeds["FuzzWrap"], w.append(nil))
	seeds["FuzzRef"] = append(seeds["FuzzRef"], []byte(RefOf([]byte("block"))), []byte("bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi"))
	seeds["FuzzSecret"] = append(seeds["FuzzSecret"], []byte("lusab-babad-gutih-tugad.gutuk-bisog-mudof-sakat"), []byte("ZUZUZ ZUZUZ ZUZUZ ZUZUZ ZUZUZ ZUZUZ ZUZUZ ZUZUZ"))
	return seeds
}

// fuzzWrapFixture returns a valid wrap for bob's test key and the
// commitment it was made with.
func fuzzWrapFixture(t testing.TB) (wrap, [32]byte) {
	bk := testKeys(t, bob, 2)
	r, _ := parseReaderKey(bk.PublicKey())
	eph, _ := ecdh.P256().NewPrivateKey(bytes.Repeat([]byte{0x11}, 32))
	key := bytes.Repeat([]byte{0x22}, fileKeySize)
	c := commit(key)
	w, err := sealWrap(key, c, r, eph, [12]byte{1})
	if err != nil {
		t.Fatal(err)
	}
	return w, c
}

// TestWriteFuzzSeeds rewrites the committed seed corpora under
// testdata/fuzz with -update.
func TestWriteFuzzSeeds(t *testing.T) {
	if !*update {
		t.Skip("run with -update to rewrite testdata/fuzz")
	}
	for target, list := range fuzzSeeds(t) {
		dir := filepath.Join("testdata", "fuzz", target)
		os.MkdirAll(dir, 0o755)
		for i, b := range list {
			text := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", b)
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed%d", i)), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func FuzzPackdata(f *testing.F) {
	for _, b := range fuzzSeeds(f)["FuzzPackdata"] {
		f.Add(b)
	}
	ak := testKeys(f, alice, 1)
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := unmarshalPackdata(data)
		if err != nil {
			return
		}
		if again := p.marshal(); !bytes.Equal(again, data) {
			t.Fatalf("packdata is not canonical:\n in %x\nout %x", data, again)
		}
		e := &spindle.DirEntry{Name: "alice@example.com/f", Packing: p.packing, Packdata: data}
		if err := Verify(e, []spindle.PublicKey{ak.PublicKey()}); err == nil {
			t.Fatal("fuzzed packdata verified")
		}
		if _, err := WrappedKeys(e); err != nil {
			t.Fatal(err)
		}
		if _, err := IsWrappedForAll(e); err != nil {
			t.Fatal(err)
		}
		if p.packing == spindle.EEPack {
			unwrapFileKey(p, ak) // Must not panic.
			// Nor may the wrap for all users; what opens must be the committed key.
			if key, err := unwrapFileKey(p, nil); err == nil && commit(key) != p.commitment {
				t.Fatal("the wrap for all users opened to a key other than the committed one")
			}
		}
	})
}

func FuzzKeyFile(f *testing.F) {
	for _, b := range fuzzSeeds(f)["FuzzKeyFile"] {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, header := range []string{privateHeader, archiveHeader} {
			user, pairs, err := parseKeyFile(data, header)
			if err != nil {
				continue
			}
			var b bytes.Buffer
			fmt.Fprintf(&b, "%s\nuser %s\n", header, user)
			for _, p := range pairs {
				writeKeyLine(&b, p)
			}
			if got := strings.TrimRight(string(data), "\n"); got != strings.TrimRight(b.String(), "\n") {
				t.Fatalf("key file does not round-trip:\n in %q\nout %q", got, b.String())
			}
		}
	})
}

func FuzzWrap(f *testing.F) {
	for _, b := range fuzzSeeds(f)["FuzzWrap"] {
		f.Add(b)
	}
	bk := testKeys(f, bob, 2)
	_, c := fuzzWrapFixture(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := decodeWrap(data)
		if err != nil {
			return
		}
		if !bytes.Equal(w.append(nil), data) {
			t.Fatal("wrap does not round-trip")
		}
		key, err := openWrap(&w, bk.current, c)
		if err == nil && commit(key) != c {
			t.Fatal("openWrap returned a key that does not match the commitment")
		}
	})
}

func FuzzSecret(f *testing.F) {
	for _, b := range fuzzSeeds(f)["FuzzSecret"] {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSecret(string(data))
		if err != nil {
			return
		}
		again, err := ParseSecret(s.String())
		if err != nil || again != s {
			t.Fatalf("secret %q does not round-trip: %v", s, err)
		}
	})
}

func FuzzRef(f *testing.F) {
	for _, b := range fuzzSeeds(f)["FuzzRef"] {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		sum, err := refDigest(spindle.Ref(data))
		if err != nil {
			return
		}
		if refOf(sum) != spindle.Ref(data) {
			t.Fatalf("ref %q decodes to %x, which prints as %q", data, sum, refOf(sum))
		}
	})
}
