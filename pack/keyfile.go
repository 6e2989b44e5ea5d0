package pack

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"spindle.dev"
)

// The files that [Keys.Save] writes and [Load] reads, in one directory
// (conventionally $HOME/spin/keys).
const (
	PublicKeyFile  = "public.key"  // The current public key as one line of text, mode 0644.
	PrivateKeyFile = "private.key" // The current private key, mode 0600.
	ArchiveFile    = "archive.key" // Previous private keys, newest first, mode 0600.
)

// DefaultDir returns the conventional key directory, $HOME/spin/keys.
func DefaultDir() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", spindle.E(spindle.Op("pack.DefaultDir"), spindle.NotExist, err)
	}
	return filepath.Join(home, "spin", "keys"), nil
}

const (
	privateHeader = "spindle private key v1"
	archiveHeader = "spindle key archive v1"
	// maxKeyFile bounds the size of a key file that Load reads.
	maxKeyFile = 64 << 10
	// maxArchived bounds the number of keys in an archive.
	maxArchived = 256
)

// Save writes the keys to dir, creating it with mode 0700 if needed: the
// public key to [PublicKeyFile], the private key to [PrivateKeyFile] with
// mode 0600, and the archive, if not empty, to [ArchiveFile] with mode
// 0600. Each file is written to a temporary file, synced and renamed, so a
// crash leaves either the old or the new file.
//
// Save never destroys a key: if dir already holds a private key that is
// neither k's current key nor in k's archive, it fails with Exist and
// writes nothing. To replace a key, [Keys.Rotate] the loaded keys instead.
func (k *Keys) Save(dir string) error {
	const op spindle.Op = "pack.Save"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return spindle.E(op, k.user, spindle.IO, err)
	}
	privName := filepath.Join(dir, PrivateKeyFile)
	old, err := readPrivateFile(privName)
	switch {
	case errors.Is(err, spindle.NotExist):
	case err != nil:
		return spindle.E(op, k.user, err)
	default:
		_, pairs, err := parseKeyFile(old, privateHeader)
		if err != nil {
			return spindle.E(op, k.user, spindle.Invalid, fmt.Errorf("%s: %w", privName, err))
		}
		for _, p := range pairs {
			if k.pairFor(p.hash) == nil {
				return spindle.E(op, k.user, spindle.Exist, fmt.Sprintf("%s holds another key, which saving would destroy; load and rotate it instead", privName))
			}
		}
	}
	// The order keeps the keys whole if Save stops between two files: the
	// archive first, so that a replaced key is in it before the private
	// key file no longer holds it (Load drops the current key from the
	// archive); then the public key file goes, since it would not match
	// the new private key until it is written again (Load derives a
	// missing one).
	if len(k.archive) > 0 {
		var arch bytes.Buffer
		fmt.Fprintf(&arch, "%s\nuser %s\n", archiveHeader, k.user)
		for _, p := range k.archive {
			writeKeyLine(&arch, p)
		}
		if err := spindle.ReplaceFile(filepath.Join(dir, ArchiveFile), arch.Bytes(), 0o600, true); err != nil {
			return spindle.E(op, k.user, spindle.IO, err)
		}
		saveStep(ArchiveFile)
	}
	pubName := filepath.Join(dir, PublicKeyFile)
	if pub, err := os.ReadFile(pubName); err == nil && string(pub) != string(k.current.pub)+"\n" {
		if err := os.Remove(pubName); err != nil {
			return spindle.E(op, k.user, spindle.IO, err)
		}
		saveStep("-" + PublicKeyFile)
	}
	var priv bytes.Buffer
	fmt.Fprintf(&priv, "%s\nuser %s\n", privateHeader, k.user)
	writeKeyLine(&priv, k.current)
	if err := spindle.ReplaceFile(privName, priv.Bytes(), 0o600, true); err != nil {
		return spindle.E(op, k.user, spindle.IO, err)
	}
	saveStep(PrivateKeyFile)
	if err := spindle.ReplaceFile(pubName, []byte(string(k.current.pub)+"\n"), 0o644, true); err != nil {
		return spindle.E(op, k.user, spindle.IO, err)
	}
	return nil
}

// saveStep is called after each file Save writes or removes but the
// last; tests stop a Save there.
var saveStep = func(file string) {}

func writeKeyLine(w io.Writer, p *keyPair) {
	d, _ := p.priv.Bytes() // Cannot fail for a P-256 key.
	fmt.Fprintf(w, "key %s %s\n", p.pub, base64.RawURLEncoding.EncodeToString(d))
}

