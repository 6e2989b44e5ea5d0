package nodetest

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/node"
)

// startNetwork starts the two nodes of a Network environment: the dir
// host in Home, and the node the clients talk to, which uses the dir
// host's key cluster.
func (e *Env) startNetwork() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := node.New(ctx, node.Config{Home: e.Home, Listen: []string{e.listen}, Writers: []string{"all"}, Logger: e.logger("dirhost")})
	if err != nil {
		return err
	}
	e.node = n
	host := n.Addrs()[0]
	// The dir host restarts on the same port, so that the other node's
	// -keyserver address stays valid.
	if i := strings.Index(string(host), "/tcp/"); i >= 0 && strings.HasSuffix(e.listen, "/tcp/0") {
		rest := string(host)[i+len("/tcp/"):]
		e.listen = "/ip4/127.0.0.1/tcp/" + rest[:strings.IndexByte(rest, '/')]
	}
	if e.fwdHome == "" {
		e.fwdHome = e.t.TempDir()
	}
	f, err := node.New(ctx, node.Config{Home: e.fwdHome, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Writers: []string{"all"}, KeyServers: []spindle.PeerAddr{host}, Logger: e.logger("forwarder")})
	if err != nil {
		return err
	}
	e.fwd = f
	e.addr = f.Addrs()[0]
	return nil
}

// signup signs user u up: on the node, or, in a Network environment, on
// the dir host, which then hosts the user's tree while the user's client
// talks to the other node.
func (e *Env) signup(ctx context.Context, u spindle.UserName) error {
	if e.Kind != Network {
		c, err := e.Client(u)
		if err != nil {
			return err
		}
		return c.Signup(ctx)
	}
	c, err := client.Dial(ctx, client.Config{Keys: e.keys[u], Node: e.node.Addrs()[0], Packing: e.packing, Logger: e.logger("client"), KeyLog: filepath.Join(e.keyLogs, string(u)), DirHeads: filepath.Join(e.keyLogs, string(u)+".dirheads")})
	if err != nil {
		return err
	}
	defer c.Close()
	return c.Signup(ctx)
}
