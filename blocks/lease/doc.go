// Package lease decides which blocks a node may collect: a block is
// kept while a dir host whose trees reference it renews a lease on it,
// and collected only once no lease on it is alive and it has sat here
// without one for a grace period.
//
// # Leases
//
// A lease is (block, dir host, expiry). Every dir host walks the trees it
// hosts (every entry of every user's current tree; see dirlog's Refs) and,
// every renewal interval, renews a lease on each block they reference
// with the nodes that may hold it: the r+2 nodes nearest to the block's
// key in the network (where Put and repair place copies, with slack for
// a copy repair placed one node further out), found with one DHT lookup
// per keyspace region rather than one per block; the holders it found
// through the DHT when the block first appeared in its trees (the node a
// client wrote through, say); and itself. Renewals travel in batches, one message per holder
// and user holding up to [MaxDigests] blocks, over an authenticated
// libp2p stream, so the holder knows which peer leases: nothing needs
// signing, and a lease names its dir host by the stream's peer ID. A
// message asks for a term; the holder grants at most Config.MaxTerm.
// The holder makes the leases durable (an fsynced journal, [Table]) before
// it acknowledges them, so they survive a restart.
//
// Deleting a file is nothing more than the dir hosts no longer renewing
// its blocks: their leases run out after the term, and the blocks go at
// the next collection pass after that. A block shared by two files stays
// while either references it.
//
// # Collection
//
// A [Collector] pass lists the blocks held and deletes a block only if
//
//   - no lease on it is alive, and
//   - the collector has seen it here, without a live lease, for at least
//     the grace period, counted from the later of the first pass that saw
//     it unleased and the last Put of it (so that a block just written,
//     not yet in any entry, or written again by a new file after its old
//     one was deleted, is not collected before its dir host leases it).
//
// The check and the delete happen under one lock that Put also takes
// ([Collector.Guard]), so a Put that returns has stored a block that the
// collector will not delete within the grace. The grace clock is in
// memory: after a restart every unleased block gets a whole grace again.
//
// # Hostile peers
//
// Leases only ever keep blocks: nothing a peer sends shortens or drops
// another dir host's lease, so no peer can make a node collect a block
// that an honest dir host references while that dir host renews it. A
// peer that is not a dir host can keep blocks here only within quotas: a
// node accepts leases only from peers its own rule admits (node: a dir
// host of the user the message names, or a server of the private DHT
// when the node does not know the user), each peer holds at most
// Config.PeerLeases leases (the node's own trees are bound only by the
// total) and all together Config.MaxLeases, and a lease
// keeps a block for at most Config.MaxTerm unless renewed. What a peer
// may push here at all is bounded by the replica store's hold limit. When the table
// is full and a lease had to be refused, collection pauses (for a whole
// MaxTerm) rather than risk collecting a block whose lease was refused;
// so does a journal found damaged at start-up. Pauses are written to the
// journal, so a restart does not end them.
//
// # Scale
//
// A node with 10^5 referenced blocks, r = 3 and a slack of 2 sends about
// 5·10^5 lease entries (32 bytes each, 16 MB) every renewal interval (six
// hours by default), in messages of [MaxDigests]; in a network of N
// nodes it makes about N/10 region lookups for them (node's
// TestNearestByRegion checks a simulated network of 2000 nodes; its count
// is in docs/performance.md), and one provider lookup
// per block new in its trees. A holder appends one journal record and
// one fsync per message and keeps about 100 bytes of memory per lease.
// The journal is compacted when it grows to several times what its live
// leases need.
//
// Defaults: leases live [DefaultTerm] (two weeks), dir hosts renew every
// six hours (so a dir host may be off for nearly two weeks before the
// blocks it references become collectable), the grace is [DefaultGrace]
// and a collection pass runs every hour.
package lease
