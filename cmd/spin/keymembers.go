package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/node/wire"
	"spindle.dev/pack"
)

// The commands of spin key that look at and change the key cluster's
// membership and configuration. Each goes through the node whose home
// is ~/spin/node if one has run there (through its socket), else through
// the node in your config; a change is signed with your key, and the
// cluster takes it only from its operators (a join: from a node operator
// the operators admitted).

const keyMembersText = `spin key members prints the key cluster as a member sees it: each member
with its tree-head verifier key, the leader, the Raft term and last log
index, the operators, the node operator keys admitted to join, the
namespace policy and the domain admin keys. Any node answers it, asking a
member if it is none.
`

const keyMembersExample = `    $ spin key members
    member:    12D3KooW...
    ...
`

const keyInitText = `spin key init makes your key the first operator of a key cluster that has
none (a cluster's first node bootstraps it without), recording that node
as its first member. Only operators change the cluster's configuration.
`

const keyInitExample = `    $ spin key init
    operator:  p256:B...
`

const keyAdmitText = `spin key admit PUBKEY lets the node operator whose public key is PUBKEY (as
spin user prints it) make nodes join the cluster; spin key unadmit PUBKEY
withdraws that. spin key operator add|remove PUBKEY adds or removes an
operator. Each is signed by your key, which must be an operator's.
`

const keyAdmitExample = `    $ spin key admit p256:B...
`

const keyJoinText = `spin key join makes the node in ~/spin/node (or -home DIR) a voting member of the key
cluster it was started with (spin node -keyserver ADDR), vouched for by
your key, which an operator must have admitted (spin key admit). The node
stays a member when it restarts. spin key leave takes it out again;
restart it afterwards with the members: spin node -keyserver ADDR.
`

const keyJoinExample = `    $ spin key join
    joined:    12D3KooW...
    ...
`

const keyPolicyText = `spin key policy open|domain|invite sets the namespace policy. Under open,
the first to register a name holds it. Under domain, a new name under a
domain is granted only with the countersignature of the domain's admin key,
which spin key domain add DOMAIN PUBKEY registers (replacing any before it)
and spin key domain remove DOMAIN removes: then no new name under the
domain is granted until another key is added. Under invite, a new name
under any domain needs an invitation: the countersignature of an
operator's key (or of the domain's admin key) by spin key grant, so that
strangers who make identities for free cannot register names in bulk.
`

const keyNetworkText = `spin key network open|members sets which nodes may store blocks for others,
be asked in the network's DHT and announce what they hold. Under open (the
default), any node that joins may; challenges of holding, hedged reads and
quotas bound what strangers' nodes cost. Under members, only the key
cluster's members and the nodes an operator admits with spin key node add
PEERID may: every node refuses the others' copies, provider records and
places in its routing table, and their users put through a member. spin key
node remove PEERID takes a node out; its copies are made again elsewhere.
A family or a small group whose nodes are all known should choose members.
`

const keyNetworkExample = `    $ spin key node add 12D3KooWJx...
    $ spin key network members
`

const keyWitnessText = `spin key witness add VERIFIERKEY records a witness of the key cluster's log:
a node run with spin node -witness, whose verifier key spin node status
prints. spin key witness quorum K sets how many witnesses must cosign each
tree head: clients then take a head only with K witnesses' cosignatures,
so that not even a majority of members (or of old members whose keys were
stolen) can show them a log the witnesses did not see. spin key witness
remove ID removes one (lower the quorum first if it needs it). Set the
quorum below the number of witnesses, so that one witness down stops
nothing.
`

const keyWitnessExample = `    $ spin key witness add spindle-witness/12D3KooW...+8c3a1f2e+AQ...
    $ spin key witness quorum 1
`

const keyWitnessesText = `spin key witnesses lists the witnesses of the key cluster's log, each with
the tree it last cosigned for the member that answers and when, or why its
last request failed, and how many must cosign each head.
`

const keyGrantText = `spin key grant REQUEST countersigns, with your key as a domain's admin (or,
under the invite policy, as an operator), the first record of a new user (REQUEST, as spin signup -request printed it)
and prints the grant, which the user gives to spin signup -grant. Check
out of band that the request comes from the user it names.
`

const keyGrantExample = `    $ spin key grant AQ...
    grant:     ...
`

const keyPolicyExample = `    $ spin key policy open
    $ spin key domain add example.com p256:B...
`

