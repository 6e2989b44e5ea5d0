// Package keyraft is Spindle's key cluster: a few nodes that replicate the
// directory of user key records with Raft (hashicorp/raft, with a bolt log
// store and file snapshots on disk) and append every accepted change to a
// Merkle transparency log, so that clients can check what they are told.
//
// # Records and signatures
//
// A record is a [spindle.User]: name, public key, dir hosts, version, the
// hash of the record it replaces (Prev, see [RecordHash]), on a key
// rotation the sequence of the user's own directory log up to which the
// replaced key still signs (DirSeq, see dirlog.HeldKeys), the signer and a
// signature over [SigningDigest]. [EncodeRecord] and [DecodeRecord] give its
// canonical binary form; [Sign] and [Next] help a client build one.
//
// # Policy
//
// The cluster runs the "open" policy:
//   - A new name is granted to the first record whose signature, by its own
//     key, proves possession of that key. A +suffix user
//     (ann+camera@example.com) is registered by its base user instead, whose
//     record must exist and whose current key signs.
//   - A record changes only by a new version (Version+1, Prev the hash of the
//     current record) signed by the current record's key, which is how a key
//     is rotated, or by the base user's current key for a +suffix user.
//   - DirSeq never decreases from one version to the next: that would make
//     entries signed with a replaced key valid again.
//   - Names are never reassigned or deleted; [spindle.AllUsers] and invalid
//     names are refused; the dir host list is bounded ([MaxDirHosts],
//     [MaxPeerAddrLen]).
//
// Failures are Invalid (malformed record, stale version or Prev), Exist (a
// new registration of a taken name), NotExist (an update of an unregistered
// name) and Permission (a signature that does not verify, or a signer without
// authority). A request is checked on the member that receives it and again,
// deterministically, when each member applies the Raft log, so a replayed log
// always yields the same state.
//
// # Transparency log
//
// Every accepted record is a leaf of a golang.org/x/mod/sumdb/tlog Merkle
// tree. Members sign tree heads as sumdb/note notes with their own Ed25519
// key ([Cluster.VerifierKey]). [Cluster.LookupProof] returns a record with
// an inclusion proof against a signed head, [VerifyLookup] checks it, and a
// [Checker] remembers the newest head a client has seen and demands a
// consistency proof ([Cluster.ConsistencyProof]) for every other, so a
// cluster that rewrites its history is caught. [Cluster.History] and
// [VerifyHistory] let owners audit every version of their own record.
//
// # Members and transport
//
// [Open] starts a member from a [Config]. Members are named by ID (a node's
// libp2p peer ID), which is both the Raft server ID and its address; Raft
// traffic runs over the Config's net.Listener and Dial function, which node
// backs with libp2p streams, so this package never imports libp2p. A fresh
// member started with Bootstrap forms a one-member cluster; [Cluster.AddVoter]
// grows it to three or five. Any member serves lookups from its replica;
// [Cluster.Put] works on the leader, and on any other member fails with
// Transient wrapping [ErrNotLeader] so that the caller forwards it to
// [Cluster.Leader].
package keyraft
