package pack

import (
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"spindle.dev"
)

func TestSecretText(t *testing.T) {
	s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	text := s.String()
	if len(text) != 8*5+7 || strings.Count(text, "-") != 6 || strings.Count(text, ".") != 1 {
		t.Fatalf("secret text %q has the wrong shape", text)
	}
	for _, variant := range []string{text, strings.ToUpper(text), strings.ReplaceAll(text, "-", " "), strings.NewReplacer("-", "", ".", "").Replace(text), "  " + text + "\n"} {
		got, err := ParseSecret(variant)
		if err != nil || got != s {
			t.Fatalf("ParseSecret(%q) = %v, %v; want %v", variant, got, err, s)
		}
	}
	// The proquint paper's examples: 127.0.0.1 is lusab-babad.
	if got := (Secret{0x7f, 0, 0, 1}).String(); !strings.HasPrefix(got, "lusab-babad-") {
		t.Fatalf("proquint of 7f000001 is %q", got)
	}
	for _, bad := range []string{"", "lusab", text + "-babab", text[:len(text)-1], strings.Replace(text, text[1:2], "x", 1), "lusab-babad-gutih-tugad.gutuk-bisog-mudof-saka1", "aaaaa-babad-gutih-tugad.gutuk-bisog-mudof-sakat", "lusab-babad-gutih-tugad.gutuk-bisog-mudof-sakat-é"} {
		if _, err := ParseSecret(bad); !errors.Is(err, spindle.Invalid) {
			t.Errorf("ParseSecret(%q): %v, want Invalid", bad, err)
		}
	}
}

func TestFromSecret(t *testing.T) {
	s, _ := ParseSecret("lusab-babad-gutih-tugad.gutuk-bisog-mudof-sakat")
	k1, err := FromSecret(alice, s)
	if err != nil {
		t.Fatal(err)
	}
	k2, _ := FromSecret(bob, s)
	if k1.PublicKey() != k2.PublicKey() {
		t.Fatal("the same secret gave different keys")
	}
	s[15] ^= 1
	k3, _ := FromSecret(alice, s)
	if k3.PublicKey() == k1.PublicKey() {
		t.Fatal("different secrets gave the same key")
	}
	g, secret, err := Generate(carol)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := FromSecret(carol, secret)
	if g.PublicKey() != again.PublicKey() || g.UserName() != carol {
		t.Fatal("Generate's secret does not re-create its keys")
	}
	digest := sha256.Sum256([]byte("hello"))
	sig, err := g.Sign(digest[:])
	if err != nil {
		t.Fatal(err)
	}
	if err := spindle.Verify(g.PublicKey(), digest[:], sig); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Sign(digest[:31]); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("Sign of a short digest: %v", err)
	}
}

func TestKeyFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spin", "keys")
	k := testKeys(t, alice, 1)
	if _, err := Load(dir); !errors.Is(err, spindle.NotExist) {
		t.Fatalf("Load of a missing directory: %v, want NotExist", err)
	}
	if err := k.Save(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, ArchiveFile)); !os.IsNotExist(err) {
		t.Fatal("archive written for keys that were never rotated")
	}
	for name, mode := range map[string]os.FileMode{PrivateKeyFile: 0o600, PublicKeyFile: 0o644, ".": 0o700} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("%s: mode %v, %v; want %v", name, fi.Mode().Perm(), err, mode)
		}
	}
	pub, _ := os.ReadFile(filepath.Join(dir, PublicKeyFile))
	if string(pub) != string(k.PublicKey())+"\n" {
		t.Fatalf("public key file holds %q", pub)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.PublicKey() != k.PublicKey() || got.UserName() != alice || len(got.PublicKeys()) != 1 {
		t.Fatalf("loaded keys differ: %v %v", got.UserName(), got.PublicKeys())
	}

	// Saving other keys over them is refused.
	if err := testKeys(t, alice, 7).Save(dir); !errors.Is(err, spindle.Exist) {
		t.Fatalf("Save over another key: %v, want Exist", err)
	}
	if got, err := Load(dir); err != nil || got.PublicKey() != k.PublicKey() {
		t.Fatalf("refused Save changed the files: %v", err)
	}

	// Rotate twice: the archive holds both old keys, newest first.
	k.Rotate(Secret{2})
	k.Rotate(Secret{3})
	if err := k.Save(dir); err != nil {
		t.Fatal(err)
	}
	got, err = Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(stringsOf(got.PublicKeys()), " ") != strings.Join(stringsOf(k.PublicKeys()), " ") || len(got.PublicKeys()) != 3 {
		t.Fatalf("archive not preserved: %v vs %v", got.PublicKeys(), k.PublicKeys())
	}

	// Files that anyone else may read are refused.
	for _, name := range []string{PrivateKeyFile, ArchiveFile} {
		p := filepath.Join(dir, name)
		os.Chmod(p, 0o640)
		_, err := Load(dir)
		if !errors.Is(err, spindle.Invalid) || !strings.Contains(err.Error(), "0640") || !strings.Contains(err.Error(), p) {
			t.Fatalf("Load with %s mode 0640: %v", name, err)
		}
		os.Chmod(p, 0o600)
	}
	// A public key file that does not match.
	other := testKeys(t, bob, 2)
	os.WriteFile(filepath.Join(dir, PublicKeyFile), []byte(other.PublicKey()), 0o644)
	if _, err := Load(dir); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("Load with a mismatched public key: %v, want Invalid", err)
	}
	os.Remove(filepath.Join(dir, PublicKeyFile))
	if _, err := Load(dir); err != nil {
		t.Fatalf("Load without a public key file: %v", err)
	}
	// A private key file whose public half was edited.
	priv, _ := os.ReadFile(filepath.Join(dir, PrivateKeyFile))
	edited := strings.Replace(string(priv), string(k.PublicKey()), string(other.PublicKey()), 1)
	os.WriteFile(filepath.Join(dir, PrivateKeyFile), []byte(edited), 0o600)
	if _, err := Load(dir); !errors.Is(err, spindle.Invalid) {
		t.Fatalf("Load with an edited private key file: %v, want Invalid", err)
	}
}