// keyNode returns the address of the node that key cluster commands go
// through: the socket of the node in ~/spin/node, or the config's node.
func (st *State) keyNode() (spindle.PeerAddr, bool, error) {
	h, err := st.home()
	if err != nil {
		return "", false, err
	}
	if addr, err := nodeSocket(filepath.Join(h, "spin", "node")); err == nil {
		return addr, true, nil
	}
	cfg, err := st.loadConfig()
	if err != nil {
		return "", false, err
	}
	if cfg.Node == "" {
		return "", false, st.fail("", spindle.E(spindle.Invalid, "no node runs in ~/spin/node and the config names none"))
	}
	return cfg.Node, false, nil
}

// keyNodeCall sends a request of method whose body is req to the key
// cluster commands' node.
func keyNodeCall[Req, Resp any](ctx context.Context, st *State, method string, req *Req) (*Resp, error) {
	addr, _, err := st.keyNode()
	if err != nil {
		return nil, err
	}
	return client.NodeCall[Req, Resp](ctx, addr, method, req)
}

// keyStatus asks for the cluster's status.
func (st *State) keyStatus(ctx context.Context) (*wire.ClusterStatus, error) {
	resp, err := keyNodeCall[wire.KeyStatusRequest, wire.KeyStatusResponse](ctx, st, wire.KeyStatus, &wire.KeyStatusRequest{})
	if err != nil {
		return nil, err
	}
	if resp.Status == nil {
		return nil, spindle.E(spindle.IO, "the node sent no key cluster status")
	}
	return resp.Status, nil
}

// operatorKeys loads your keys, which sign configuration changes.
func (st *State) operatorKeys() (*pack.Keys, error) {
	cfg, err := st.loadConfig()
	if err != nil {
		return nil, err
	}
	keys, err := pack.Load(cfg.Secrets)
	if err != nil {
		return nil, st.fail("", err)
	}
	return keys, nil
}

// signChange signs a change of kind following the configuration st.
func signChange(keys *pack.Keys, cs *wire.ClusterStatus, kind, arg string, key spindle.PublicKey) ([]byte, error) {
	ch := &keylog.Change{Seq: cs.Seq + 1, Kind: kind, Arg: arg, Key: key}
	if err := keylog.SignChange(ch, keys); err != nil {
		return nil, err
	}
	return keylog.EncodeChange(ch), nil
}

// keyArgs parses args, which must hold want operands.
func (st *State) keyArgs(args []string, want int, usage string) ([]string, error) {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return nil, err
	}
	if flags.NArg() != want {
		return nil, usagef("usage: spin %s", strings.TrimSpace(st.cmd+" "+usage))
	}
	return flags.Args(), nil
}

func runKeyMembers(ctx context.Context, st *State, args []string) error {
	if _, err := st.keyArgs(args, 0, ""); err != nil {
		return err
	}
	cs, err := st.keyStatus(ctx)
	if err != nil {
		return st.fail("", err)
	}
	printClusterStatus(st, cs)
	return nil
}

// printClusterStatus prints a cluster status, one "name: value" a line.
func printClusterStatus(st *State, cs *wire.ClusterStatus) {
	line := func(name, format string, args ...any) {
		fmt.Fprintf(st.Stdout, "%-10s %s\n", name+":", fmt.Sprintf(format, args...))
	}
	ids := slices.Sorted(func(yield func(string) bool) {
		seen := map[string]bool{}
		for _, id := range cs.Voters {
			seen[id] = true
			if !yield(id) {
				return
			}
		}
		for id := range cs.Members {
			if !seen[id] && !yield(id) {
				return
			}
		}
	})
	for _, id := range ids {
		var notes []string
		if id == cs.Leader {
			notes = append(notes, "leader")
		}
		if id == cs.ID {
			notes = append(notes, "answered this")
		}
		if !slices.Contains(cs.Voters, id) {
			notes = append(notes, "recorded, not a voter")
		} else if cs.Members[id] == "" {
			notes = append(notes, "voter, no verifier key recorded")
		}
		if len(notes) > 0 {
			line("member", "%s (%s)", id, strings.Join(notes, ", "))
		} else {
			line("member", "%s", id)
		}
		if v := cs.Members[id]; v != "" {
			line("verifier", "%s", v)
		}
	}
	if cs.Leader == "" {
		line("leader", "none known to %s", cs.ID)
	}
	line("term", "%d", cs.Term)
	line("index", "%d (applied %d, at %s)", cs.LastIndex, cs.Applied, cs.ID)
	line("config", "%d changes", cs.Seq)
	for _, k := range cs.Operators {
		line("operator", "%s", k)
	}
	for _, k := range cs.Admitted {
		line("admitted", "%s", k)
	}
	line("policy", "%s", cs.Policy)
	for _, d := range slices.Sorted(func(yield func(string) bool) {
		for d := range cs.Domains {
			if !yield(d) {
				return
			}
		}
	}) {
		line("domain", "%s %s", d, cs.Domains[d])
	}
	network := cs.Network
	if network == "" {
		network = keylog.NetworkOpen
	}
	if network == keylog.NetworkMembers {
		line("network", "members only: %d %s (the key cluster's members and the nodes admitted)", len(cs.Nodes), plural(len(cs.Nodes), "node"))
	} else {
		line("network", "open")
	}
	for _, id := range cs.Nodes {
		if _, ok := cs.Members[id]; !ok {
			line("node", "%s", id)
		}
	}
	printWitnesses(st, cs, time.Now())
}

