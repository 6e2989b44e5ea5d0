package main

import (
	"io"
	"os"
	"unsafe"

	"spindle.dev"
)

// directMin is the size from which get writes a file with O_DIRECT:
// straight from memory to the device, past the page cache. Writing a
// large file through the page cache costs more CPU than decrypting it on
// the virtual disks many machines have.
const directMin = 8 << 20

// copyDirect copies src, size bytes, to dst, a new empty file, through a
// second descriptor opened with O_DIRECT. It reports done false, having
// written nothing, if the system does not allow O_DIRECT; the caller then
// copies through the page cache.
//
// A spindle file hands over each block's plaintext where it was decrypted
// (it is an io.WriterTo) and keeps fetching the next blocks meanwhile.
// The blocks are gathered into writes of directWrite bytes.
// It calls count with the bytes written so far, as they are written.
// Write failures are *localError.
func copyDirect(dst *os.File, src io.Reader, size int64, count func(int)) (done bool, err error) {
	d, err := openDirect(dst.Name())
	if err != nil {
		return false, nil
	}
	defer d.Close()
	w := &directWriter{f: d, name: dst.Name(), buf: alignedBuffer(directWrite), count: count}
	n, err := io.Copy(w, src)
	if err == nil {
		err = w.flush()
	}
	if err == nil && n != size {
		err = io.ErrUnexpectedEOF // The file is shorter or longer than its entry says.
	}
	if err == nil {
		if terr := dst.Truncate(n); terr != nil { // Cut the padding of the last write.
			err = &localError{terr}
		}
	}
	return true, err
}

// A directWriter writes a file sequentially with O_DIRECT, which needs
// buffers, lengths and offsets aligned to directAlign. Data is gathered in
// buf and written when it is full; only aligned pieces of at least a whole
// buf go straight to the file. The last,
// partial piece is written padded with zeros by flush, and the caller cuts
// the file to its size.
type directWriter struct {
	f     *os.File
	name  string
	buf   []byte // Aligned, a multiple of directAlign long.
	n     int    // Bytes waiting in buf.
	count func(int)
}

func (w *directWriter) Write(p []byte) (int, error) {
	total := len(p)
	for len(p) > 0 {
		if w.n == 0 && len(p) >= len(w.buf) && uintptr(unsafe.Pointer(&p[0]))%directAlign == 0 {
			k := len(p) / directAlign * directAlign
			if err := w.write(p[:k], k); err != nil {
				return total - len(p), err
			}
			p = p[k:]
			continue
		}
		c := copy(w.buf[w.n:], p)
		w.n += c
		p = p[c:]
		if w.n == len(w.buf) {
			if err := w.write(w.buf, w.n); err != nil {
				return total - len(p) - c, err
			}
			w.n = 0
		}
	}
	return total, nil
}

// flush writes what waits in buf, padded to directAlign.
func (w *directWriter) flush() error {
	if w.n == 0 {
		return nil
	}
	padded := (w.n + directAlign - 1) / directAlign * directAlign
	clear(w.buf[w.n:padded])
	err := w.write(w.buf[:padded], w.n)
	w.n = 0
	return err
}

// write writes b, of which the first n bytes are data, at the end of the
// file.
func (w *directWriter) write(b []byte, n int) error {
	if _, err := w.f.Write(b); err != nil {
		return &localError{&os.PathError{Op: "write", Path: w.name, Err: err}}
	}
	w.count(n)
	return nil
}

// directWrite is the size of get's writes. While the node reads blocks
// from the same disk, a disk takes large writes faster than writes of one
// block, and a large get gains as much; 8 MiB was a little faster still
// but raised the CLI's memory by more than it gained (docs/performance.md).
const directWrite = 4 * spindle.MaxBlockSize

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
