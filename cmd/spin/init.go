package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/sec"
	"golang.org/x/term"

	"spindle.dev"
	"spindle.dev/p2p"
	"spindle.dev/pack"
)

const initUsage = `Usage:
    spin init [-node ADDR] [-keyserver ADDR,...] [-verifier KEY] [-packing P] [-secrets DIR] [-recover] [-force] USER

Makes a key pair for USER, saves it in a directory next to the config file
(keys for the usual $HOME/spin/config, NAME.keys for a config file
NAME.yaml given with -config), and writes the config file. The keys come from a recovery secret, printed once: write
it down, since it is the only way to make the same keys again. Then run
spin signup.

Init also learns the key cluster's verifier key from the node, prints its
fingerprint, and from then on trusts only that key's signed tree heads (in
the key log next to the config). Compare the fingerprint with the one the
cluster's operator gives you, or pin the key with -verifier. Later commands
never take a key from the node again: if the key log is lost, restore it
or run spin init again.

With a config for USER already there, spin init -node ADDR USER moves it
to another node (its node is gone, or you use another machine's) and
changes nothing else: no new keys, the same key log and directory heads,
and -keyserver if given. The node must answer and belong to the key
cluster the config trusts. Your tree stays on its dir hosts (spin user).

Options:
    -n, -node ADDR        the peer to reach the network through, and to host
                          your directory (default: from the local node's
                          home, spin/node/addr next to the config: its socket
                          if you may use it, else its first network address)
    -k, -keyserver LIST   comma-separated addresses of key-cluster members
                          (default: the node's network address)
    -v, -verifier KEY     trust only this key-cluster verifier key, as its
                          operator gives it (spin node prints it as it starts), instead of
                          the one the node gives on first use
    -p, -packing P        default packing of new files: ee, eeintegrity or plain (default ee)
    -s, -secrets DIR      keep the keys in DIR instead
    -r, -recover          re-create the keys from a recovery secret, read from
                          stdin or asked for on a terminal
    -f, -force            replace an existing config and keys; the old keys
                          are moved aside to keys.old-TIME
    -h, -help             print this text

Example:
    $ spin init ann@example.com
    $ spin init -recover -node /ip4/192.0.2.7/tcp/4242/p2p/12D3KooW... ann@example.com
`