// printWitnesses prints the witnesses the configuration names, with what
// the answering member last heard from each, and the quorum.
func printWitnesses(st *State, cs *wire.ClusterStatus, now time.Time) {
	line := func(name, format string, args ...any) {
		fmt.Fprintf(st.Stdout, "%-10s %s\n", name+":", fmt.Sprintf(format, args...))
	}
	for _, id := range slices.Sorted(maps.Keys(cs.Witnesses)) {
		line("witness", "%s", id)
		line("verifier", "%s", cs.Witnesses[id])
		if at, ok := cs.WitnessAt[id]; ok {
			line("cosigned", "%d records for %s, %s ago", cs.WitnessSize[id], cs.ID, now.Sub(at.Go()).Round(time.Second))
		} else if cs.Quorum > 0 {
			line("cosigned", "nothing for %s since it started", cs.ID)
		}
		if e := cs.WitnessErr[id]; e != "" {
			line("failed", "%s", oneLineMsg(e))
		}
	}
	if len(cs.Witnesses) > 0 {
		line("quorum", "%d of %d witnesses cosign each head", cs.Quorum, len(cs.Witnesses))
	}
}

func runKeyWitnesses(ctx context.Context, st *State, args []string) error {
	if _, err := st.keyArgs(args, 0, ""); err != nil {
		return err
	}
	cs, err := st.keyStatus(ctx)
	if err != nil {
		return st.fail("", err)
	}
	if len(cs.Witnesses) == 0 {
		fmt.Fprintln(st.Stdout, "no witnesses: heads count with the members' signatures alone (spin key witness add names one)")
		return nil
	}
	printWitnesses(st, cs, time.Now())
	return nil
}

// change signs a configuration change and sends it to the cluster.
func (st *State) change(ctx context.Context, kind, arg string, key spindle.PublicKey) error {
	keys, err := st.operatorKeys()
	if err != nil {
		return err
	}
	cs, err := st.keyStatus(ctx)
	if err != nil {
		return st.fail("", err)
	}
	// A setting that holds already is said to, not changed again (a
	// change that adds or removes something is left to the cluster,
	// which says why it cannot be made).
	setting := kind == keylog.ChangePolicy || kind == keylog.ChangeNetwork || kind == keylog.ChangeWitnessQuorum || kind == keylog.ChangeDomain
	if setting && changeHolds(cs, kind, arg, key) {
		fmt.Fprintf(st.Stdout, "no change: %s (configuration %d has it already)\n", changeText(kind, arg, key), cs.Seq)
		return nil
	}
	data, err := signChange(keys, cs, kind, arg, key)
	if err != nil {
		return st.fail("", err)
	}
	// The same change again is no change: one cut short by a leader
	// change is tried again, for up to a minute.
	resigned := false
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		_, err := keyNodeCall[wire.KeyChangeRequest, wire.KeyChangeResponse](ctx, st, wire.KeyChange, &wire.KeyChangeRequest{Change: data})
		if err == nil {
			if kind != keylog.ChangeInit {
				fmt.Fprintf(st.Stdout, "done:      %s (configuration change %d)\n", changeText(kind, arg, key), cs.Seq+1)
			}
			return nil
		}
		if errors.Is(err, spindle.Invalid) && strings.Contains(err.Error(), "does not follow the current configuration") {
			// The configuration moved on while this change was signed or
			// on its way: another operator's change, or this one's own
			// first try, taken before its answer was lost. Say which.
			now, serr := st.keyStatus(ctx)
			if serr == nil && changeHolds(now, kind, arg, key) {
				fmt.Fprintf(st.Stdout, "done:      %s (configuration %d has it: an earlier try was taken before its answer was lost)\n", changeText(kind, arg, key), now.Seq)
				return nil
			}
			if serr == nil && !resigned {
				// Signed for a configuration that another change has
				// followed since: sign it again for the current one.
				resigned, cs = true, now
				if data, err = signChange(keys, cs, kind, arg, key); err != nil {
					return st.fail("", err)
				}
				continue
			}
			st.fail("", err)
			st.hint("the configuration changed while this change was made (another operator?); look at it with spin key members and run the command again")
			return errFailed
		}
		if !errors.Is(err, spindle.Transient) || time.Now().After(deadline) {
			return st.fail("", err)
		}
	}
}

