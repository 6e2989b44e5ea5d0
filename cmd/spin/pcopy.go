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

// parallelWriters is the number of blocks written to the local file at
// once. On file systems where allocating new blocks is slow, one writer
// would leave the network idle while it writes.
const parallelWriters = 2

// copyParallel copies size bytes of src to dst. One goroutine reads src in
// order, block by block, so that a spindle file keeps reading ahead (it
// fetches the next blocks only while it is read sequentially); writers
// write the blocks at their offsets meanwhile. It calls count, from any
// goroutine, with each block's length as it is written.
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
	// Two buffers per writer: one being written, one being filled.
	free := make(chan []byte, 2*parallelWriters)
	for range cap(free) {
		free <- alignedBuffer(chunk)
	}
	jobs := make(chan job, cap(free))
	var wg sync.WaitGroup
	for range parallelWriters {
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
	}
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
