// Package p2p carries Spindle over libp2p. It is the only package, besides
// node, that imports libp2p; it converts libp2p's types to Spindle's at
// its edge ([spindle.PeerAddr], [spindle.BlockStore], *spindle.Error).
//
// # Hosts and identity
//
// [NewHost] makes a host with TCP and QUIC, Noise and TLS, and a resource
// manager sized for bulk transfer. A node's Ed25519 identity persists in
// its home ([LoadOrCreateIdentity]). [Addrs] lists a host's full dialable
// addresses and [Connect] dials one.
//
// Connections that have not authenticated a peer cannot crowd out those
// that have: an inbound TCP connection has [DefaultHandshakeTimeout] (5 s)
// to finish its security handshake, at most 256 may be in their handshake
// at once and 32 from one IP address, the oldest closed to admit a new
// one, and the resource manager leaves room for about a thousand more
// connections beside them (see handshake.go).
//
// A host's connection manager keeps [ConnsLow] to [ConnsHigh]
// connections; [HostLimits] lists every bound a host sets. Its
// [NATConfig] chooses which of libp2p's services for machines behind NAT
// it runs: port mapping, AutoNAT (client and service: in a private
// network the nodes are each other's only AutoNAT servers), hole
// punching, the relay client, and a relay service for Spindle nodes.
//
// # The DHT
//
// [NewDHT] starts a private Kademlia DHT (protocol prefix /spindle, server
// mode, no public bootstrap peers). It locates blocks and caches records;
// it is never the only copy of anything.
//
// # Protocols
//
// Node protocols exchange length-prefixed frames with a hard size limit
// ([Conn]); a peer that sends an oversized or malformed frame gets its
// stream reset and the receiver an Invalid error. [Handle] and [Call]
// serve and make one-request, one-response calls; [HandleStream] and
// [Open] give both sides the framed stream for streamed replies. Errors
// travel as *spindle.Error with their Kind.
//
// The block exchange protocol ([BlockProtocol]) serves a local
// [spindle.BlockStore] ([ServeBlocks]) and reaches another peer's as a
// [spindle.BlockStore] ([RemoteStore]), with many blocks in flight on one
// stream and every block Get returns checked against its address (Fetch
// and Refetch leave that to a caller that checks each block itself). Its
// version 2 adds a get again, for a block whose bytes were wrong, and
// proofs of holding: [RemoteStore.Prove] challenges a peer
// to show it holds a block's bytes, with a fresh nonce that only those
// bytes answer (see [blocks.Challenge]); a peer that speaks only version
// 1 ([BlockProtocolV1]) still serves blocks but proves nothing.
//
// Tunnels ([TunnelProtocol], [OpenTunnel], [Splice], [ServeTunnelEnd])
// carry a client's requests through its node to another peer in a
// channel secured end to end with that peer's key: a Noise handshake
// inside the spliced streams, so the node in the middle sees which peer
// is asked, not what ([ErrTunnelPeer], [ErrNoTunnels]).
//
// [Listen] and [Dial] hand out streams of a protocol as net.Listener and
// net.Conn, the seam for Raft's stream layer.
//
// Package p2p/p2ptest builds networks of hosts in memory for tests.
package p2p