func stringsOf(keys []spindle.PublicKey) []string {
	var s []string
	for _, k := range keys {
		s = append(s, string(k))
	}
	return s
}

// A mistyped recovery secret is refused with an error that names where
// the mistake is and shows no part of the secret.
func TestParseSecretErrorShowsNoSecret(t *testing.T) {
	good := "lusab-babad-gutih-tugad.gutuk-bisog-mudof-sakat"
	for _, typed := range []string{
		"lusab-babad-gutih-tugad.gutuk-bisog-mudof-sakaq", // q is not a proquint letter
		"lusab-babad-gutih-tugad.gutuk-bisog-mudof-saakt", // vowel where a consonant goes
		"lusab-babad-gutih-tugad.gutuk-bisog-mudof-sak",   // too short
	} {
		_, err := ParseSecret(typed)
		if !errors.Is(err, spindle.Invalid) {
			t.Fatalf("ParseSecret(%q) = %v, want Invalid", typed, err)
		}
		msg := err.Error()
		for _, w := range strings.FieldsFunc(good+"-saakt", func(r rune) bool { return r == '-' || r == '.' }) {
			if strings.Contains(msg, w) {
				t.Errorf("error %q echoes secret word %q", msg, w)
			}
		}
		if strings.Contains(msg, `'q'`) || strings.Contains(msg, `"q"`) {
			t.Errorf("error %q echoes the mistyped character", msg)
		}
	}
}

// A Save of rotated keys stopped after any of its files leaves keys that
// load and hold every key: the new one, or the old one with the new one
// not yet in place, and never a key lost from both files.
func TestSaveStoppedKeepsKeys(t *testing.T) {
	defer func(old func(string)) { saveStep = old }(saveStep)
	type stop struct{}
	steps := []string{ArchiveFile, "-" + PublicKeyFile, PrivateKeyFile}
	for _, at := range steps {
		t.Run(at, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "keys")
			k := testKeys(t, alice, 1)
			if err := k.Save(dir); err != nil {
				t.Fatal(err)
			}
			old := k.PublicKey()
			if err := k.Rotate(Secret{2}); err != nil {
				t.Fatal(err)
			}
			saveStep = func(file string) {
				if file == at {
					panic(stop{})
				}
			}
			func() {
				defer func() {
					if r := recover(); r != (stop{}) {
						t.Fatalf("Save did not reach step %s: %v", at, r)
					}
				}()
				k.Save(dir)
			}()
			saveStep = func(string) {}
			got, err := Load(dir)
			if err != nil {
				t.Fatalf("keys of a Save stopped after %s do not load: %v", at, err)
			}
			keys := stringsOf(got.PublicKeys())
			if !slices.Contains(keys, string(old)) {
				t.Fatalf("Save stopped after %s lost the old key: %v", at, keys)
			}
			if at == PrivateKeyFile && got.PublicKey() != k.PublicKey() {
				t.Fatalf("Save stopped after %s: current key is not the new one", at)
			}
			// Saving again finishes it.
			if err := got.Save(dir); err != nil {
				t.Fatal(err)
			}
			if got.PublicKey() != k.PublicKey() {
				if err := got.Rotate(Secret{2}); err != nil {
					t.Fatal(err)
				}
				if err := got.Save(dir); err != nil {
					t.Fatal(err)
				}
			}
			done, err := Load(dir)
			if err != nil || strings.Join(stringsOf(done.PublicKeys()), " ") != strings.Join(stringsOf(k.PublicKeys()), " ") {
				t.Fatalf("after the Save stopped after %s was done again: %v, %v", at, done, err)
			}
		})
	}
}
