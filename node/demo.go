package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"spindle.dev"
	"spindle.dev/pack"
)

// Demo runs Spindle's walkthrough on one machine and prints each step: it
// starts a node in a temporary home, creates two users, stores a file for
// one, shows that the other cannot read it, shares it with an Access file,
// and reads it as the other user.
func Demo(ctx context.Context, out io.Writer) error {
	home, err := os.MkdirTemp("", "spindle-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(home)
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }

	quiet := slog.New(slog.DiscardHandler)
	say("$ spin node -home %s -listen /ip4/127.0.0.1/tcp/0 -writers all", home)
	n, err := New(ctx, Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Writers: []string{"all"}, Logger: quiet})
	if err != nil {
		return err
	}
	defer n.Close()
	addr := orderAddrs(n.Addrs())[0]
	say("node ready at %s (a key cluster of one, a block store, directory logs)", addr)

	users := map[spindle.UserName]*Client{}
	for _, u := range []spindle.UserName{"ann@example.com", "bob@example.com"} {
		keys, secret, err := pack.Generate(u)
		if err != nil {
			return err
		}
		say("\n$ spin init %s", u)
		say("recovery secret for %s: %s", u, secret)
		c, err := Dial(ctx, ClientConfig{Keys: keys, Node: addr, Logger: quiet})
		if err != nil {
			return err
		}
		defer c.Close()
		say("$ spin signup")
		if err := c.Signup(ctx); err != nil {
			return err
		}
		rec, err := c.LookupUser(ctx, u)
		if err != nil {
			return err
		}
		say("registered %s with key %s…", u, rec.PublicKey[:24])
		users[u] = c
	}
	ann, bob := users["ann@example.com"], users["bob@example.com"]

	const text = "Meet at the old mill at noon.\n"
	say("\n$ echo %q | spin put - @/plans.txt   (as ann)", strings.TrimSpace(text))
	e, err := ann.Put(ctx, "@/plans.txt", strings.NewReader(text), spindle.UnknownPack, nil)
	if err != nil {
		return err
	}
	say("stored %s: %d bytes, packing %s, %d block(s), sequence %d", e.Name, e.Size, e.Packing, len(e.Blocks), e.Sequence)

	say("\n$ spin get ann@example.com/plans.txt   (as bob)")
	if _, err := bob.Open(ctx, "ann@example.com/plans.txt"); err == nil {
		return errors.New("bob could read ann's file before she shared it")
	} else {
		say("spin: get: %v", err)
	}

	say("\n$ echo 'read, list: bob@example.com' | spin put - @/Access   (as ann)")
	if _, err := ann.Put(ctx, "@/Access", strings.NewReader("read, list: bob@example.com\n"), spindle.UnknownPack, nil); err != nil {
		return err
	}
	readers, err := ann.Readers(ctx, "@/plans.txt")
	if err != nil {
		return err
	}
	say("the file key of plans.txt is now wrapped for: %v (re-shared automatically)", readers)

	say("\n$ spin get ann@example.com/plans.txt   (as bob)")
	f, err := bob.Open(ctx, "ann@example.com/plans.txt")
	if err != nil {
		return err
	}
	got, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return err
	}
	fmt.Fprint(out, string(got))
	if string(got) != text {
		return errors.New("bob read different contents")
	}
	say("\nThe node stored only ciphertext; ann's client encrypted, bob's decrypted.")
	return nil
}
