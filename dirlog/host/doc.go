// Package host keeps and serves the directory logs of package
// spindle.dev/dirlog on one dir host.
//
// A [Server] holds the logs of many users. It checks every entry a
// writer appends against the log before it (signature, rights, names;
// see package dirlog), stores it, fsynced, before it acknowledges it
// ([Server.Append]; [Server.AppendBatch] stores entries of one tree that
// cannot affect each other's checks with one fsync), and folds it into
// the user's tree, which answers reads under the Access rules: Lookup,
// Glob, WhichAccess, Watch, and their proved forms against the signed
// head ([Server.Head]).
//
// # Storage
//
// A [Store] keeps one [Log] per user: [DiskStore] a file per user in a
// directory, [MemStore] memory, for tests. A store that is also a
// [Marker] records how far each log was stored ([Mark]), so that a log
// that lost acknowledged entries is caught when the server opens.
//
// # Start-up, damage and waiting logs
//
// [New] re-reads every log and re-checks every entry as [dirlog.Audit]
// does. A torn last record (what a crash during an append leaves, never
// acknowledged) is cut and kept beside the log. A log damaged otherwise
// (a record that does not check, an entry no longer valid, a log shorter
// than its mark) is not cut: it is left as it is and not served, every
// read and append of its tree failing with kind Damaged, and it is
// reported by [Server.Damaged] (the node lists it as "log damaged") until
// the operator repairs it ([Config.Repair], spin node -repair, which keeps
// the entries that verify and moves the rest aside; [Config.Fix] mends
// only a flipped byte the hash chain pins) or the node refills it from
// another of its dir hosts ([Server.BeginRefill], [RefillContext],
// [Server.EndRefill]). A log whose entries need a key the key cluster
// cannot tell yet waits, unserved and unchanged ([Server.Waiting], "log
// waiting"), until [Server.Resume] can decide it.
//
// # Reads
//
// Reads name the requesting user explicitly and follow Upspin's rules: a
// user with no right on a name learns nothing about it (Private); NotExist
// is reported only to users with some right on the name; a user with some
// right but not read gets the entry marked AttrIncomplete, without blocks
// or packdata; a write is refused with Permission to a user with some
// right on the name, Private to anyone else. Listing needs the list right:
// Glob searches only directories the user may list (one that may not be
// listed is Private), and Watch shows an item below the watched name only
// to a user who may list every directory on the way to it. Read alone
// fetches a file whose name the user knows. Errors about groups are told
// only to users who may know of the group, and no error or answer gives a
// log's position (its head, a sequence number) to a user without a right
// in the tree.
//
// # Compaction
//
// [Server.Compact] replaces the entries of a log up to its head with a
// signed [dirlog.Checkpoint] of the tree; [Config.CompactAfter] has the
// server compact a log once it grows that far past its checkpoint.
// [Server.StartFrom] starts a log from another host's checkpoint.
package host
