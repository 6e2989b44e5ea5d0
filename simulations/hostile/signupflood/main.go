// Command signupflood is a hostile client: it signs up many names through
// one node, each with fresh keys and a fresh peer ID, as fast as the node
// lets it, and reports how many it got and why the others were refused.
// Tests of the node's registration limits run it against a real node.
//
//	signupflood -node /ip4/127.0.0.1/tcp/4001/p2p/12D3Koo... -n 100
//
// It prints one line "signed up K of N" and then, for each distinct
// error, a line "COUNT\tERROR".
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/pack"
)

func main() {
	node := flag.String("node", "", "multiaddr of the node to sign up through, ending in /p2p/<peer ID>")
	n := flag.Int("n", 100, "names to try")
	prefix := flag.String("prefix", "flood", "names are PREFIX<i>@example.com")
	flag.Parse()
	if *node == "" || *n <= 0 {
		fmt.Fprintln(os.Stderr, "usage: signupflood -node ADDR [-n N] [-prefix P]")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "signupflood")
	if err != nil {
		fmt.Fprintln(os.Stderr, "signupflood:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ok := 0
	errs := map[string]int{}
	for i := range *n {
		user := spindle.UserName(fmt.Sprintf("%s%d@example.com", *prefix, i))
		if err := signup(ctx, user, spindle.PeerAddr(*node), filepath.Join(dir, fmt.Sprint(i)), quiet); err != nil {
			errs[strings.ReplaceAll(err.Error(), string(user), "USER")]++
			continue
		}
		ok++
	}
	fmt.Printf("signed up %d of %d\n", ok, *n)
	var msgs []string
	for m := range errs {
		msgs = append(msgs, m)
	}
	sort.Strings(msgs)
	for _, m := range msgs {
		fmt.Printf("%d\t%s\n", errs[m], m)
	}
}

// signup signs user up through node with new keys, from a new peer.
func signup(ctx context.Context, user spindle.UserName, node spindle.PeerAddr, keyLog string, log *slog.Logger) error {
	keys, _, err := pack.Generate(user)
	if err != nil {
		return err
	}
	c, err := client.Dial(ctx, client.Config{Keys: keys, Node: node, Logger: log, KeyLog: keyLog})
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Signup(ctx)
}