func runInit(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	node := flags.String("node", "", "")
	flags.StringVar(node, "n", "", "")
	keyservers := flags.String("keyserver", "", "")
	flags.StringVar(keyservers, "k", "", "")
	packingName := flags.String("packing", "ee", "")
	flags.StringVar(packingName, "p", "ee", "")
	recoverKeys := flags.Bool("recover", false, "")
	flags.BoolVar(recoverKeys, "r", false, "")
	secretsDir := flags.String("secrets", "", "")
	flags.StringVar(secretsDir, "s", "", "")
	force := flags.Bool("force", false, "")
	flags.BoolVar(force, "f", false, "")
	verifier := flags.String("verifier", "", "")
	flags.StringVar(verifier, "v", "", "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if *node != "" && !strings.HasPrefix(*node, "/") {
		// Most often an empty $NODE, so that -node took the user name.
		return usagef("-node: %q is not a multiaddr such as /ip4/127.0.0.1/tcp/7447/p2p/12D3KooW...", *node)
	}
	if flags.NArg() != 1 {
		return usagef("want one USER, %s", gotArgs(flags.NArg()))
	}
	// Every later command dials these: refuse now what none could use.
	for _, a := range append([]string{*node}, strings.Split(*keyservers, ",")...) {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if i := strings.LastIndex(a, "/p2p/"); i < 0 || strings.Trim(a[i+len("/p2p/"):], "/") == "" {
			st.errorf("%s: not a node address: it must end in /p2p/ and the node's peer ID", printName(a))
			st.hint("copy a line of the node's addr file (spin node prints them as it starts)")
			return errFailed
		}
	}
	if _, err := spindle.ParsePacking(*packingName); err != nil {
		return usagef("-packing: unknown packing %q (want ee, eeintegrity or plain)", *packingName)
	}
	user, err := spindle.CleanUser(spindle.UserName(flags.Arg(0)))
	if err != nil {
		_, msg := describe(err)
		st.errorf("%s: not a user name: %s", flags.Arg(0), strings.TrimPrefix(msg, spindle.Invalid.Error()+": "))
		return errFailed
	}
	if spindle.BaseUser(user) == spindle.AllUsers {
		st.errorf("%s: reserved: it stands for everyone in Access files, and no one can register it", user)
		return errFailed
	}
	var servers []spindle.PeerAddr
	for _, s := range strings.Split(*keyservers, ",") {
		if s = strings.TrimSpace(s); s != "" {
			servers = append(servers, spindle.PeerAddr(s))
		}
	}

	file, err := st.configFile()
	if err != nil {
		return st.fail("", err)
	}
	file, err = filepath.Abs(file)
	if err != nil {
		return st.fail("", err)
	}
	dir := filepath.Dir(file)
	secrets := keysDir(file)
	if *secretsDir != "" {
		if secrets, err = filepath.Abs(*secretsDir); err != nil {
			return st.fail(*secretsDir, err)
		}
	}
	if !*force && *node != "" && fileExists(file) {
		set := map[string]bool{}
		flags.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for _, name := range []string{"recover", "r", "secrets", "s", "packing", "p", "verifier", "v"} {
			if set[name] {
				st.errorf("%s already exists: with an existing config, spin init -node changes only the node and the key-cluster members (-keyserver)", file)
				st.hint("to replace your config and keys, use: spin init -force %s", strings.Join(args, " "))
				return errFailed
			}
		}
		return st.repoint(ctx, file, user, spindle.PeerAddr(*node), servers)
	}
	if !*force {
		for _, f := range []string{file, filepath.Join(secrets, pack.PrivateKeyFile)} {
			if _, err := os.Stat(f); err == nil {
				st.errorf("%s already exists", f)
				st.hint("to replace your config and keys, use: spin init -force %s", strings.Join(args, " "))
				return errFailed
			}
		}
	}
	network := ""
	if *node == "" {
		*node, network = localNodeAddrs(filepath.Join(dir, "node", "addr"))
	}
	if len(servers) == 0 {
		// Key-cluster members are named by network addresses: other
		// machines cannot use a node's socket.
		if network == "" && !isSocketAddr(*node) {
			network = *node
		}
		if network != "" {
			servers = []spindle.PeerAddr{spindle.PeerAddr(network)}
		}
	}
	cfg := &Config{
		Username:  user,
		Keyserver: servers,
		Node:      spindle.PeerAddr(*node),
		Packing:   *packingName,
		Secrets:   secrets,
		Verifier:  strings.TrimSpace(*verifier),
		File:      file,
		Log:       st.Log,
	}

	if err := st.checkNodePeer(ctx, cfg.Node); err != nil {
		return err
	}

	var keys *pack.Keys
	var secret pack.Secret
	if *recoverKeys {
		text, err := st.readSecret()
		if err != nil {
			return st.fail("recovery secret", err)
		}
		secret, err = pack.ParseSecret(text)
		if err != nil {
			return st.fail("recovery secret", err)
		}
		keys, err = pack.FromSecret(user, secret)
		if err != nil {
			return st.fail(string(user), err)
		}
		if err := st.checkRecovered(ctx, cfg, keys); err != nil {
			return err
		}
	} else {
		keys, secret, err = pack.Generate(user)
		if err != nil {
			return st.fail(string(user), err)
		}
	}
	if *force {
		// Keep the keys being replaced: files written with them stay
		// readable only with them.
		if _, err := os.Stat(secrets); err == nil {
			old := asideName(secrets)
			if err := os.Rename(secrets, old); err != nil {
				return st.fail(secrets, err)
			}
			fmt.Fprintf(st.Stdout, "Previous keys moved to %s\n", old)
		}
	}
	if err := keys.Save(secrets); err != nil {
		return st.fail(secrets, err)
	}
	// A new config may name another node and key cluster: the client
	// trusts the cluster it meets next, as on first use, and starts
	// remembering directory heads afresh.
	for _, f := range []string{keyLogFile(file), stateFile(file, "dirheads")} {
		if !fileExists(f) {
			continue
		}
		old := asideName(f)
		if err := os.Rename(f, old); err != nil {
			return st.fail(f, err)
		}
		fmt.Fprintf(st.Stdout, "Previous %s moved to %s\n", filepath.Base(f), old)
	}
	data, err := cfg.Marshal()
	if err != nil {
		return st.fail(file, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return st.fail(dir, err)
	}
	if err := writeLocal(file, func(w io.Writer) error { _, err := w.Write(data); return err }); err != nil {
		var le *localError
		if errors.As(err, &le) {
			err = le.err
		}
		return st.fail(file, err)
	}

	out := st.Stdout
	if !*recoverKeys {
		fmt.Fprintf(out, "Your recovery secret is:\n\n    %s\n\n", secret)
		fmt.Fprintf(out, "Write it down and keep it safe. It is the only way to make your keys again\n")
		fmt.Fprintf(out, "if this machine is lost (spin init -recover), and it is not shown again.\n\n")
	}
	fmt.Fprintf(out, "Keys for %s are in %s\n", user, secrets)
	fmt.Fprintf(out, "Configuration written to %s\n", file)
	if err := st.trustCluster(ctx, cfg); err != nil {
		return err
	}
	if *force && !*recoverKeys && st.warnIfRegistered(ctx, cfg) {
		return nil
	}
	if cfg.Node == "" {
		st.hint("no node is configured yet: add node: ADDR to %s (a node prints its ADDR when started with spin node -home DIR)", file)
	} else if !*recoverKeys {
		fmt.Fprintf(out, "Next, register with the key cluster: spin signup\n")
	}
	return nil
}

// repoint makes the existing config file of user reach the network
// through node, and name servers as the key-cluster members if any are
// given, keeping its keys, its key log and the directory heads it has
// seen: the keys stay registered and the key cluster stays the one
// trusted. The node must answer and belong to that key cluster, or
// nothing changes.
func (st *State) repoint(ctx context.Context, file string, user spindle.UserName, node spindle.PeerAddr, servers []spindle.PeerAddr) error {
	old, err := ReadConfig(file)
	if err != nil {
		st.errorf("cannot read config %s: %s", file, err)
		st.hint("fix the file, or run: spin init -force -node %s %s to make a new one", node, user)
		return errFailed
	}
	if old.Username != user {
		st.errorf("%s already exists, for %s: spin init -node changes the node of the config's own user only", file, old.Username)
		st.hint("to change the node of %s, run: %s", old.Username, commandLine(old, "init", "-node", string(node), string(old.Username)))
		st.hint("to replace the config and keys with new ones for %s, use: %s", user, commandLine(old, "init", "-force", "-node", string(node), string(user)))
		return errFailed
	}
	cfg := *old
	cfg.Log = st.Log
	cfg.Node = node
	if len(servers) > 0 {
		cfg.Keyserver = servers
	}
	if keys, err := pack.Load(cfg.Secrets); err != nil {
		return st.dialFailed(&cfg, keysProblem(&cfg, err))
	} else if keys.UserName() != user {
		return st.dialFailed(&cfg, keysOfOther(&cfg, keys.UserName()))
	}
	if st.NewClient != nil {
		c, err := st.NewClient(ctx, &cfg)
		if err != nil {
			st.dialFailed(&cfg, err)
			st.hint("%s is unchanged: it still names node %s", file, old.Node)
			return errFailed
		}
		c.Close()
	}
	data, err := cfg.Marshal()
	if err != nil {
		return st.fail(file, err)
	}
	if err := writeLocal(file, func(w io.Writer) error { _, err := w.Write(data); return err }); err != nil {
		var le *localError
		if errors.As(err, &le) {
			err = le.err
		}
		return st.fail(file, err)
	}
	fmt.Fprintf(st.Stdout, "Configuration %s now reaches the network through %s\n", file, node)
	fmt.Fprintf(st.Stdout, "Keys for %s are unchanged, in %s\n", user, cfg.Secrets)
	return nil
}

// keysDir returns the directory for the keys of the user whose config is
// file: keys beside a file named config, else NAME.keys beside NAME.ext,
// so that several users' configs can share a directory.
func keysDir(file string) string {
	dir, base := filepath.Split(file)
	if base == "config" {
		return filepath.Join(dir, "keys")
	}
	return filepath.Join(dir, strings.TrimSuffix(base, filepath.Ext(base))+".keys")
}

// localNodeAddr returns the address in a node's addr file that a client
// on this machine should use, or "" if there is no such file.
func localNodeAddr(file string) string {
	a, _ := localNodeAddrs(file)
	return a
}

// localNodeAddrs reads a node's addr file (the node's socket, then its
// network addresses, one per line) and returns the address a client on
// this machine should use, and the first network address. The client
// uses the socket if it may connect to it (the node runs as the same
// system user), and otherwise the first network address.
func localNodeAddrs(file string) (client, network string) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		a := strings.TrimSpace(line)
		switch {
		case a == "":
		case isSocketAddr(a):
			if client == "" && socketUsable(a) {
				client = a
			}
		case network == "":
			network = a
		}
	}
	if client == "" {
		client = network
	}
	return client, network
}

