// Package keylog is what a client of Spindle's key cluster checks, and
// what the cluster's members check alike: the key records of users, the
// cluster's configuration changes, and the Merkle transparency log over
// both, with its signed tree heads and proofs. It is pure code, with no
// network, disk or Raft, so that a client links none of the cluster's
// machinery. Clients build and sign their records with it and check
// every record, head and proof a member hands them; the members (package
// [spindle.dev/keyraft], which replicates the log with Raft) encode,
// check and prove the same leaves with it.
//
// # Records and signatures
//
// A record is a [spindle.User]: name, public key, dir hosts, version, the
// hash of the record it replaces (Prev, see [RecordHash]), on a key
// rotation the sequence of the user's own directory log up to which the
// replaced key still signs (DirSeq, see dirlog.HeldKeys), the signer and a
// signature over [SigningDigest]. [EncodeRecord] and [DecodeRecord] give its
// canonical binary form and [CheckRecord] its form on its own; [Sign] and
// [Next] help a client build one. Under the domain policy a new name also
// needs its domain admin's countersignature over [GrantDigest].
//
// # Configuration
//
// The cluster's configuration is made by its changes, which are leaves of
// the transparency log: the operators, the node operator keys admitted to
// join, the members and their tree-head verifier keys, the namespace
// policy ([PolicyOpen] or [PolicyDomain]) and the domain admin keys. A
// [Change] is signed by a current operator ([SignChange]) and carries the
// sequence number it makes; [EncodeChange] and [DecodeChange] give its
// form. A [ConfigState] is the configuration the changes make:
// [ConfigState.Check] decides whether a change may follow, deterministically,
// and [ConfigState.Apply] makes it. The members keep one in their
// replicated state; a client keeps one in its [ConfigLog].
//
// # Transparency log
//
// Every accepted record and configuration change is a leaf of a
// golang.org/x/mod/sumdb/tlog Merkle tree. A tree head is a sumdb/note
// note of the text [FormatHead] writes, naming the tree and the
// configuration in force in it ([HeadInfo]); it counts only with the
// signatures of a majority of that configuration's members
// ([VerifyQuorum]), each named by [MemberKeyName] of its ID. A [Proof]
// carries a record with its inclusion proof against a head;
// [VerifyLookup] checks it and [VerifyHistory] checks every version of a
// record. A [Checker] remembers the newest head a client has seen and
// demands a consistency proof (from a [TreeProver]) for every other, so a
// cluster that rewrites its history is caught.
//
// A client is tied to no member: a following checker
// ([NewFollowingChecker]) keeps the configuration changes in a
// [ConfigLog], and a head naming a newer configuration comes with the
// changes in between, proved in its tree (by a [ConfigProver]) and
// checked as the members check them. So a member that joined is trusted
// because the log says so, and a member that was removed signs nothing a
// client accepts; a false head would need a majority of some
// configuration's members.
package keylog
