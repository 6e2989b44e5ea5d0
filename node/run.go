package node

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"spindle.dev"
)

// NodeUsage is the help text of "spin node".
const NodeUsage = `spin node runs a Spindle peer on this machine.

Usage:
    spin node [-home DIR] [-listen MULTIADDR,...] [-writers LIST]

Options:
    -home DIR        the node's state: blocks, key cluster, directory logs,
                     peer identity (default $HOME/spin/node)
    -listen ADDRS    comma-separated multiaddrs to listen on (default
                     /ip4/127.0.0.1/tcp/7447,/ip4/127.0.0.1/udp/7447/quic-v1;
                     use /ip4/0.0.0.0/tcp/7447 to serve other machines)
    -writers LIST    comma-separated users who may create a tree and store
                     blocks here: user@domain, *@domain or all (default:
                     nobody; reading needs no admission)

On a fresh home the node starts a key cluster of one. When it is ready it
writes its dialable addresses, one a line, to DIR/addr and prints them.
The first is the Unix socket DIR/sock, through which clients of the same
system user on this machine reach it fastest; the others are for clients
elsewhere. SIGINT or SIGTERM shuts it down cleanly; everything it
acknowledged was on disk already.

Example:
    spin node -home ~/spinnode -writers ann@example.com,bob@example.com
`

// DefaultListen are the addresses a node listens on unless told otherwise.
var DefaultListen = []string{"/ip4/127.0.0.1/tcp/7447", "/ip4/127.0.0.1/udp/7447/quic-v1"}

// RunCommand runs "spin node" with the arguments after "node", until ctx is
// cancelled or the process is told to stop. It returns the exit code.
func RunCommand(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	home := fs.String("home", "", "")
	listen := fs.String("listen", strings.Join(DefaultListen, ","), "")
	writers := fs.String("writers", "", "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, NodeUsage)
			return 0
		}
		fmt.Fprintf(stderr, "spin: node: %v\n", err)
		fmt.Fprintf(stderr, "spin: hint: run: spin help node\n")
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "spin: node: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			fmt.Fprintf(stderr, "spin: node: %v\n", err)
			return 1
		}
		*home = filepath.Join(h, "spin", "node")
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(stderr, nil))
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	n, err := New(ctx, Config{
		Home:    *home,
		Listen:  splitList(*listen),
		Writers: splitList(*writers),
		Logger:  log,
	})
	if err != nil {
		fmt.Fprintf(stderr, "spin: node: %v\n", err)
		return 1
	}
	// The socket first: "spin init" offers the first address to clients on
	// this machine. Other machines use the network addresses after it.
	addrs := orderAddrs(n.Addrs())
	if a := n.SocketAddr(); a != "" {
		addrs = append([]spindle.PeerAddr{a}, addrs...)
	}
	var b strings.Builder
	for _, a := range addrs {
		b.WriteString(string(a))
		b.WriteByte('\n')
	}
	if err := spindle.ReplaceFile(filepath.Join(*home, "addr"), []byte(b.String()), 0o644, true); err != nil {
		fmt.Fprintf(stderr, "spin: node: %v\n", err)
		n.Close()
		return 1
	}
	fmt.Fprint(stdout, b.String())
	// Users pin this key with spin init -verifier, or compare its
	// fingerprint with the one spin init shows.
	log.Info("key cluster verifier key", "key", n.VerifierKey())
	<-ctx.Done()
	log.Info("node stopping")
	if err := n.Close(); err != nil {
		fmt.Fprintf(stderr, "spin: node: shutting down: %v\n", err)
		return 1
	}
	return 0
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		out = append(out, f)
	}
	return out
}

// orderAddrs puts TCP before QUIC and loopback addresses first, the order
// in which a client on this machine should try them.
func orderAddrs(addrs []spindle.PeerAddr) []spindle.PeerAddr {
	rank := func(a spindle.PeerAddr) int {
		m, err := ma.NewMultiaddr(string(a))
		if err != nil {
			return 9
		}
		r := 0
		if !manet.IsIPLoopback(m) {
			r += 2
		}
		if _, err := m.ValueForProtocol(ma.P_TCP); err != nil {
			r++
		}
		return r
	}
	out := slices.Clone(addrs)
	slices.SortStableFunc(out, func(a, b spindle.PeerAddr) int { return rank(a) - rank(b) })
	return out
}