// isSocketAddr reports whether a peer address is a node's Unix socket.
func isSocketAddr(a string) bool { return strings.HasPrefix(a, "/unix/") }

// socketUsable reports whether this process may connect to the socket of
// a /unix/PATH/p2p/ID address.
func socketUsable(addr string) bool {
	path := strings.TrimPrefix(addr, "/unix")
	if i := strings.LastIndex(path, "/p2p/"); i >= 0 {
		path = path[:i]
	}
	return canConnect(path)
}

// readSecret reads a recovery secret: from a prompt, without echo, when
// stdin is a terminal, or else from the first line of stdin.
func (st *State) readSecret() (string, error) {
	if f, ok := st.Stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fmt.Fprint(st.Stderr, "recovery secret: ")
		b, err := term.ReadPassword(int(f.Fd()))
		fmt.Fprintln(st.Stderr)
		return string(b), err
	}
	line, err := bufio.NewReader(io.LimitReader(st.Stdin, 4096)).ReadString('\n')
	if err != nil && !(errors.Is(err, io.EOF) && line != "") {
		if errors.Is(err, io.EOF) {
			return "", errors.New("no secret on stdin")
		}
		return "", err
	}
	return line, nil
}

// checkRecovered compares recovered keys with the user's key record, when
// the key cluster can be reached, so that a mistyped secret is caught
// before it replaces anything. A user who has not signed up yet, or a
// network that cannot be reached, passes with a note.
func (st *State) checkRecovered(ctx context.Context, cfg *Config, keys *pack.Keys) error {
	if cfg.Node == "" || st.NewClient == nil {
		return nil
	}
	tmp, err := os.MkdirTemp("", "spin-recover-")
	if err != nil {
		return st.fail("", err)
	}
	defer os.RemoveAll(tmp)
	if err := keys.Save(tmp); err != nil {
		return st.fail(tmp, err)
	}
	probe := *cfg
	probe.Secrets = tmp
	// The probe keeps its own key log, trusted for this check only.
	probe.File = filepath.Join(tmp, "config")
	probe.NewKeyLog = true
	probe.Verifier = "" // A pin is checked when the key log is made.
	c, err := st.NewClient(ctx, &probe)
	switch {
	case errors.Is(err, spindle.Permission) || errors.Is(err, spindle.Integrity):
		// The node checks the key of a user who signs in against the key
		// record, and refused this one.
		return st.wrongSecret(cfg.Username)
	case err != nil:
		st.errorf("cannot check the recovered key against the key cluster: %s", describeAll(err))
		return nil
	}
	defer c.Close()
	u, err := c.LookupUser(ctx, cfg.Username)
	switch {
	case errors.Is(err, spindle.NotExist):
		return nil
	case err != nil:
		st.errorf("cannot check the recovered key against the key cluster: %s", describeAll(err))
		return nil
	}
	for _, k := range keys.PublicKeys() {
		if k == u.PublicKey {
			return nil
		}
	}
	return st.wrongSecret(cfg.Username)
}