// Load reads keys written by [Keys.Save] from dir. It refuses, with an
// Invalid error naming the file, a private key or archive file that anyone
// but its owner may read or write, and a public key file that does not
// match the private key. A missing archive means an empty one; a missing
// private key file is NotExist.
func Load(dir string) (*Keys, error) {
	const op spindle.Op = "pack.Load"
	privData, err := readPrivateFile(filepath.Join(dir, PrivateKeyFile))
	if err != nil {
		return nil, spindle.E(op, err)
	}
	user, pairs, err := parseKeyFile(privData, privateHeader)
	if err != nil {
		return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("%s: %w", filepath.Join(dir, PrivateKeyFile), err))
	}
	if len(pairs) != 1 {
		return nil, spindle.E(op, user, spindle.Invalid, fmt.Sprintf("%s holds %d keys, want 1", filepath.Join(dir, PrivateKeyFile), len(pairs)))
	}
	k := &Keys{user: user, current: pairs[0]}

	pubName := filepath.Join(dir, PublicKeyFile)
	pubData, err := os.ReadFile(pubName)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// The public key follows from the private one.
	case err != nil:
		return nil, spindle.E(op, user, spindle.IO, err)
	default:
		pub := spindle.PublicKey(strings.TrimSpace(string(pubData)))
		h, err := spindle.KeyHash(pub)
		if err != nil {
			return nil, spindle.E(op, user, spindle.Invalid, fmt.Errorf("%s: %w", pubName, err))
		}
		if h != k.current.hash {
			return nil, spindle.E(op, user, spindle.Invalid, fmt.Sprintf("%s does not match %s", pubName, PrivateKeyFile))
		}
	}

	archName := filepath.Join(dir, ArchiveFile)
	archData, err := readPrivateFile(archName)
	if errors.Is(err, spindle.NotExist) {
		return k, nil
	}
	if err != nil {
		return nil, spindle.E(op, err)
	}
	archUser, archived, err := parseKeyFile(archData, archiveHeader)
	if err != nil {
		return nil, spindle.E(op, user, spindle.Invalid, fmt.Errorf("%s: %w", archName, err))
	}
	if archUser != user {
		return nil, spindle.E(op, user, spindle.Invalid, fmt.Sprintf("%s belongs to %s", archName, archUser))
	}
	for _, p := range archived {
		if p.hash != k.current.hash {
			k.archive = append(k.archive, p)
		}
	}
	return k, nil
}

// readPrivateFile reads a file holding private keys, refusing one whose
// mode lets anyone but its owner read or write it.
func readPrivateFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, spindle.E(spindle.NotExist, err)
	}
	if err != nil {
		return nil, spindle.E(spindle.IO, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, spindle.E(spindle.IO, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, spindle.E(spindle.Invalid, fmt.Sprintf("%s is not a regular file", name))
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, spindle.E(spindle.Invalid, fmt.Sprintf("%s has mode %04o, but a private key file must be readable only by its owner", name, perm))
	}
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, spindle.E(spindle.IO, err)
	}
	if len(data) > maxKeyFile {
		return nil, spindle.E(spindle.Invalid, fmt.Sprintf("%s is larger than %d bytes", name, maxKeyFile))
	}
	return data, nil
}

// parseKeyFile decodes a private key or archive file:
//
//	<header>
//	user <user name>
//	key <public key> <base64url 32-byte private scalar>
//	…
//
// It checks that every public key matches its private scalar and that no
// key appears twice.
func parseKeyFile(data []byte, header string) (spindle.UserName, []*keyPair, error) {
	if len(data) > maxKeyFile {
		return "", nil, fmt.Errorf("key file is larger than %d bytes", maxKeyFile)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) < 2 || lines[0] != header {
		return "", nil, fmt.Errorf("not a key file: first line is not %q", header)
	}
	name, ok := strings.CutPrefix(lines[1], "user ")
	if !ok {
		return "", nil, fmt.Errorf("line 2: want \"user <name>\"")
	}
	user, err := spindle.CleanUser(spindle.UserName(name))
	if err != nil {
		return "", nil, fmt.Errorf("line 2: %w", err)
	}
	if string(user) != name {
		return "", nil, fmt.Errorf("line 2: user name %q is not in canonical form", name)
	}
	if len(lines)-2 > maxArchived {
		return "", nil, fmt.Errorf("more than %d keys", maxArchived)
	}
	var pairs []*keyPair
	seen := make(map[[32]byte]bool)
	for i, line := range lines[2:] {
		n := i + 3
		f := strings.Split(line, " ")
		if len(f) != 3 || f[0] != "key" {
			return "", nil, fmt.Errorf("line %d: want \"key <public key> <private key>\"", n)
		}
		d, err := base64.RawURLEncoding.Strict().DecodeString(f[2])
		if err != nil || len(d) != 32 {
			return "", nil, fmt.Errorf("line %d: private key is not 32 bytes of base64url", n)
		}
		p, err := parseScalar(d)
		if err != nil {
			return "", nil, fmt.Errorf("line %d: %v", n, err)
		}
		if string(p.pub) != f[1] {
			return "", nil, fmt.Errorf("line %d: public key does not match private key", n)
		}
		if seen[p.hash] {
			return "", nil, fmt.Errorf("line %d: key appears twice", n)
		}
		seen[p.hash] = true
		pairs = append(pairs, p)
	}
	return user, pairs, nil
}