// changeHolds reports whether the configuration cs already has what a
// change of kind with arg and key would make it have.
func changeHolds(cs *wire.ClusterStatus, kind, arg string, key spindle.PublicKey) bool {
	switch kind {
	case keylog.ChangeInit:
		return slices.Contains(cs.Operators, key)
	case keylog.ChangePolicy:
		return cs.Policy == arg
	case keylog.ChangeAddOperator:
		return slices.Contains(cs.Operators, key)
	case keylog.ChangeRemoveOperator:
		return !slices.Contains(cs.Operators, key)
	case keylog.ChangeAdmit:
		return slices.Contains(cs.Admitted, key)
	case keylog.ChangeUnadmit:
		return !slices.Contains(cs.Admitted, key)
	case keylog.ChangeDomain:
		return cs.Domains[arg] == key
	case keylog.ChangeUndomain:
		_, ok := cs.Domains[arg]
		return !ok
	case keylog.ChangeNetwork:
		return cs.Network == arg || cs.Network == "" && arg == keylog.NetworkOpen
	case keylog.ChangeAddNode:
		return slices.Contains(cs.Nodes, arg)
	case keylog.ChangeRemoveNode:
		return !slices.Contains(cs.Nodes, arg)
	case keylog.ChangeAddWitness:
		return slices.Contains(slices.Collect(maps.Values(cs.Witnesses)), arg)
	case keylog.ChangeRemoveWitness:
		_, ok := cs.Witnesses[arg]
		return !ok
	case keylog.ChangeWitnessQuorum:
		return strconv.Itoa(cs.Quorum) == arg
	}
	return false
}

// changeText says what a configuration change does, for people.
func changeText(kind, arg string, key spindle.PublicKey) string {
	switch kind {
	case keylog.ChangePolicy:
		return "namespace policy " + arg
	case keylog.ChangeAddOperator:
		return "operator " + string(key) + " added"
	case keylog.ChangeRemoveOperator:
		return "operator " + string(key) + " removed"
	case keylog.ChangeAdmit:
		return "node operator " + string(key) + " admitted"
	case keylog.ChangeUnadmit:
		return "node operator " + string(key) + " no longer admitted"
	case keylog.ChangeDomain:
		return "admin key of " + arg + " set to " + string(key)
	case keylog.ChangeUndomain:
		return "admin key of " + arg + " removed"
	case keylog.ChangeNetwork:
		return "network " + arg
	case keylog.ChangeAddNode:
		return "node " + arg + " admitted to the network"
	case keylog.ChangeRemoveNode:
		return "node " + arg + " taken out of the network"
	case keylog.ChangeAddWitness:
		return "witness added"
	case keylog.ChangeRemoveWitness:
		return "witness " + arg + " removed"
	case keylog.ChangeWitnessQuorum:
		return "witness quorum " + arg
	}
	return kind + " " + arg
}

func runKeyInit(ctx context.Context, st *State, args []string) error {
	if _, err := st.keyArgs(args, 0, ""); err != nil {
		return err
	}
	keys, err := st.operatorKeys()
	if err != nil {
		return err
	}
	resp, err := keyNodeCall[wire.KeyVerifierRequest, wire.KeyVerifierResponse](ctx, st, wire.KeyVerifier, &wire.KeyVerifierRequest{})
	if err != nil {
		return st.fail("", err)
	}
	if err := st.change(ctx, keylog.ChangeInit, strings.TrimSpace(string(resp.Verifier)), keys.PublicKey()); err != nil {
		return err
	}
	fmt.Fprintf(st.Stdout, "operator:  %s\n", keys.PublicKey())
	return nil
}

