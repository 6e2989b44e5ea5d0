package main

import (
	"context"
	"errors"
	"strings"
	"time"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/dirlog"
	"spindle.dev/node/wire"
	"spindle.dev/p2p"
)

// dirHostSetter is a client that can name the user's dir hosts (the
// network client; see client.SetDirHosts).
type dirHostSetter interface {
	SetDirHosts(ctx context.Context, hosts []spindle.PeerAddr) error
}

// dirHostAsker is a client that can ask each dir host of a tree for its
// head (the network client; see client.DirHostHeads).
type dirHostAsker interface {
	DirHostHeads(ctx context.Context, owner spindle.UserName) ([]client.HostHead, *dirlog.Head, error)
}

// dirHostCheckTimeout bounds the check, after spin user -dirs, that each
// dir host admits the user: a host that is down is not what it looks for.
const dirHostCheckTimeout = 5 * time.Second

// dirQuorumSetter is a client that can set how many of the user's dir
// hosts cosign a head (see client.SetDirQuorum).
type dirQuorumSetter interface {
	SetDirQuorum(ctx context.Context, quorum int) error
}

// setDirQuorum sets the user's dir quorum through c.
func setDirQuorum(ctx context.Context, st *State, c spindle.Client, quorum int) error {
	s, ok := c.(dirQuorumSetter)
	if !ok {
		return st.fail(string(c.User()), errors.New("this client cannot change the dir quorum"))
	}
	if err := s.SetDirQuorum(ctx, quorum); err != nil {
		st.fail(string(c.User()), err)
		if errors.Is(err, spindle.Invalid) {
			st.hint("name more dir hosts first: %s", commandLine(st.Config, "user", "-dirs", "ADDR,..."))
		}
		return errFailed
	}
	return nil
}

// parseDirHosts parses a comma-separated list of node addresses, each a
// multiaddr ending in /p2p/ID or a bare peer ID.
func parseDirHosts(list string) ([]spindle.PeerAddr, error) {
	var out []spindle.PeerAddr
	seen := make(map[string]bool)
	for _, s := range strings.Split(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		info, err := p2p.ParsePeerAddr(spindle.PeerAddr(s))
		if err != nil {
			return nil, usagef("dir host %q: %v", s, err)
		}
		if seen[info.ID.String()] {
			return nil, usagef("dir host %s named twice", info.ID)
		}
		seen[info.ID.String()] = true
		out = append(out, spindle.PeerAddr(s))
	}
	if len(out) == 0 {
		return nil, usagef("no dir host in %q", list)
	}
	return out, nil
}

// setDirHosts names the user's dir hosts through c.
func setDirHosts(ctx context.Context, st *State, c spindle.Client, hosts []spindle.PeerAddr) error {
	s, ok := c.(dirHostSetter)
	if !ok {
		return st.fail(string(c.User()), errors.New("this client cannot change dir hosts"))
	}
	if err := s.SetDirHosts(ctx, hosts); err != nil {
		return st.fail(string(c.User()), err)
	}
	st.warnNotHosted(ctx, c)
	return nil
}

// warnNotHosted warns about each of the user's dir hosts that does not
// admit the user as a writer: such a node neither sequences nor mirrors
// the tree, and says so only in its own node status, which the user may
// not be able to read (issue 31).
func (st *State) warnNotHosted(ctx context.Context, c spindle.Client) {
	a, ok := c.(dirHostAsker)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, dirHostCheckTimeout)
	defer cancel()
	heads, _, err := a.DirHostHeads(ctx, c.User())
	if err != nil {
		return
	}
	for i, h := range heads {
		if !hasOp(h.Err, wire.NotHostedOp) {
			continue
		}
		role := "mirror"
		if i == 0 {
			role = "sequence"
		}
		st.errorf("warning: dir host %s does not admit %s as a writer: it will not %s your tree", peerID(h.Host), printName(c.User()), role)
		st.hint("ask its operator to add you to its writers (spin node -writers ...,%s), or name another node", printName(c.User()))
	}
}

// samePeer reports whether two node addresses name one peer.
func samePeer(a, b spindle.PeerAddr) bool {
	x, err1 := p2p.ParsePeerAddr(a)
	y, err2 := p2p.ParsePeerAddr(b)
	return err1 == nil && err2 == nil && x.ID == y.ID
}

// peerID returns the peer ID at the end of a node address, or the address
// if it does not parse.
func peerID(a spindle.PeerAddr) string {
	if info, err := p2p.ParsePeerAddr(a); err == nil {
		return info.ID.String()
	}
	return string(a)
}
