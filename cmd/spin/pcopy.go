package main

import (
	"io"
	"os"
	"sync"
	"unsafe"

	"spindle.dev"
)

// parallelMin is the size from which get writes a file with several
// workers: on file systems where allocating new blocks is slow, one writer
// leaves the network and the disk idle in turn.
const parallelMin = 8 << 20

// parallelWorkers is the number of blocks fetched and written at once.
const parallelWorkers = 4

// copyParallel copies size bytes of src to dst, block by block, with
// several workers each reading one block (ReadAt, which spindle files
// allow concurrently) and writing it at its offset. It calls count with
// each block's length as it is written.
//
// Where the system allows, the blocks are written with O_DIRECT through a
// second descriptor of dst, padded to the alignment it needs; dst is then
// cut to size.
func copyParallel(dst *os.File, src io.ReaderAt, size int64, count func(int)) error {
	const chunk = spindle.MaxBlockSize
	out := dst
	direct := false
	if d, err := openDirect(dst.Name()); err == nil {
		defer d.Close()
		out, direct = d, true
	}
	var (
		mu   sync.Mutex
		next int64
		ferr error
		wg   sync.WaitGroup
	)
	take := func() (int64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if ferr != nil || next >= size {
			return 0, false
		}
		off := next
		next += chunk
		return off, true
	}
	fail := func(err error) {
		mu.Lock()
		if ferr == nil {
			ferr = err
		}
		mu.Unlock()
	}
	for range parallelWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := alignedBuffer(chunk)
			for {
				off, ok := take()
				if !ok {
					return
				}
				n := int(min(chunk, size-off))
				if _, err := src.ReadAt(buf[:n], off); err != nil && !(err == io.EOF && n > 0) {
					fail(err)
					return
				}
				w := n
				if direct {
					w = (n + directAlign - 1) / directAlign * directAlign
					clear(buf[n:w])
				}
				if _, err := out.WriteAt(buf[:w], off); err != nil {
					fail(&localError{&os.PathError{Op: "write", Path: dst.Name(), Err: err}})
					return
				}
				count(n)
			}
		}()
	}
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
