package main

import (
	"io"
	"os"
	"sync"
	"unsafe"

	"spindle.dev"
)

// parallelMin is the size from which get writes a file through
// copyParallel.
const parallelMin = 8 << 20

// copyBuffers is the number of blocks copyParallel holds: one being
// written, the others being filled.
const copyBuffers = 3

// copyParallel copies size bytes of src to dst, reading and writing at
// the same time. The caller's goroutine reads src in order, block by
// block, so that a spindle file keeps reading ahead (it fetches the next
// blocks only while it is read sequentially); a writer goroutine writes
// the blocks meanwhile, in order too: on ext4, writers at several offsets
// of a growing file wait for each other and are slower than one. It calls
// count with each block's length as it is written.
//
// Where the system allows, the blocks are written with O_DIRECT through a
// second descriptor of dst, padded to the alignment it needs; dst is then
// cut to size.
func copyParallel(dst *os.File, src io.Reader, size int64, count func(int)) error {
	const chunk = spindle.MaxBlockSize
	out := dst
	direct := false
	if d, err := openDirect(dst.Name()); err == nil {
		defer d.Close()
		out, direct = d, true
	}
	type job struct {
		buf []byte
		off int64
		n   int
	}
	var (
		mu   sync.Mutex
		ferr error
	)
	fail := func(err error) {
		mu.Lock()
		if ferr == nil {
			ferr = err
		}
		mu.Unlock()
	}
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ferr != nil
	}
	free := make(chan []byte, copyBuffers)
	for range cap(free) {
		free <- alignedBuffer(chunk)
	}
	jobs := make(chan job, cap(free))
	var wg sync.WaitGroup
	wg.Go(func() {
		for j := range jobs {
			if !failed() {
				w := j.n
				if direct {
					w = (j.n + directAlign - 1) / directAlign * directAlign
					clear(j.buf[j.n:w])
				}
				if _, err := out.WriteAt(j.buf[:w], j.off); err != nil {
					fail(&localError{&os.PathError{Op: "write", Path: dst.Name(), Err: err}})
				} else {
					count(j.n)
				}
			}
			free <- j.buf
		}
	})
	for off := int64(0); off < size && !failed(); {
		buf := <-free
		n := int(min(chunk, size-off))
		if _, err := io.ReadFull(src, buf[:n]); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // The file is shorter than its entry says.
			}
			fail(err)
			break
		}
		jobs <- job{buf, off, n}
		off += int64(n)
	}
	close(jobs)
	wg.Wait()
	if ferr == nil && direct {
		if err := dst.Truncate(size); err != nil {
			ferr = &localError{err}
		}
	}
	return ferr
}

// directAlign is the alignment O_DIRECT needs of buffers, lengths and offsets.
const directAlign = 4096

// alignedBuffer returns a buffer of n bytes (n a multiple of directAlign)
// whose start is aligned to directAlign.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+directAlign)
	off := int(uintptr(unsafe.Pointer(&b[0])) % directAlign)
	if off != 0 {
		off = directAlign - off
	}
	return b[off : off+n : off+n]
}
