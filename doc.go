// Package spindle holds Spindle's core types, interfaces and error type.
//
// Spindle is a peer-to-peer system for naming, storing and sharing files
// privately. Every file has a global name, ann@example.com/dir/file; its
// contents are encrypted end to end by the writer's client; and its owner
// decides who may do what with plain-text Access and Group files.
//
// # The parts
//
//   - [UserName] and [PathName] name users and files; [ParseUser] and [Parse]
//     validate and clean them.
//   - Package access parses Access and Group files and decides rights.
//   - Package pack holds user keys and the packings (ee, eeintegrity, plain).
//   - Package blocks stores content-addressed blocks ([BlockStore]).
//   - Package keyraft is the key cluster ([KeyServer]).
//   - Package dirlog holds each user's tree as a signed log ([DirServer]).
//   - Package p2p carries everything over libp2p; package node wires a peer.
//
// # Rules for every implementation
//
// Slices passed to or returned from an interface method are never shared:
// the callee copies what it keeps and the caller owns what is returned.
// Blocks hold at most [MaxBlockSize] bytes of plaintext. Errors are built
// with [E] and carry an [Op], a [Kind], and where known a path and user;
// test them with errors.Is(err, spindle.NotExist) and similar.
package spindle