// pubKeyArg checks a public key given on the command line.
func pubKeyArg(s string) (spindle.PublicKey, error) {
	k := spindle.PublicKey(strings.TrimSpace(s))
	if _, err := spindle.ParsePublicKey(k); err != nil {
		return "", usagef("bad public key %q (want one as spin user prints it): %v", s, err)
	}
	return k, nil
}

// keyChangeCmd returns the run function of a command that makes a change
// of kind about the public key in its one operand.
func keyChangeCmd(kind string) func(ctx context.Context, st *State, args []string) error {
	return func(ctx context.Context, st *State, args []string) error {
		ops, err := st.keyArgs(args, 1, "PUBKEY")
		if err != nil {
			return err
		}
		k, err := pubKeyArg(ops[0])
		if err != nil {
			return err
		}
		return st.change(ctx, kind, "", k)
	}
}

func runKeyOperator(ctx context.Context, st *State, args []string) error {
	ops, err := st.keyArgs(args, 2, "add|remove PUBKEY")
	if err != nil {
		return err
	}
	kind := map[string]string{"add": keylog.ChangeAddOperator, "remove": keylog.ChangeRemoveOperator}[ops[0]]
	if kind == "" {
		return usagef("want add or remove, not %q", ops[0])
	}
	k, err := pubKeyArg(ops[1])
	if err != nil {
		return err
	}
	return st.change(ctx, kind, "", k)
}

func runKeyPolicy(ctx context.Context, st *State, args []string) error {
	ops, err := st.keyArgs(args, 1, "open|domain|invite")
	if err != nil {
		return err
	}
	if ops[0] != keylog.PolicyOpen && ops[0] != keylog.PolicyDomain && ops[0] != keylog.PolicyInvite {
		return usagef("want open, domain or invite, not %q", ops[0])
	}
	return st.change(ctx, keylog.ChangePolicy, ops[0], "")
}

func runKeyDomain(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	ops := flags.Args()
	switch {
	case len(ops) == 2 && ops[0] == "remove":
		return st.change(ctx, keylog.ChangeUndomain, ops[1], "")
	case len(ops) != 3 || ops[0] != "add":
		return usagef("usage: spin key domain add DOMAIN PUBKEY | remove DOMAIN (a domain's admin key is replaced by adding another)")
	}
	k, err := pubKeyArg(ops[2])
	if err != nil {
		return err
	}
	return st.change(ctx, keylog.ChangeDomain, ops[1], k)
}

func runKeyNetwork(ctx context.Context, st *State, args []string) error {
	ops, err := st.keyArgs(args, 1, "open|members")
	if err != nil {
		return err
	}
	if ops[0] != keylog.NetworkOpen && ops[0] != keylog.NetworkMembers {
		return usagef("want open or members, not %q", ops[0])
	}
	return st.change(ctx, keylog.ChangeNetwork, ops[0], "")
}

func runKeyNode(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	ops := flags.Args()
	if len(ops) != 2 || ops[0] != "add" && ops[0] != "remove" {
		return usagef("usage: spin key node add|remove PEERID (the peer a node's spin node status prints)")
	}
	if _, err := peer.Decode(ops[1]); err != nil {
		return usagef("%q is not a node's peer ID (spin node status prints it): %v", ops[1], err)
	}
	kind := keylog.ChangeAddNode
	if ops[0] == "remove" {
		kind = keylog.ChangeRemoveNode
	}
	return st.change(ctx, kind, ops[1], "")
}

func runKeyWitness(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	ops := flags.Args()
	switch {
	case len(ops) == 2 && ops[0] == "add":
		if _, err := keylog.WitnessOfVerifierKey(ops[1]); err != nil {
			return usagef("%s: want the verifier key a witness node prints (spin node status)", oneLineMsg(err.Error()))
		}
		return st.change(ctx, keylog.ChangeAddWitness, ops[1], "")
	case len(ops) == 2 && ops[0] == "remove":
		return st.change(ctx, keylog.ChangeRemoveWitness, ops[1], "")
	case len(ops) == 2 && ops[0] == "quorum":
		return st.change(ctx, keylog.ChangeWitnessQuorum, ops[1], "")
	}
	return usagef("usage: spin key witness add VERIFIERKEY | remove ID | quorum K")
}

