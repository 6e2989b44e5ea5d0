package pack_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"

	"spindle.dev"
	"spindle.dev/pack"
)

func Example() {
	ctx := context.Background()
	secret, _ := pack.ParseSecret("lusab-babad-gutih-tugad.gutuk-bisog-mudof-sakat")
	ann, err := pack.FromSecret("ann@example.com", secret)
	if err != nil {
		log.Fatal(err)
	}
	bob, _, _ := pack.Generate("bob@example.com")

	// A toy block store.
	blocks := map[spindle.Ref][]byte{}
	put := func(_ context.Context, ref spindle.Ref, data []byte) error {
		blocks[ref] = bytes.Clone(data)
		return nil
	}
	get := func(_ context.Context, ref spindle.Ref) ([]byte, error) { return blocks[ref], nil }

	// Ann packs a file for herself and bob.
	entry := &spindle.DirEntry{Name: "ann@example.com/hello.txt"}
	err = pack.Pack(ctx, entry, bytes.NewReader([]byte("hello, bob\n")), pack.Config{
		Signer:  ann,
		Readers: []spindle.PublicKey{bob.PublicKey()},
		Put:     put,
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(entry.Packing, entry.Writer, entry.Size, len(entry.Blocks))

	// Bob reads it, checking ann's signature.
	r, err := pack.NewReader(ctx, entry, pack.ReadConfig{Keys: bob, WriterKeys: []spindle.PublicKey{ann.PublicKey()}, Get: get})
	if err != nil {
		log.Fatal(err)
	}
	text, _ := io.ReadAll(r)
	fmt.Printf("%s", text)

	// Carol cannot.
	carol, _, _ := pack.Generate("carol@example.com")
	_, err = pack.NewReader(ctx, entry, pack.ReadConfig{Keys: carol, WriterKeys: []spindle.PublicKey{ann.PublicKey()}, Get: get})
	fmt.Println(err)
	// Output:
	// ee ann@example.com 11 1
	// hello, bob
	// pack.NewReader: ann@example.com/hello.txt, user carol@example.com: cannot decrypt: no wrapped key for any of the reader's keys
}

func ExampleSecret() {
	s := pack.Secret{0x7f, 0x00, 0x00, 0x01, 0x3f, 0x54, 0xdc, 0xc1}
	fmt.Println(s)
	// Output: lusab-babad-gutih-tugad.babab-babab-babab-babab
}
