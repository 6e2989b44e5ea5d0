package main

import (
	"context"
	"errors"
	"sort"
	"sync"

	"spindle.dev"
)

const rmUsage = `Usage:
    spin rm [-R] PATH...

Removes each file, link or empty directory PATH. A link is removed, not
what it points to.

Options:
    -R, -recursive   remove directories and everything below them
    -h, -help        print this text

Example:
    $ spin rm @/docs/draft.txt
    $ spin rm -R @/tmp
`

func runRm(ctx context.Context, st *State, args []string) error {
	flags := st.flags()
	recursive := flags.Bool("recursive", false, "")
	flags.BoolVar(recursive, "R", false, "")
	if err := st.parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() == 0 {
		return usagef("want at least one PATH")
	}
	c, err := st.Client(ctx)
	if err != nil {
		return err
	}
	r := &remover{st: st, c: c}
	for _, arg := range flags.Args() {
		name, err := st.spinPath(c, arg)
		if err != nil {
			r.failed = true
			continue
		}
		if *recursive {
			r.removeAll(ctx, name)
			continue
		}
		if err := c.Delete(ctx, name); err != nil {
			r.fail(string(name), err)
			if errors.Is(err, spindle.NotEmpty) {
				st.hint("to remove a directory and everything in it, use: spin rm -R %s", name)
			}
		}
	}
	if r.failed {
		return errFailed
	}
	return nil
}

type remover struct {
	st     *State
	c      spindle.Client
	mu     sync.Mutex // Guards failed.
	failed bool
}

// fail reports a failure; it is safe for concurrent use.
func (r *remover) fail(path string, err error) {
	r.st.fail(path, err)
	r.mu.Lock()
	r.failed = true
	r.mu.Unlock()
}

// removeAll removes name and, if it is a directory, everything below it,
// deepest first. It reports whether name was removed.
func (r *remover) removeAll(ctx context.Context, name spindle.PathName) bool {
	e, err := r.c.Lookup(ctx, name, false)
	if err != nil {
		r.fail(string(name), err)
		return false
	}
	if e.Attr.IsDir() {
		entries, err := r.c.Glob(ctx, children(name))
		if err != nil {
			r.fail(string(name), err)
			return false
		}
		sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
		ok := true
		var files []spindle.PathName
		for _, child := range entries {
			if child.Attr.IsDir() {
				ok = r.removeAll(ctx, child.Name) && ok
			} else {
				files = append(files, child.Name)
			}
		}
		// Files go several at a time, as cp puts them.
		var wg sync.WaitGroup
		var mu sync.Mutex
		sem := make(chan struct{}, cpWorkers)
		for _, f := range files {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := r.c.Delete(ctx, f); err != nil {
					r.fail(string(f), err)
					mu.Lock()
					ok = false
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if !ok {
			return false // The reason has been reported; the directory is not empty.
		}
	}
	if err := r.c.Delete(ctx, name); err != nil {
		r.fail(string(name), err)
		return false
	}
	return true
}
