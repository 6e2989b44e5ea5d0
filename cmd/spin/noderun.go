package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"spindle.dev"
	"spindle.dev/blocks/replica"
	"spindle.dev/blocks/shard"
	"spindle.dev/client"
	"spindle.dev/node"
	"spindle.dev/p2p"
)

// nodeUsage is the help text of "spin node", the one "spin help node"
// prints too.
const nodeUsage = `Usage:
    spin node [-home DIR] [-listen MULTIADDR,...] [-writers LIST] [-repair USER,...]
              [-bootstrap MULTIADDR,...] [-relay] [-autonat=false]
              [-holepunch=false] [-relayclient=false] [-portmap=false]
              [-replicas N] [-ec K+M] [-cache MIB] [-holdlimit MIB] [-drain]
              [-gateway ADDR]
              [-keyserver MULTIADDR,...] [-compact K] [-witness]
              [-metrics ADDR] [-quota USER=SIZE,...] [-rate SIZE|up=SIZE,down=SIZE]
              [-signups N,N,N] [-gatewayconns N,N] [-keep WINDOW]
    spin node status [-home DIR]
    spin node install [-user | -system -as USER] [-print] [NODE FLAGS]
    spin node uninstall [-user | -system]
    spin node backup [-home DIR] DEST
    spin node restore [-home DIR] SRC

Runs a Spindle peer on this machine. On a fresh home it starts a key
cluster of one, unless -keyserver names another. When it is ready it
writes its dialable addresses, one a line, to DIR/addr and prints them.
The first is the Unix socket DIR/sock, through which clients of the same
system user on this machine reach it fastest; the others are for clients
elsewhere. SIGINT or SIGTERM shuts it down cleanly; everything it
acknowledged was on disk already. Its flags are not kept in DIR: start
it again with the same ones (spin node install keeps them in the
service). Started without a writer whose tree it holds, it says so.

The node checks its home as it starts. Damage to the key cluster's store,
a snapshot, a key or a block segment stops it with one line naming the
file and what to do. A damaged directory log does not stop it: the log is
left as it is, reported, and not served (its clients are told it is
damaged on this host) until the operator restarts the node with
-repair USER.

Joining a network: give -bootstrap one or more addresses that a running
node printed, and the node joins that node's network and finds the others
through Spindle's private DHT (no public IPFS peers). It remembers up to
64 peers it has met in DIR/peers, most recently seen first, and rejoins
through them when it restarts, so -bootstrap is needed the first time
only. A node that no bootstrap peer answers starts alone, says so, and
keeps trying them. A node at home behind a router is reached through
AutoNAT, relays and hole punching, all on by default (-relay, off by
default, offers a relay to others). To serve other machines, listen on
more than loopback (-listen).

Any node forwards: a client reaches every tree and key through its own
node. A request about a tree that another node hosts (the dir host its
owner's key record names) the client signs for that host, and its node
carries it there unchanged: the node can delay or refuse it, not read,
change or replay it, and it cannot act as the user at the host. With
-keyserver the node runs no key cluster of its own but uses the one at the
addresses given (which double as -bootstrap peers): it carries every key
request to a member, which carries writes on to the cluster's leader.

"spin node status" asks the node running in DIR, through its socket, how
many peers it is connected to, the size of its DHT routing table, the
blocks and bytes it holds, and the leases that keep them (blocks no
directory entry references any more are collected once their leases
have run out, two weeks after their last renewal, and a grace of three
days has passed). It lists the directory logs the node hosts: for each,
its role (sequencer, or mirror), the head it holds, its lag behind the
dir host it copies from, and the last pull's error; a sequencer lists
where each mirror stood when it last asked. Over the network a node
tells its status, without the logs, only to the writers it admits.

"spin node backup DEST" has the node running in DIR write what makes it
this node to DEST, a new directory, while it serves: its peer identity, its
key cluster replica (a snapshot), its directory logs and the peers it
knows. Blocks are not copied: the network holds their copies. "spin node
restore SRC" copies such a backup into DIR, a new home, on this or
another machine; the node started there is the node that was backed up,
as it was then (docs/operating.md says what that means for what was
written after).

"spin node install" makes the node a systemd service: it starts at your
login (with -system, at boot), restarts if it fails, stops cleanly on
SIGTERM and logs to the journal. It takes the node's flags and checks
them first; -home is made absolute, ~/spin/node if not given. It prints
how to read the log and, for a unit of your own, how to keep the node
running while you are logged out. "spin node uninstall" stops the service
and removes the unit; the node's home stays.

Limits, sized for moving large files: the node keeps 256 to 512
connections (above 512 it closes the least used down to 256, sparing
those younger than a minute); its network buffers hold at most 192 MiB,
48 MiB for one peer and 32 MiB for one stream; it allows at most 2368
connections (1344 inbound), 560 streams with one peer and 4096 sockets.

Options:
    -home DIR        the node's state: blocks, key cluster, directory logs,
                     peer identity, peers met (default $HOME/spin/node)
    -listen ADDRS    comma-separated multiaddrs to listen on (default
                     /ip4/127.0.0.1/tcp/7447,/ip4/127.0.0.1/udp/7447/quic-v1;
                     use /ip4/0.0.0.0/tcp/7447 to serve other machines)
    -writers LIST    comma-separated users who may sign up here, create a
                     tree on this node and put files through it:
                     user@domain, *@domain or all (default: nobody; reading
                     needs no admission). It does not govern other users'
                     blocks: as a member of the network, every node holds
                     copies that other nodes place on it as one of the
                     nodes nearest to a block's address, up to -holdlimit
    -repair USERS    comma-separated users whose damaged directory logs the
                     node repairs as it starts: it keeps the entries that
                     verify, moves the rest to DIR/dirlogs/USER.log.damaged-TIME
                     and takes what follows from another dir host of the
                     user; with none, it serves the entries that verify
                     and logs those lost (a damaged log is refilled from
                     another dir host without -repair too)
    -compact K       compact a directory log into a checkpoint signed by
                     this node once more than K entries follow its last one:
                     entries no item of the tree needs any more, and older
                     than the retention window (-keep), are dropped
                     (default 0: never)
    -bootstrap ADDRS comma-separated addresses of peers of a network to join,
                     each a multiaddr ending in /p2p/<peer ID> as spin node
                     prints them (default: the peers remembered in DIR/peers)
    -relay           offer relay service (circuit relay v2) to Spindle nodes
                     behind NAT, once AutoNAT finds this node reachable from
                     outside; relayed connections carry blocks too, on this
                     node's bandwidth (default false; at most 128 reservations,
                     8 from one IP address, and 16 relayed connections a peer)
    -autonat         ask peers whether this node can be reached from outside,
                     and answer theirs (AutoNAT v2 and v1 service; default
                     true: -autonat=false turns it off)
    -holepunch       open direct connections through NATs (DCUtR; default
                     true: -holepunch=false turns it off)
    -relayclient     use relays: reach peers through them and, when
                     unreachable, reserve a slot on one to be reached (default
                     true: -relayclient=false turns it off)
    -portmap         ask the router for a port (UPnP, NAT-PMP), only when
                     -listen names more than loopback (default true:
                     -portmap=false turns it off)
    -replicas N      copies of each block a put through this node makes: one
                     here and the rest on the nodes nearest to the block's
                     address; with fewer nodes, as many as there are (default 3)
    -ec K+M          erasure-code the blocks put through this node instead: each
                     block as K data and M parity shards, held once each by
                     K+M nodes, any K of which give it back (4+2 stores 1.5
                     times the file and survives 2 nodes lost); each file's
                     entry records the code, so readers need no setting
                     (default none: -replicas whole copies)
    -cache MIB       size of the cache of blocks fetched from other nodes, in
                     MiB; 0 turns it off (default 256)
    -holdlimit MIB   the disk this node gives to blocks, in MiB: once the
                     blocks it holds (its writers' and other nodes' copies
                     together, counted from DIR/blocks, going down as blocks
                     are collected) reach it, it refuses the copies other
                     nodes push, and they place them on the next nearest
                     node; its writers' own puts are never refused
                     (default 65536, 64 GiB)
    -drain           on SIGINT or SIGTERM, hand every block this node holds on
                     to the nearest other nodes before stopping, so that each
                     keeps its copies without it: for a node leaving the
                     network for good (default false; a second signal cuts
                     it short)
    -gateway ADDR    serve over plain HTTP at ADDR (host:port), at
                     http://ADDR/USER/PATH, the files that all may read in
                     any tree, hosted here or not, for people who run no
                     Spindle; every other name answers 404, the same
                     whether it exists or not (default: no gateway)
    -keyserver ADDRS comma-separated addresses of members of a key cluster
                     to use instead of starting one here, each a multiaddr
                     ending in /p2p/<peer ID> as spin node prints them; they
                     are joined as -bootstrap peers too; kept in
                     DIR/keyservers, which a start without -keyserver uses
                     (default: none, the node runs its own key cluster)
    -witness         cosign heads of the key cluster's log for its members:
                     each head only if a majority of its members signed it
                     and it extends the last one this node cosigned, which
                     it keeps in DIR/witness (never restore that from an
                     older backup); refused heads are kept there as
                     evidence (default false)
    -user            (install, uninstall) a unit of your own, in
                     ~/.config/systemd/user (default true)
    -system          (install, uninstall) a unit for the whole machine, in
                     /etc/systemd/system; needs root (default false)
    -as USER         (install -system) the user the node runs as, never root
                     (default: the user behind sudo)
    -print           (install) print the unit instead of installing it
                     (default false)
    -quota LIST      comma-separated USER=SIZE: the most the files in each
                     writer's tree on this node may take (*=SIZE for the
                     writers not named); a put past it is refused, storing
                     nothing, and says so (SIZE as 500M or 5G; default: none)
    -rate LIMIT      the bytes a second of blocks this node sends to peers
                     over the network and takes from them: SIZE for both, or
                     up=SIZE,down=SIZE (as 2M; clients on its socket are not
                     limited; default: none)
    -signups LIMITS  the new names registered through this node in an hour:
                     PERADDR,PERNETWORK,TOTAL, from one address, from one
                     /24 (IPv4) or /48 (IPv6), and in all (default: 20,50,200;
                     0 keeps a default)
    -gatewayconns LIMITS the gateway's connections: PERADDR,TOTAL (default:
                     64,1024; 0 keeps a default)
    -keep WINDOW     how long the earlier states of the trees this node
                     hosts stay readable, for users who set no window of
                     their own (spin snapshot -keep): their log entries are
                     not compacted and their files' blocks stay leased
                     (30d, 12h, or none; default 30d)
    -metrics ADDR    serve Prometheus metrics of the node and its libp2p host
                     over plain HTTP at http://ADDR/metrics (host:port; they
                     name the users whose logs it hosts, so listen where only
                     you can reach; default: none). docs/operating.md lists
                     them
    -h, -help        print this text

Example:
    $ spin node install -print -home ~/spinnode -writers ann@example.com
    $ spin node -home ~/spinnode -writers ann@example.com,bob@example.com
    $ spin node -home ~/spinnode2 -bootstrap /ip4/192.168.1.20/tcp/7447/p2p/12D3KooW...
    $ spin node status -home ~/spinnode2
`

