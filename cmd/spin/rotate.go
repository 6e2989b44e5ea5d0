package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"spindle.dev"
	"spindle.dev/client"
	"spindle.dev/pack"
)

const rotateUsage = `Usage:
    spin rotate

Replaces your key with a new one, as after a key may have been copied. It
makes the new key from a new recovery secret, printed once (write it down:
the old secret no longer makes your keys); registers it with the key
cluster, in an update signed by your old key; keeps the old key in your
key archive (keys/archive.key), so that files wrapped for it stay readable;
and re-wraps the keys of the files in your tree for the new key, as
spin share -fix does. Files written before stay readable, by you and by
those you share them with. Files that others own are re-wrapped for your
new key when their owners run spin share -fix or put an Access file.

A rotation takes steps, and one that was stopped (by a crash, Ctrl-C or a
lost connection) is finished by running spin rotate again: until the last
step is done the new secret waits in keys/rotating, readable by you only,
and the next spin rotate takes it up where the last one stopped, printing
it again, instead of making another. Other commands that find the new key
registered and the old one still in use say so.

Options:
    -h, -help   print this text

Example:
    $ spin rotate
    Your new recovery secret is:
    ...
`

// rotator is a client that can rotate its user's key.
type rotator interface {
	RotateKey(ctx context.Context, s pack.Secret) error
}

// rotateStep is called after each step of a rotation, with its name; tests
// stop a rotation there, as a crash would.
var rotateStep = func(step string) {}

// pendingFile is the file in a key directory that holds the new recovery
// secret of a rotation not yet finished.
const pendingFile = "rotating"

func runRotate(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 0 {
		return usagef("spin rotate takes no arguments; it rotates your own key")
	}
	cfg, err := st.loadConfig()
	if err != nil {
		return err
	}
	if st.NewClient == nil {
		return errors.New("no network client built in")
	}
	keys, err := pack.Load(cfg.Secrets)
	if err != nil {
		return st.dialFailed(cfg, keysProblem(cfg, err))
	}
	pending := filepath.Join(cfg.Secrets, pendingFile)
	// One rotation at a time: a second would overwrite, or remove, the
	// first one's new secret.
	lock, err := spindle.LockFile(pending+".lock", false)
	if err != nil {
		if errors.Is(err, spindle.Exist) {
			st.errorf("another spin rotate is running for these keys")
			return errFailed
		}
		return st.fail("", err)
	}
	defer lock.Unlock()
	secret, resumed, err := readPending(pending)
	if err != nil {
		st.errorf("%s: %v", pending, err)
		st.hint("it holds the new recovery secret of an unfinished rotation; if you wrote that secret down, fix the file, else remove it and run spin rotate again")
		return errFailed
	}
	if resumed {
		fmt.Fprintf(st.Stdout, "Finishing the rotation begun earlier, to the key of the secret in %s.\n", pending)
	} else {
		if secret, err = pack.NewSecret(); err != nil {
			return st.fail("", err)
		}
		// The secret is on disk before the key is registered, so that
		// a rotation stopped at any point can be finished.
		if err := spindle.ReplaceFile(pending, []byte(secret.String()+"\n"), 0o600, true); err != nil {
			return st.fail(pending, err)
		}
	}
	rotateStep("pending")
	next, err := pack.FromSecret(cfg.Username, secret)
	if err != nil {
		return st.fail(pending, err)
	}

	// Register the new key unless an earlier run did; then use it here.
	if keys.PublicKey() != next.PublicKey() {
		c, err := st.NewClient(ctx, cfg)
		var km *client.KeyMismatchError
		switch {
		case err == nil:
			st.client = c
			r, ok := c.(rotator)
			if !ok {
				return st.fail("", spindle.E(spindle.Invalid, "this client cannot rotate keys"))
			}
			if err := r.RotateKey(ctx, secret); err != nil {
				st.fail(string(cfg.Username), err)
				st.hint("nothing is lost: run spin rotate again to finish; the new secret waits in %s", pending)
				return errFailed
			}
			rotateStep("registered")
		case errors.As(err, &km) && km.Registered == next.PublicKey():
			// Registered by a run that stopped before saving the keys.
		default:
			return st.dialFailed(cfg, err)
		}
		if err := keys.Rotate(secret); err != nil {
			return st.fail(cfg.Secrets, err)
		}
		if err := keys.Save(cfg.Secrets); err != nil {
			st.fail(cfg.Secrets, err)
			st.hint("the new key is registered: run spin rotate again to save it; the new secret waits in %s", pending)
			return errFailed
		}
		rotateStep("saved")
	}
	fmt.Fprintf(st.Stdout, "Your new recovery secret is:\n\n    %s\n\n", secret)
	fmt.Fprintf(st.Stdout, "Write it down and keep it safe: the old one no longer makes your keys.\n")
	fmt.Fprintf(st.Stdout, "Key registered for %s: %s\n", cfg.Username, next.PublicKey())
	fmt.Fprintf(st.Stdout, "Old keys kept in %s\n", filepath.Join(cfg.Secrets, pack.ArchiveFile))

	// Re-wrap the user's files for the new key.
	c, err := st.Client(ctx)
	if err != nil {
		st.hint("your new key is registered and saved; to re-wrap your files, run spin rotate again")
		return err
	}
	root := spindle.PathName(string(cfg.Username) + "/")
	reports, err := c.Share(ctx, root, true, true)
	fixed, failed := 0, 0
	for _, r := range reports {
		switch {
		case r.Err != nil:
			st.fail(string(r.Name), r.Err)
			failed++
		case r.Fixed:
			fixed++
		}
	}
	if err == nil && failed > 0 {
		err = errFailed
	}
	if err != nil {
		st.fail(string(root), err)
		st.hint("your new key is registered and saved; to finish re-wrapping your files, run spin rotate again")
		return errFailed
	}
	rotateStep("rewrapped")
	fmt.Fprintf(st.Stdout, "Re-wrapped %d %s of %d in %s\n", fixed, plural(fixed, "file"), len(reports), printName(string(root)))
	if err := os.Remove(pending); err != nil && !errors.Is(err, os.ErrNotExist) {
		return st.fail(pending, err)
	}
	return nil
}

// readPending reads the secret of an unfinished rotation from file, if
// there is one.
func readPending(file string) (s pack.Secret, ok bool, err error) {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return s, false, nil
	}
	if err != nil {
		return s, false, err
	}
	s, err = pack.ParseSecret(strings.TrimSpace(string(data)))
	if err != nil {
		return s, false, fmt.Errorf("not a recovery secret: %w", err)
	}
	return s, true, nil
}

// pendingRotation returns the file holding the secret of an unfinished
// rotation in the key directory dir, or "" if there is none.
func pendingRotation(dir string) string {
	f := filepath.Join(dir, pendingFile)
	if fileExists(f) {
		return f
	}
	return ""
}
