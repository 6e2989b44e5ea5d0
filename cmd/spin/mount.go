package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"spindle.dev"
	"spindle.dev/client/fsys"
)

const mountUsage = `Usage:
    spin mount [-timeout D] [-cache DIR] [-cache-size MB] DIR

Mounts the whole namespace on the local directory DIR, as a FUSE file
system: DIR/ann@example.com/docs/report.pdf is the file
ann@example.com/docs/report.pdf. DIR lists your own tree; any other
user's is entered by its name. spin mount stays in the foreground until
interrupted (Ctrl-C or SIGTERM), or until "umount DIR", and then unmounts.
A DIR that is a mount point already is refused.

Files are read block by block as programs read them, and written to a
local staging file that is stored in the background once it is closed
(fsync waits until it is stored); one not yet stored when spin mount
ends is stored by the next spin mount with the same cache. Every
operation answers within the timeout (each block of a long transfer has
the timeout to itself): if the node is gone, with an I/O error, while what
was cached stays readable; the mount recovers when the node returns. An
Access file saved in an editor re-shares the files it governs, as with
spin put. Blocks read are cached, in plaintext, in a directory only you may
open (by default in your cache directory, under spindle/mount).

Options:
    -t, -timeout D       bound of every operation: 5s, 1m, or a number
                         of seconds (default 5s)
    -cache DIR           directory of the block cache and the staging files
    -cache-size MB       size of the block cache in MiB (default 1024)
    -h, -help            print this text

Example:
    $ spin mount ~/spindle
`

func runMount(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	timeout := seconds(fsys.DefaultTimeout)
	flags.Var(&timeout, "timeout", "")
	flags.Var(&timeout, "t", "")
	cacheDir := flags.String("cache", "", "")
	cacheMB := flags.Int64("cache-size", fsys.DefaultCacheSize>>20, "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() != 1 {
		return usagef("want one DIR, %s", gotArgs(flags.NArg()))
	}
	if time.Duration(timeout) <= 0 {
		return usagef("-timeout: want a positive duration such as 5s, not %v", time.Duration(timeout))
	}
	if *cacheMB < 1 {
		return usagef("-cache-size: want at least 1 MiB, not %d", *cacheMB)
	}
	dir, err := filepath.Abs(flags.Arg(0))
	if err != nil {
		return st.fail(flags.Arg(0), err)
	}
	// Refused before dialing: a hung mount there must not hang spin.
	if mounted, err := fsys.IsMountPoint(dir); err == nil && mounted {
		st.errorf("%s: a file system is mounted there already", dir)
		st.hint("unmount it first: umount %s", dir)
		return errFailed
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	m, err := fsys.Mount(dir, fsys.Config{
		Client:    c,
		Timeout:   time.Duration(timeout),
		CacheDir:  *cacheDir,
		CacheSize: *cacheMB << 20,
		Logger:    st.Log,
	})
	if err != nil {
		var e *spindle.Error
		if errors.As(err, &e) && e.Err != nil {
			err = e.Err
		}
		return st.fail(dir, err)
	}
	st.Log.Info("mounted", "dir", dir, "user", c.User(), "timeout", time.Duration(timeout))
	fmt.Fprintf(st.Stdout, "mounted the namespace at %s, your tree at %s; stop with ^C or: umount %s\n", dir, filepath.Join(dir, string(c.User())), dir)
	done := make(chan struct{})
	go func() {
		m.Wait()
		close(done)
	}()
	select {
	case <-done: // umount DIR.
		return nil
	case <-ctx.Done():
	}
	if err := m.Unmount(); err != nil {
		return st.fail(dir, err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		st.errorf("%s: still busy; detached, it goes when no longer used", dir)
	}
	return nil
}

// seconds is a flag value that is a duration, or a number of seconds.
type seconds time.Duration

func (s *seconds) String() string { return time.Duration(*s).String() }

func (s *seconds) Set(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.ParseFloat(v, 64)
		if nerr != nil {
			return fmt.Errorf("want a duration such as 5s or 1m, or a number of seconds, not %q", v)
		}
		d = time.Duration(n * float64(time.Second))
	}
	*s = seconds(d)
	return nil
}