// defaultListen are the addresses a node listens on unless told otherwise.
var defaultListen = []string{"/ip4/127.0.0.1/tcp/7447", "/ip4/127.0.0.1/udp/7447/quic-v1"}

// runNodeCommand runs "spin node" with the arguments after "node", until
// ctx is cancelled or the process is told to stop. It returns the exit
// code. The gateway (-gateway) reads with the PublicReader that gateway
// makes for the node; with gateway nil, -gateway is refused.
func runNodeCommand(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger, gateway func(*node.Node) (node.PublicReader, error)) int {
	fs, f := newNodeFlags()
	home, listen, writers, repair := f.home, f.listen, f.writers, f.repair
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, nodeUsage)
			return 0
		}
		fmt.Fprintf(stderr, "spin: node: %v\n", err)
		if near := nearestFlag(fs, err); near != "" {
			fmt.Fprintf(stderr, "spin: hint: did you mean %s?\n", near)
		}
		fmt.Fprintf(stderr, "spin: hint: for the flags of node, run: spin help node\n")
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "spin: node: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	var boot []spindle.PeerAddr
	for _, a := range splitList(*f.bootstrap) {
		boot = append(boot, spindle.PeerAddr(a))
	}
	if _, err := node.ParseBootstrap(boot); err != nil {
		fmt.Fprintf(stderr, "spin: node: -bootstrap: %s\n", oneLineMsg(errors.Unwrap(err).Error()))
		return 2
	}
	var keyservers []spindle.PeerAddr
	for _, a := range splitList(*f.keyserver) {
		keyservers = append(keyservers, spindle.PeerAddr(a))
	}
	if _, err := node.ParseBootstrap(keyservers); err != nil {
		fmt.Fprintf(stderr, "spin: node: -keyserver: %s\n", strings.ReplaceAll(oneLineMsg(errors.Unwrap(err).Error()), "bootstrap address", "key server address"))
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
		p2p.LogTo(log.With("part", "libp2p"))
	}
	if strings.TrimSpace(*writers) == "" {
		fmt.Fprintf(stderr, "spin: node: no -writers given: nobody can sign up on this node or put files through it; it still holds copies of other nodes' blocks, up to -holdlimit; give -writers to admit users\n")
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *f.replicas < 1 {
		fmt.Fprintf(stderr, "spin: node: -replicas %d: a block needs at least one copy\n", *f.replicas)
		return 2
	}
	var erasure shard.Scheme
	if *f.ec != "" {
		var err error
		if erasure, err = shard.ParseScheme(*f.ec); err != nil {
			fmt.Fprintf(stderr, "spin: node: -ec %s: want K+M, such as 4+2, with K 1 to %d and M 1 to %d\n", *f.ec, shard.MaxData, shard.MaxParity)
			return 2
		}
	}
	if *f.holdlimit <= 0 {
		fmt.Fprintf(stderr, "spin: node: -holdlimit %d: give the MiB of blocks this node may hold, more than 0\n", *f.holdlimit)
		return 2
	}
	if *f.compact < 0 {
		fmt.Fprintf(stderr, "spin: node: -compact %d: give the entries after a checkpoint that trigger the next, or 0 for never\n", *f.compact)
		return 2
	}
	if *f.gateway != "" && gateway == nil {
		fmt.Fprintf(stderr, "spin: node: -gateway: this program was built without a reader for the gateway\n")
		return 2
	}
	quotas, defaultQuota, err := parseQuotas(*f.quota)
	if err != nil {
		fmt.Fprintf(stderr, "spin: node: -quota: %v\n", err)
		return 2
	}
	rateUp, rateDown, err := parseRate(*f.rate)
	if err != nil {
		fmt.Fprintf(stderr, "spin: node: -rate: %v\n", err)
		return 2
	}
	signups, err := parseCounts(*f.signups, 3)
	if err != nil {
		fmt.Fprintf(stderr, "spin: node: -signups: %v: want PERADDR,PERNETWORK,TOTAL new names an hour, as 20,50,200\n", err)
		return 2
	}
	gwConns, err := parseCounts(*f.gatewayConns, 2)
	if err != nil {
		fmt.Fprintf(stderr, "spin: node: -gatewayconns: %v: want PERADDR,TOTAL connections, as 64,1024\n", err)
		return 2
	}
	keep, err := parseKeep(*f.keep)
	keep = max(keep, 0) // none
	if err != nil || *f.keep == "default" {
		fmt.Fprintf(stderr, "spin: node: -keep %q: want a window as 30d, 12h, 90m or 3600s, or none\n", *f.keep)
		return 2
	}
	var users []spindle.UserName
	for _, u := range splitList(*repair) {
		cu, err := spindle.CleanUser(spindle.UserName(u))
		if err != nil {
			fmt.Fprintf(stderr, "spin: node: -repair: %v\n", err)
			return 2
		}
		users = append(users, cu)
	}
	n, err := newRecovering(ctx, node.Config{
		Home:             *home,
		Listen:           splitList(*listen),
		Writers:          splitList(*writers),
		Logger:           log,
		Repair:           users,
		CompactAfter:     *f.compact,
		Keep:             keep,
		Bootstrap:        boot,
		Relay:            *f.relay,
		NoAutoNAT:        !*f.autonat,
		NoHolePunch:      !*f.holepunch,
		NoRelayClient:    !*f.relayclient,
		NoPortMap:        !*f.portmap,
		Replicas:         *f.replicas,
		Erasure:          erasure,
		CacheBytes:       cacheBytes(*f.cache),
		HoldLimit:        *f.holdlimit << 20,
		KeyServers:       keyservers,
		Witness:          *f.witness,
		Metrics:          *f.metrics != "",
		Quotas:           quotas,
		DefaultQuota:     defaultQuota,
		RateUp:           rateUp,
		RateDown:         rateDown,
		SignupsPerAddr:   signups[0],
		SignupsPerPrefix: signups[1],
		Signups:          signups[2],
		GatewayPerAddr:   gwConns[0],
		GatewayConns:     gwConns[1],
	})
	if err != nil {
		fmt.Fprintf(stderr, "spin: node: %s\n", oneLineMsg(err.Error()))
		if errors.Is(err, syscall.EADDRINUSE) {
			fmt.Fprintf(stderr, "spin: hint: another program (another spin node?) listens on an address in %s; give this node others with -listen, e.g. -listen /ip4/127.0.0.1/tcp/0\n", *listen)
		}
		return 1
	}
	// The socket first: "spin init" offers the first address to clients on
	// this machine. Other machines use the network addresses after it.
	addrs := n.DialAddrs()
	var b strings.Builder
	for _, a := range addrs {
		b.WriteString(string(a))
		b.WriteByte('\n')
	}
	// The gateway listens before the addr file says the node is ready.
	if *f.gateway != "" {
		rd, err := gateway(n)
		if err != nil {
			fmt.Fprintf(stderr, "spin: node: -gateway: %s\n", oneLineMsg(err.Error()))
			n.Close()
			return 1
		}
		ln, err := net.Listen("tcp", *f.gateway)
		if err != nil {
			fmt.Fprintf(stderr, "spin: node: -gateway: %v\n", err)
			n.Close()
			return 1
		}
		fmt.Fprintf(stderr, "spin: node: gateway serving files all may read at http://%s/\n", ln.Addr())
		// The gateway stops with ctx or n.Close, before RunCommand returns.
		var gw sync.WaitGroup
		defer gw.Wait()
		gw.Go(func() {
			if err := n.ServeGateway(ctx, ln, rd); err != nil {
				log.Error("gateway stopped", "err", err)
			}
		})
	}
	if *f.metrics != "" {
		ln, err := net.Listen("tcp", *f.metrics)
		if err != nil {
			fmt.Fprintf(stderr, "spin: node: -metrics: %v\n", err)
			n.Close()
			return 1
		}
		fmt.Fprintf(stderr, "spin: node: metrics for Prometheus at http://%s/metrics\n", ln.Addr())
		mctx, mcancel := context.WithCancel(ctx)
		var ms sync.WaitGroup
		defer ms.Wait()
		defer mcancel() // Before the Wait: on every return, not only ctx's end.
		ms.Go(func() { serveMetrics(mctx, ln, n.MetricsHandler(), log) })
	}
	if err := spindle.ReplaceFile(filepath.Join(*home, "addr"), []byte(b.String()), 0o644, true); err != nil {
		fmt.Fprintf(stderr, "spin: node: %v\n", err)
		n.Close()
		return 1
	}
	fmt.Fprint(stdout, b.String())
	// Users pin this key with spin init -verifier, or compare its
	// fingerprint with the one spin init shows: say it whatever the log
	// level.
	fmt.Fprintf(stderr, "spin: node: key cluster verifier key: %s (fingerprint %s)\n", n.VerifierKey(), client.VerifierFingerprint(n.VerifierKey()))
	if users := n.Unadmitted(); len(users) > 0 {
		names := make([]string, len(users))
		for i, u := range users {
			names[i] = string(u)
		}
		fmt.Fprintf(stderr, "spin: node: warning: this node holds the trees of %s, whom -writers does not admit: it takes none of their writes and lets their copies here fall behind\n", strings.Join(names, ", "))
		admit := strings.Join(names, ",")
		if w := strings.TrimSpace(*writers); w != "" {
			admit = w + "," + admit
		}
		fmt.Fprintf(stderr, "spin: hint: to serve them, start it again with -writers %s\n", admit)
	}
	<-ctx.Done()
	if *f.drain {
		// Hand every block on before leaving, so that r copies remain
		// without this node; a second signal cuts it short.
		log.Info("node draining: handing its blocks on before it stops")
		dctx, dstop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		res, err := n.Drain(dctx)
		dstop()
		if err != nil {
			fmt.Fprintf(stderr, "spin: node: drain: %s\n", oneLineMsg(err.Error()))
		} else {
			fmt.Fprintf(stderr, "spin: node: drained: %d blocks held, %d handed on, %d had enough copies elsewhere, %d left short\n", res.Blocks, res.Handed, res.Held, res.Failed)
		}
	}
	log.Info("node stopping")
	if err := n.Close(); err != nil {
		fmt.Fprintf(stderr, "spin: node: shutting down: %v\n", err)
		return 1
	}
	return 0
}