// trustCluster starts the key log: it learns the key cluster's verifier
// key from the node (or checks the node against the pinned one) and shows
// it, so that trust on first use is a step the user sees.
func (st *State) trustCluster(ctx context.Context, cfg *Config) error {
	if st.Trust == nil {
		return nil
	}
	if cfg.Node == "" {
		if cfg.Verifier == "" {
			st.hint("the key log is made with the key cluster's verifier key when a node is configured: run spin init -force -recover %s then", cfg.Username)
		}
		return nil
	}
	vkey, fp, err := st.Trust(ctx, cfg)
	switch {
	case errors.Is(err, spindle.Invalid) && cfg.Verifier != "":
		st.errorf("-verifier: %s", describeAll(err))
		st.hint("give the key as the cluster's operator prints it (spin key members)")
		return errFailed
	case errors.Is(err, spindle.Integrity):
		st.errorf("key cluster: %s", describeAll(err))
		st.hint("the node's key cluster is not the one -verifier names: check the key with the cluster's operator")
		return errFailed
	case err != nil:
		// The keys and config are made; only the key log is missing,
		// which the next command will say.
		st.errorf("warning: no key log made, since the key cluster's verifier key could not be learnt: %s", describeAll(err))
		st.hint("start the node, then run: spin init -force -recover %s", cfg.Username)
		return nil
	}
	out := st.Stdout
	fmt.Fprintf(out, "Key cluster verifier key: %s\n", vkey)
	fmt.Fprintf(out, "Key cluster fingerprint: %s\n", fp)
	if cfg.Verifier == "" {
		fmt.Fprintf(out, "Trusted on first use: compare the fingerprint with the one the cluster's operator gives you.\n")
	} else {
		fmt.Fprintf(out, "Pinned with -verifier.\n")
	}
	return nil
}

