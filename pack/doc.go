// Package pack holds user keys and the packings that turn a file's
// contents into blocks and back: ee (end-to-end encrypted, the default),
// eeintegrity (plain text with signed block hashes) and plain.
//
// # Keys
//
// A user holds one P-256 key pair, used for ECDSA signatures and ECDH key
// wrapping. [Generate] makes it from a fresh [Secret] of 128 random bits,
// printed once to the user as eight proquints
// (lusab-babad-gutih-tugad.gutuk-bisog-mudof-sakat); [FromSecret]
// re-creates the same pair from the secret on any machine. The private
// scalar is HKDF-SHA256 of the secret with info "spindle.dev p256 user key
// v1" and a counter byte, retried until it lies in [1, n-1].
//
// [Keys] implements [spindle.Signer]. [Keys.Save] and [Load] keep it in a
// directory such as $HOME/spin/keys: public.key holds the public key as one
// line a person can paste, private.key (mode 0600) the private key, and
// archive.key (mode 0600) the previous keys after [Keys.Rotate], so that
// files wrapped for an old key stay readable until [Share] re-wraps them.
// Load refuses private key files that others may read.
//
// # Packings
//
// Every packing signs the entry: the writer signs, with ECDSA P-256 over
// SHA-256, a canonical encoding of the path name, writer, attributes,
// packing, 64-bit time, size, link target, a hash of the inline contents,
// the number of blocks, a hash over the ordered blocks (offset, size and
// SHA-256 of the stored bytes of each) and, for ee, a commitment to the
// file key (SHA-256 of a fixed prefix and the key). The signature covers no
// secret, so anyone holding the writer's public key can check an entry
// ([Verify]) without reading it, and a user who cannot read a file can
// still move it ([Resign]).
//
//   - ee: a random 256-bit file key per file. The file is cut into blocks of
//     [spindle.MaxBlockSize] bytes; block i is sealed with AES-256-GCM under
//     the file key, with nonce 0^32 || i (64-bit big-endian), never repeated
//     under one key, and associated data commitment || i, so that blocks can
//     be neither reordered nor moved between files. The file key is wrapped
//     for each reader: ephemeral-static ECDH P-256, HKDF-SHA256 (salt: both
//     public keys; info: packing, reader key hash, nonce) and AES-256-GCM
//     with the commitment as associated data. Wraps are named by
//     [spindle.KeyHash] of the reader's key and lie outside the signature,
//     so [Share] changes the readers without the writer; a wrap holding a
//     key other than the committed one is an Integrity failure. A file
//     that all users may read is wrapped for [AllKey], a key pair derived
//     from a public constant, which every reader can therefore unwrap.
//   - eeintegrity: plain-text blocks; the packdata carries the hash over the
//     block hashes, which the signature covers.
//   - plain: plain-text blocks and the entry signature alone.
//
// The packdata (DirEntry.Packdata) is a versioned canonical binary
// encoding described in format.go; its decoder bounds every length.
//
// # Streaming
//
// [Writer] (or [Pack]) reads a stream and hands each packed block to a
// [PutFunc] as soon as it is full, hashing and storing one block on a
// second goroutine while the next is filled and sealed; it holds three
// block buffers whatever the file's size, and [Writer.Close] signs. [Reader]
// fetches blocks through a [GetFunc] as they are read (and, while reading
// sequentially, fetches and decrypts the next two on their own
// goroutines), checks the size, hash and GCM tag of each, and supports
// random access with ReadAt and Seek; [NewReader] checks the signature and the continuity of the block
// list first. A failed check is an Integrity error naming the path and the
// block index; a reader holding no wrap gets CannotDecrypt.
//
// # Performance
//
// BenchmarkEE packs and unpacks a 256 MiB ee stream in memory, beside a
// SHA-256 loop and an AES-256-GCM loop over 1 MiB blocks on one core, and
// the ceiling: every block hashed and sealed, the blocks spread over all
// cores as pack spreads them, which is what pack and unpack would cost if
// they did nothing else. Its last part, vs-ceiling, times the steps in
// turn, keeps the best of five rounds (the machine may be shared), reports
// each direction as a share of the ceiling measured in the same run, and
// fails below 40%:
//
//	go test ./pack -run '^$' -bench EE -benchtime 1x
//
// The figures are in docs/performance.md. Pack hashes one block while
// sealing the next, and unpack verifies and decrypts two blocks at once.
// Memory per stream is fixed (three 1 MiB buffers, whatever the stream's
// length); per block, pack makes about two allocations (the block's ref
// and its share of the growing block list) and unpack about five
// (read-ahead bookkeeping and the ref decoding that verifies the list).
// TestAllocsBounded checks that both stay bounded per block.
package pack