// nodeFlags are the options of spin node, as nodeUsage describes them.
type nodeFlags struct {
	home, listen, writers, repair, bootstrap        *string
	relay, autonat, holepunch, relayclient, portmap *bool
	replicas, compact                               *int
	cache, holdlimit                                *int64
	drain                                           *bool
	gateway, ec                                     *string
	keyserver                                       *string
	witness                                         *bool
	metrics                                         *string
	quota, rate                                     *string
	signups, gatewayConns                           *string
	keep                                            *string
}

// newNodeFlags returns the flag set of spin node and its values.
func newNodeFlags() (*flag.FlagSet, *nodeFlags) {
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs, &nodeFlags{
		home:         fs.String("home", "", ""),
		listen:       fs.String("listen", strings.Join(defaultListen, ","), ""),
		writers:      fs.String("writers", "", ""),
		repair:       fs.String("repair", "", ""),
		bootstrap:    fs.String("bootstrap", "", ""),
		relay:        fs.Bool("relay", false, ""),
		autonat:      fs.Bool("autonat", true, ""),
		holepunch:    fs.Bool("holepunch", true, ""),
		relayclient:  fs.Bool("relayclient", true, ""),
		portmap:      fs.Bool("portmap", true, ""),
		replicas:     fs.Int("replicas", replica.DefaultReplicas, ""),
		ec:           fs.String("ec", "", ""),
		compact:      fs.Int("compact", 0, ""),
		cache:        fs.Int64("cache", replica.DefaultCacheBytes>>20, ""),
		holdlimit:    fs.Int64("holdlimit", replica.DefaultHoldLimit>>20, ""),
		drain:        fs.Bool("drain", false, ""),
		gateway:      fs.String("gateway", "", ""),
		keyserver:    fs.String("keyserver", "", ""),
		witness:      fs.Bool("witness", false, ""),
		metrics:      fs.String("metrics", "", ""),
		quota:        fs.String("quota", "", ""),
		rate:         fs.String("rate", "", ""),
		signups:      fs.String("signups", "", ""),
		gatewayConns: fs.String("gatewayconns", "", ""),
		keep:         fs.String("keep", "30d", ""),
	}
}

