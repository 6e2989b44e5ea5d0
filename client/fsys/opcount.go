package fsys

import (
	"sync/atomic"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// counted wraps the raw file system the kernel talks to and counts the
// requests of the kinds a copy into the mount and a sequential read make,
// so that tests can check how many the kernel sends (a request saved is a
// round trip through the kernel saved) and of what size its reads are.
type counted struct {
	fuse.RawFileSystem
	ops [numOps]atomic.Int64
	// readBytes is the sum of the sizes the reads asked for.
	readBytes atomic.Int64
}

// The counted kinds of request.
const (
	opLookup = iota
	opGetAttr
	opSetAttr
	opCreate
	opOpen
	opRead
	opWrite
	opFlush
	opFsync
	opRelease
	opMkdir
	numOps
)

var opNames = [numOps]string{"lookup", "getattr", "setattr", "create", "open", "read", "write", "flush", "fsync", "release", "mkdir"}

// counts returns the number of requests of each counted kind so far, and
// the bytes the reads asked for as "read-bytes".
func (c *counted) counts() map[string]int64 {
	m := make(map[string]int64, numOps+1)
	for i := range c.ops {
		m[opNames[i]] = c.ops[i].Load()
	}
	m["read-bytes"] = c.readBytes.Load()
	return m
}

func (c *counted) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	c.ops[opLookup].Add(1)
	return c.RawFileSystem.Lookup(cancel, h, name, out)
}

func (c *counted) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	c.ops[opGetAttr].Add(1)
	return c.RawFileSystem.GetAttr(cancel, in, out)
}

func (c *counted) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	c.ops[opSetAttr].Add(1)
	return c.RawFileSystem.SetAttr(cancel, in, out)
}

func (c *counted) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	c.ops[opCreate].Add(1)
	return c.RawFileSystem.Create(cancel, in, name, out)
}

func (c *counted) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	c.ops[opOpen].Add(1)
	return c.RawFileSystem.Open(cancel, in, out)
}

func (c *counted) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	c.ops[opRead].Add(1)
	c.readBytes.Add(int64(in.Size))
	return c.RawFileSystem.Read(cancel, in, buf)
}

func (c *counted) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	c.ops[opWrite].Add(1)
	return c.RawFileSystem.Write(cancel, in, data)
}

func (c *counted) Flush(cancel <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	c.ops[opFlush].Add(1)
	return c.RawFileSystem.Flush(cancel, in)
}

func (c *counted) Fsync(cancel <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	c.ops[opFsync].Add(1)
	return c.RawFileSystem.Fsync(cancel, in)
}

func (c *counted) Release(cancel <-chan struct{}, in *fuse.ReleaseIn) {
	c.ops[opRelease].Add(1)
	c.RawFileSystem.Release(cancel, in)
}

func (c *counted) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	c.ops[opMkdir].Add(1)
	return c.RawFileSystem.Mkdir(cancel, in, name, out)
}
