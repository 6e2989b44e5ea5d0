package client

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"testing"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"spindle.dev"
	"spindle.dev/keyraft/keylog"
	"spindle.dev/pack"
)

// fuzzUser returns the keys of user made from a fixed secret, n.
func fuzzUser(tb testing.TB, user spindle.UserName, n byte) *pack.Keys {
	k, err := pack.FromSecret(user, pack.Secret{n})
	if err != nil {
		tb.Fatal(err)
	}
	return k
}

// frameRecords encodes records as the input of FuzzCheckVersions: each
// preceded by its length, two bytes big-endian.
func frameRecords(us ...*spindle.User) []byte {
	var b []byte
	for _, u := range us {
		r := keylog.EncodeRecord(u)
		b = binary.BigEndian.AppendUint16(b, uint16(len(r)))
		b = append(b, r...)
	}
	return b
}

// A key audit judges the versions of a record that a node hands it; they
// may be hostile. Every version checkVersions passes is one the key of the
// version before signed, linked to it, in order.
func FuzzCheckVersions(f *testing.F) {
	ann1, ann2, thief := fuzzUser(f, "ann@example.com", 1), fuzzUser(f, "ann@example.com", 2), fuzzUser(f, "ann@example.com", 3)
	v1 := &spindle.User{Name: "ann@example.com", PublicKey: ann1.PublicKey(), Version: 1}
	if err := keylog.Sign(v1, ann1); err != nil {
		f.Fatal(err)
	}
	v2 := keylog.Next(v1)
	v2.PublicKey, v2.DirSeq = ann2.PublicKey(), 4
	if err := keylog.Sign(v2, ann1); err != nil {
		f.Fatal(err)
	}
	forged := keylog.Next(v2)
	forged.PublicKey = thief.PublicKey()
	if err := keylog.Sign(forged, thief); err != nil {
		f.Fatal(err)
	}
	f.Add(frameRecords(v1))
	f.Add(frameRecords(v1, v2))
	f.Add(frameRecords(v1, v2, forged))
	f.Add(frameRecords(v2, v1))
	base := fuzzUser(f, "ann@example.com", 9)
	f.Fuzz(func(t *testing.T, data []byte) {
		var versions []KeyVersion
		for len(data) >= 2 && len(versions) < 16 {
			n := int(binary.BigEndian.Uint16(data))
			data = data[2:]
			if n > len(data) {
				break
			}
			u, err := keylog.DecodeRecord(data[:n])
			data = data[n:]
			if err != nil {
				continue
			}
			versions = append(versions, KeyVersion{User: u, Index: int64(len(versions))})
		}
		if err := checkVersions(versions, func(spindle.UserName) ([]spindle.PublicKey, error) {
			return []spindle.PublicKey{base.PublicKey()}, nil
		}); err != nil {
			t.Fatal(err)
		}
		for i, v := range versions {
			if v.Problem != "" {
				continue
			}
			u := v.User
			if u.Version != int64(i+1) {
				t.Fatalf("version %d at place %d passes", u.Version, i+1)
			}
			key := u.PublicKey
			if i > 0 {
				key = versions[i-1].User.PublicKey
			}
			if u.SignedBy != u.Name {
				key = base.PublicKey()
			}
			if err := spindle.Verify(key, keylog.SigningDigest(u), u.Signature); err != nil {
				t.Fatalf("version %d passes without the signature of the key before it: %v", u.Version, err)
			}
		}
	})
}

// The key log file holds the newest tree head a client has seen and the
// cluster's configuration changes; a client reads it back at every start,
// and it may be damaged.
func FuzzParseKeyLog(f *testing.F) {
	// The first form, upgraded when read.
	f.Add([]byte("spindle-keyraft/m0+bf1f695a+AbJt5oSwufR3oqTbN+7S9M96rhy7Y1HtR1ZlWWcRzzgI\nversion ann@example.com 2\nversion bob@example.com 1\n"))
	f.Add([]byte("spindle-keyraft/m0+bf1f695a+AbJt5oSwufR3oqTbN+7S9M96rhy7Y1HtR1ZlWWcRzzgI\nversion ann@example.com 0\n"))
	f.Add([]byte("not a key\n"))
	skey, vkey, err := note.GenerateKey(bytes.NewReader(make([]byte, 32)), "spindle-keyraft/fuzz")
	if err != nil {
		f.Fatal(err)
	}
	s, err := note.NewSigner(skey)
	if err != nil {
		f.Fatal(err)
	}
	// A one-member cluster whose operator made the init change naming
	// the member, and a head of its tree of that change and two records.
	op := fuzzUser(f, "op@example.com", 9)
	init := &keylog.Change{Seq: 1, Kind: keylog.ChangeInit, Key: op.PublicKey(), Arg: vkey}
	if err := keylog.SignChange(init, op); err != nil {
		f.Fatal(err)
	}
	enc := keylog.EncodeChange(init)
	hashes := []tlog.Hash{tlog.RecordHash(enc), tlog.RecordHash([]byte("a")), tlog.RecordHash([]byte("b"))}
	th, err := tlog.TreeHash(3, fixedHashes(hashes))
	if err != nil {
		f.Fatal(err)
	}
	head, err := note.Sign(&note.Note{Text: fmt.Sprintf("spindle.dev key log\n3\n%s\nconfig 1\n", th)}, s)
	if err != nil {
		f.Fatal(err)
	}
	change := fmt.Sprintf("change 0 %s\n", base64.StdEncoding.EncodeToString(enc))
	f.Add([]byte(keyLogHeader + "\nboot " + vkey + "\n" + change + "version ann@example.com 2\n" + string(head)))
	f.Add([]byte(keyLogHeader + "\nboot " + vkey + "\n" + change))
	f.Add([]byte(keyLogHeader + "\nboot " + vkey + "\nversion ann@example.com 2\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := parseKeyLog("keylog", data)
		if err != nil {
			return
		}
		// What parses is written back as it was read, but for versions'
		// order and spacing, and reads back the same.
		out := l.content(keyLogFile{})
		again, err := parseKeyLog("keylog", out)
		if err != nil {
			t.Fatalf("key log written back does not parse: %v\n%q", err, out)
		}
		if again.boot != l.boot || again.chk().Tree() != l.chk().Tree() || len(again.versions) != len(l.versions) ||
			len(again.chk().ConfigEntries()) != len(l.chk().ConfigEntries()) {
			t.Fatalf("key log reads back differently")
		}
		for u, v := range l.versions {
			if again.versions[u] != v {
				t.Fatalf("version of %s reads back as %d, was %d", u, again.versions[u], v)
			}
		}
	})
}

// fixedHashes is a tlog.HashReader over the stored hashes of a tree whose
// leaves hash to the given record hashes.
func fixedHashes(leaves []tlog.Hash) tlog.HashReaderFunc {
	var stored []tlog.Hash
	for i, h := range leaves {
		hs, err := tlog.StoredHashesForRecordHash(int64(i), h, tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
			out := make([]tlog.Hash, len(idx))
			for j, x := range idx {
				out[j] = stored[x]
			}
			return out, nil
		}))
		if err != nil {
			panic(err)
		}
		stored = append(stored, hs...)
	}
	return func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for j, x := range idx {
			if x < 0 || x >= int64(len(stored)) {
				return nil, fmt.Errorf("hash %d out of range", x)
			}
			out[j] = stored[x]
		}
		return out, nil
	}
}
