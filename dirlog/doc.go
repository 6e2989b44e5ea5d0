// Package dirlog holds each user's directory tree as a signed, hash-chained,
// append-only log of writer-signed operations, as one dir host keeps
// it. This package holds what a writer signs and a reader checks:
// entries, the fold of a log into a tree, the tree map, heads, proofs,
// checkpoints and audits, and the writer ([Client], [Submit]); package
// spindle.dev/dirlog/host keeps the logs and serves them.
//
// # Entries
//
// An [Entry] records one operation on one tree: its sequence number, the
// hash of the previous entry, a time, the writer, the operation (put,
// delete, mkdir, link, rename), the affected [spindle.DirEntry] and, for a
// rename, the new name. The writer's client builds the entry for the next
// sequence number and the current head hash, and signs the SHA-256 of its
// canonical, domain-separated encoding ([Entry.Sign]). The dir host
// assigns nothing: if the head moved meanwhile, [host.Server.Append] refuses the
// entry with a Transient error and the client re-reads the head and signs
// again ([Client] does this).
//
// Access and Group files travel inside the entry that writes them
// (DirEntry.Inline, at most [MaxInline] bytes), so rights can be decided
// from logs alone. The host appends only those that pass access.Check;
// replay reads those already in a log with the more lenient parsers, as
// they were read when appended.
//
// # Validity
//
// Whether an entry is valid is a deterministic function of the log prefix
// before it: its signature must verify against the writer's key, and the
// writer must hold the needed right under the Access and Group files in
// force at that point: create for a new name, write to overwrite, delete to
// remove, delete on the old and create on the new name to rename; Access and
// Group files are the owner's alone. A tree begins with the owner's mkdir of
// its root. A Group file owned by another user is read from that user's log
// on the same host. The host records, beside the entry, the writer's key
// that verified it and the sequence number of every other log it consulted,
// so that replay (a host at start-up) and [Audit] reproduce the decision
// exactly, also after the writer has rotated keys (given a key history).
//
// Two rules bind an entry to what its writer knew when it signed. A put
// of an encrypted file names in ReadersAt the head of the tree under
// which the writer worked out the readers it wrapped the file key for;
// it is valid only if neither the Access file governing the name, nor
// one between it and the name, nor a Group file of the tree that its
// read right names (through other groups too) changed after that
// ([Tree.CheckOp]; the error is Stale, and the writer works the readers
// out again). So a writer fooled by an older answer wraps no key that
// reaches the log for a reader the owner had removed. Every entry names
// in KeyAt the size of the key cluster's log its writer followed; a
// tree's anchors never decrease, and a key its holder replaced signs
// only entries anchored before the record that replaced it, in every
// tree ([HeldKeys], which also says what remains). Entries of the first
// format ([Entry.Legacy]) carry neither and are judged as they were;
// none is appended now, and none is valid after an anchored entry.
//
// New names follow one more rule, checked when an entry is appended and
// not in replay: every name an entry brings into the tree (the name it
// puts, a link's target, a rename's destination) must pass
// [spindle.CheckName], so holds no control character and is valid UTF-8
// ([CheckNewNames]). An entry that was valid when it was written stays
// valid, so a log from before the rule opens as it was, and its owner can
// still delete or rename such a name. (The node also requires new names to
// be in Unicode NFC; see package spindle.)
//
// # Storage
//
// A log is a sequence of records framed with a length and a CRC-32C
// ([AppendFrame], [ScanFrames]); each record holds an entry, the writer's
// key that verified it and the other logs its decision consulted
// ([Record]). A log may start with a [Checkpoint], stored as records of
// its own. Package spindle.dev/dirlog/host stores and serves the logs: it
// fsyncs every entry before it acknowledges it, re-reads and re-checks
// every log at start-up, and compares each with how far the host had
// marked it stored.
//
// A log whose end is torn (the last record runs to the end of the file
// and does not check, as a crash during an append leaves it, never
// acknowledged) has that record cut, kept beside the log. Any other
// damage (a record that does not check, an entry that is no longer
// valid, a log shorter than its mark) is not cut at start-up: the log is
// left as it is and not served, and every read and append of its tree
// fails with kind Damaged, so that no reader sees an older state and
// nobody starts a new tree over it. Such a log is listed as "log damaged"
// by spin node status until the operator repairs it (spin node -repair
// USER, which keeps the entries that verify and moves the rest aside) or
// it is refilled from another of its dir hosts. A log whose entries need
// a key the key cluster cannot tell yet is neither: it waits, unserved
// and unchanged ("log waiting"), until the host can decide it.
//
// # Reads
//
// Every entry a read returns carries what a reader needs to check, without
// trusting the host, that it belongs at its name ([spindle.DirEntry.Signed]):
// an Access or Group file or a link carries the signed entry that put it
// (a file's writer signs its name in the packdata instead), and an entry
// moved by renames carries each signed rename entry that moved it, oldest
// first, beside SignedName, the name its writer signed. Only a rename sets
// SignedName: the host refuses an entry whose writer set it, and, given
// [host.Config.CheckPut], checks the packing's signature of every file put.
//
// # Heads and the tree map
//
// [host.Server.Head] returns the log's head (user, sequence, entry hash, map
// root, time) signed by the dir host, so that readers can detect rollback
// and forks. The map root is the root of a sparse Merkle tree of the
// folded tree (see smt.go): from [MapKey] of each item's name to the hash
// of the signed entry that put it there (chained through [MovedValue]
// with every rename that moved it since); a deleted item is absent. It is
// a deterministic function of the log: [MapRoot] recomputes it from the
// entries alone, so an owner, a mirror or an auditor catches a host that
// signs a root its log does not give ([AuditReport] carries the root
// replay found). A [MapProof] proves against a root that a name maps to
// an entry (inclusion) or is absent (exclusion), with hashes only.
// [host.Server.LookupProved] answers a Lookup with such a proof against the
// signed head, and the signed entries the item's value is made of, which
// [Proved.Verify] checks.
package dirlog