// localNode returns the socket of the node in ~/spin/node, which join
// and leave act on.
// With home "", the node is the one in ~/spin/node.
func (st *State) localNode(home string) (spindle.PeerAddr, error) {
	if home == "" {
		h, err := st.home()
		if err != nil {
			return "", err
		}
		home = filepath.Join(h, "spin", "node")
	}
	addr, err := nodeSocket(home)
	if err != nil {
		st.errorf("%v", err)
		st.hint("start the node there first: spin node -home %s -keyserver ADDR", home)
		return "", errFailed
	}
	return addr, nil
}

// joinArgs parses the arguments of spin key join and leave: none, and
// -home, the home of the node to act on.
func (st *State) joinArgs(args []string) (home string, err error) {
	flags := st.flags()
	h := flags.String("home", "", "")
	if err := st.parse(flags, args); err != nil {
		return "", err
	}
	if flags.NArg() != 0 {
		return "", usagef("usage: spin %s [-home DIR]", st.cmd)
	}
	return *h, nil
}

func runKeyJoin(ctx context.Context, st *State, args []string) error {
	home, err := st.joinArgs(args)
	if err != nil {
		return err
	}
	keys, err := st.operatorKeys()
	if err != nil {
		return err
	}
	addr, err := st.localNode(home)
	if err != nil {
		return err
	}
	resp, err := client.OperatorCall[wire.KeyJoinRequest, wire.KeyJoinResponse](ctx, addr, wire.KeyJoin, &wire.KeyJoinRequest{})
	if err != nil {
		return st.fail("", err)
	}
	if resp.Status == nil || len(resp.Verifier) == 0 {
		return st.fail("", spindle.E(spindle.IO, "the node sent no cluster status or verifier key"))
	}
	data, err := signChange(keys, resp.Status, keylog.ChangeAddMember, string(resp.Verifier), keys.PublicKey())
	if err != nil {
		return st.fail("", err)
	}
	resp, err = client.OperatorCall[wire.KeyJoinRequest, wire.KeyJoinResponse](ctx, addr, wire.KeyJoin, &wire.KeyJoinRequest{Change: data})
	if err != nil {
		st.fail("", err)
		if spindle.KindOf(err) == spindle.Permission {
			st.hint("an operator must admit your key first: spin key admit %s", keys.PublicKey())
		}
		return errFailed
	}
	fmt.Fprintf(st.Stdout, "joined:    %s\n", resp.Status.ID)
	printClusterStatus(st, resp.Status)
	return nil
}

func runKeyLeave(ctx context.Context, st *State, args []string) error {
	home, err := st.joinArgs(args)
	if err != nil {
		return err
	}
	keys, err := st.operatorKeys()
	if err != nil {
		return err
	}
	addr, err := st.localNode(home)
	if err != nil {
		return err
	}
	resp, err := client.NodeCall[wire.KeyStatusRequest, wire.KeyStatusResponse](ctx, addr, wire.KeyStatus, &wire.KeyStatusRequest{})
	if err != nil {
		return st.fail("", err)
	}
	cs := resp.Status
	if cs == nil {
		return st.fail("", spindle.E(spindle.IO, "the node sent no key cluster status"))
	}
	data, err := signChange(keys, cs, keylog.ChangeRemoveMember, cs.ID, "")
	if err != nil {
		return st.fail("", err)
	}
	if _, err := client.OperatorCall[wire.KeyLeaveRequest, wire.KeyLeaveResponse](ctx, addr, wire.KeyLeave, &wire.KeyLeaveRequest{Change: data}); err != nil {
		return st.fail("", err)
	}
	fmt.Fprintf(st.Stdout, "left:      %s\n", cs.ID)
	return nil
}

func runKeyGrant(ctx context.Context, st *State, args []string) error {
	ops, err := st.keyArgs(args, 1, "REQUEST")
	if err != nil {
		return err
	}
	u, err := decodeRequest(ops[0])
	if err != nil {
		return st.fail("", err)
	}
	keys, err := st.operatorKeys()
	if err != nil {
		return err
	}
	sig, err := keys.Sign(keylog.GrantDigest(u))
	if err != nil {
		return st.fail("", err)
	}
	fmt.Fprintf(st.Stdout, "user:      %s\n", u.Name)
	fmt.Fprintf(st.Stdout, "key:       %s\n", u.PublicKey)
	fmt.Fprintf(st.Stdout, "grant:     %s\n", base64.RawURLEncoding.EncodeToString(sig))
	return nil
}
