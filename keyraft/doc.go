// Package keyraft is Spindle's key cluster: a few nodes that replicate the
// directory of user key records with Raft (hashicorp/raft, with a bolt log
// store and file snapshots on disk) and append every accepted change to a
// Merkle transparency log, so that clients can check what they are told.
//
// Key records, configuration changes, tree heads, proofs and the checkers
// that clients run are in package [spindle.dev/keyraft/keylog], which
// both clients and members use; this package is the members' side only,
// and a client need not link it (nor Raft and bolt with it).
//
// # Policy
//
// The cluster runs the "open" policy ([keylog.PolicyOpen]) or, if its
// operators chose it, the "domain" policy ([keylog.PolicyDomain]), under
// which a new name is granted only with the countersignature of its
// domain's admin key over [keylog.GrantDigest] of the record
// ([Cluster.PutGranted]). Otherwise:
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
//     names are refused; the dir host list is bounded
//     ([keylog.MaxDirHosts], [keylog.MaxPeerAddrLen]).
//
// Failures are Invalid (malformed record, stale version or Prev), Exist (a
// new registration of a taken name), NotExist (an update of an unregistered
// name) and Permission (a signature that does not verify, or a signer without
// authority). The leader checks a request against its state before proposing
// it, and every member checks it again, deterministically, when it applies
// the Raft log, so a replayed log always yields the same state. A member that
// is not the leader checks only a request's form (a malformed one is Invalid)
// and hands it back with [ErrNotLeader]: its replica may lag the leader's, and
// would refuse requests that depend on changes it has not applied yet.
//
// # Configuration
//
// The cluster's configuration is in the replicated state and its changes
// are leaves of the transparency log: the operators, the node operator
// keys admitted to join, the namespace policy and the domain admin keys.
// A [keylog.Change] is signed by a current operator and carries the
// sequence number it makes, so a replayed or stale change is refused
// (Invalid) and repeating the last one is accepted without effect
// ([keylog.ConfigState.Check] judges it, as clients do). The first operator
// is set by a ChangeInit signed by its own key, accepted only while there
// is none: the first member's node makes it when it bootstraps the
// cluster. The members and their tree-head verifier keys are part of the
// configuration: [Cluster.Join] adds a member only on a ChangeAddMember
// signed by a node operator whose key the operators admitted (or by an
// operator), and [Cluster.Leave] removes one.
//
// # Batching
//
// Records and changes put on the leader at about the same time are
// proposed together, up to [MaxBatch] in one Raft log entry, so they share
// one Raft apply and one fsync of the log on each member; at most two
// batches are in flight, and the next fills while they commit. Each
// record of a batch is checked and applied in order and gets its own
// outcome. Each member verifies each record's signature once: the leader
// when Put receives it, every member (for the records it has not verified
// yet) in parallel across its CPUs before applying a batch; the ordered
// checks then take a verification's word only for the very key the state
// requires at that point, so no outcome depends on it.
//
// # Transparency log
//
// Every accepted record, and every configuration change, is a leaf of a
// golang.org/x/mod/sumdb/tlog Merkle tree. A tree head is a sumdb/note
// note naming the tree and the configuration in force in it (see
// [keylog.HeadInfo]); it counts only with the signatures of a majority of
// the members that configuration records, each with its own Ed25519 key
// ([Cluster.VerifierKey]). A member gathers them in rounds, asking the
// others through [Config.Cosign], and each signs only a head of its own
// log ([Cluster.SignHead]; [keylog.VerifyQuorum] checks a head). A member
// alone in its configuration, or in a cluster that records no members
// yet, signs alone. [Cluster.LookupProof] returns a record with an
// inclusion proof against the newest cosigned head that holds it,
// [keylog.VerifyLookup] checks it, and a [keylog.Checker] remembers the
// newest head a client has seen and demands a consistency proof
// ([Cluster.ConsistencyProof]) for every other, so a cluster that
// rewrites its history is caught. [Cluster.History] and
// [keylog.VerifyHistory] let owners audit every version of their own
// record.
//
// A client is tied to no member: a following checker
// ([keylog.NewFollowingChecker]) keeps the configuration changes
// ([keylog.ConfigLog]), and a head naming a newer configuration comes
// with the changes in between, proved in its tree
// ([Cluster.ConfigProofs]) and checked as the members check them. So a
// member that joined is trusted because the log says so, and a member
// that was removed signs nothing a client accepts; a false head would
// need a majority of some configuration's members.
//
// # Members and transport
//
// [Open] starts a member from a [Config]. Members are named by ID (a node's
// libp2p peer ID), which is both the Raft server ID and its address; Raft
// traffic runs over the Config's net.Listener and Dial function, which node
// backs with libp2p streams, so this package never imports libp2p. A fresh
// member started with Bootstrap forms a one-member cluster; [Cluster.AddVoter]
// grows it to three or five. Any member serves lookups from its replica,
// which lags the leader by the changes in flight (typically one heartbeat,
// and without bound while the member is cut off); [Cluster.LookupLatest]
// reads through the leader, behind a Raft barrier, for read-after-write.
// [Cluster.Put] and [Cluster.Change] work on the leader, and on any other
// member fail with Transient wrapping [ErrNotLeader] (unless the request is
// malformed) so that the caller forwards it to [Cluster.Leader].
package keyraft
