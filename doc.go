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
// # Names
//
// A path name is a user name followed by elements separated by slashes,
// ann@example.com/dir/file; [Parse] cleans it. A name that a new file,
// directory or link takes (and a link's target, and a rename's
// destination) must also follow these rules, which clients check before
// they sign and dir hosts check on every entry they append:
//
//   - Every element is valid UTF-8 and holds no control character: no C0
//     (U+0000 to U+001F), DEL, C1 (U+0080 to U+009F), U+2028 or U+2029
//     ([CheckElem]). A name can then never clear a terminal or pass for
//     two lines of a listing.
//   - Every element is in Unicode normalization form C (NFC), so "café"
//     typed with a precomposed é and with e plus a combining accent is one
//     name, not two names that look alike. Clients convert every name the
//     user gives to NFC before they use it (so either spelling finds the
//     file); dir hosts refuse an element not in NFC, because the writer
//     signed the name as it is. Names are otherwise compared byte for byte:
//     no case folding and no compatibility mapping (NFKC), as in Upspin.
//   - A file name does not end in a slash: "put F ann@example.com/dir/w/"
//     is an error, not a file w. An entry whose name is not clean is
//     refused by the dir host.
//
// Names stored before these rules stay valid when a log is replayed; they
// can be read, renamed and deleted, but not written again. Programs that
// print names they did not make should print them so that no name can
// pass for two lines (cmd/spin quotes such names as strconv.Quote does).
//
// # Rules for every implementation
//
// Slices passed to or returned from an interface method are never shared:
// the callee copies what it keeps and the caller owns what is returned.
// Blocks hold at most [MaxBlockSize] bytes of plaintext. Errors are built
// with [E] and carry an [Op], a [Kind], and where known a path and user;
// test them with errors.Is(err, spindle.NotExist) and similar.
package spindle