// cacheBytes turns -cache MiB into Config.CacheBytes: 0 means no cache.
func cacheBytes(mib int64) int64 {
	if mib <= 0 {
		return -1
	}
	return mib << 20
}

// newRecovering is New with a panic in the goroutine that starts the node
// turned into an error: whatever a damaged file makes a library do, the
// operator gets one line, not a stack trace.
func newRecovering(ctx context.Context, cfg node.Config) (n *node.Node, err error) {
	defer func() {
		if r := recover(); r != nil {
			n, err = nil, spindle.E(spindle.Op("node.New"), spindle.Internal, fmt.Errorf("a file under %s made the node fail as it started: %v", cfg.Home, r))
		}
	}()
	return node.New(ctx, cfg)
}

// oneLineMsg joins the lines of a message, so that a diagnostic is one line.
func oneLineMsg(s string) string {
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", " ")), " ")
}

// splitList splits a list given as a flag, at commas or spaces.
func splitList(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
}

// serveMetrics serves the node's metrics on ln at /metrics until ctx
// ends, with timeouts so that a scraper that stalls holds nothing.
func serveMetrics(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 8 << 10}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Error("metrics stopped", "err", err)
	}
}

// parseSize reads a size as 500M, 5G, 1.5T or 4096 (bytes; K, M, G, T are
// powers of 1024, with an optional B or iB after them).
func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(t), "B"), "I")
	mult := int64(1)
	if t != "" {
		if i := strings.IndexByte("KMGT", t[len(t)-1]); i >= 0 {
			mult = 1 << (10 * (i + 1))
			t = t[:len(t)-1]
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v <= 0 || math.IsInf(v, 0) || v*float64(mult) >= math.MaxInt64 {
		return 0, fmt.Errorf("%q is not a size (want a number of bytes, or one with K, M, G or T after it, as 500M)", s)
	}
	return int64(v * float64(mult)), nil
}

// parseQuotas reads -quota: USER=SIZE,... with *=SIZE for the default.
func parseQuotas(s string) (map[spindle.UserName]int64, int64, error) {
	var def int64
	q := make(map[spindle.UserName]int64)
	for _, item := range splitList(s) {
		name, size, ok := strings.Cut(item, "=")
		if !ok {
			return nil, 0, fmt.Errorf("%q: want USER=SIZE, or *=SIZE for every other writer", item)
		}
		n, err := parseSize(size)
		if err != nil {
			return nil, 0, err
		}
		if name == "*" {
			def = n
			continue
		}
		u, err := spindle.CleanUser(spindle.UserName(name))
		if err != nil {
			return nil, 0, err
		}
		q[u] = n
	}
	return q, def, nil
}

// parseRate reads -rate: SIZE for both directions, or up=SIZE,down=SIZE.
func parseRate(s string) (up, down int64, err error) {
	if strings.TrimSpace(s) == "" {
		return 0, 0, nil
	}
	if !strings.Contains(s, "=") {
		n, err := parseSize(s)
		return n, n, err
	}
	for _, item := range splitList(s) {
		dir, size, _ := strings.Cut(item, "=")
		n, err := parseSize(size)
		if err != nil {
			return 0, 0, err
		}
		switch dir {
		case "up":
			up = n
		case "down":
			down = n
		default:
			return 0, 0, fmt.Errorf("%q: want up=SIZE or down=SIZE", item)
		}
	}
	return up, down, nil
}

// parseCounts reads n comma-separated counts, each 0 (the default) or
// more; an empty list is all defaults.
func parseCounts(s string, n int) ([]int, error) {
	out := make([]int, n)
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) != n {
		return nil, fmt.Errorf("%q has %d numbers, not %d", s, len(parts), n)
	}
	for i, p := range parts {
		v, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%q is not a count", p)
		}
		out[i] = v
	}
	return out, nil
}