func (st *State) wrongSecret(user spindle.UserName) error {
	st.errorf("recovery secret: the key it makes is not the key registered for %s", user)
	st.hint("check the secret for typing mistakes; nothing was written")
	return errFailed
}

// asideName returns the name to move path aside to: path.old-TIME, with
// a number after it if two inits in one second would take the same name.
func asideName(path string) string {
	old := path + ".old-" + time.Now().UTC().Format("20060102T150405")
	for i := 2; fileExists(old); i++ {
		old = fmt.Sprintf("%s.old-%s-%d", path, time.Now().UTC().Format("20060102T150405"), i)
	}
	return old
}

func fileExists(name string) bool {
	_, err := os.Lstat(name)
	return err == nil
}

// nodeCheckWait bounds spin init's look at the node it is given.
const nodeCheckWait = 5 * time.Second

// checkNodePeer connects to the node at addr, if it answers, and refuses
// an address whose peer ID is not the node's before anything is written:
// a mistyped or stale address would otherwise be written into the config
// and found only at the next command. A node that does not answer is let
// pass: one may init before starting it.
func (st *State) checkNodePeer(ctx context.Context, addr spindle.PeerAddr) error {
	if addr == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, nodeCheckWait)
	defer cancel()
	var h host.Host
	var err error
	if p2p.IsLocalAddr(addr) {
		h, err = p2p.NewLocalHost(ctx, p2p.LocalConfig{})
	} else {
		h, err = p2p.NewHost(ctx, p2p.Config{ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"}})
	}
	if err != nil {
		return nil // The commands after will say what is wrong.
	}
	defer h.Close()
	_, err = p2p.Connect(ctx, h, addr)
	var mismatch sec.ErrPeerIDMismatch
	if !errors.As(err, &mismatch) {
		return nil
	}
	st.errorf("-node %s: the node there is peer %s, not %s, which the address names; nothing was written", addr, mismatch.Actual, mismatch.Expected)
	st.hint("copy the address again as the node prints it (spin node status, or the addr file in its home)")
	return errFailed
}
