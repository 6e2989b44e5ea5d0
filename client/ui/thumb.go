package ui

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"image"
	"image/draw"
	_ "image/gif" // Decoders for thumbnails.
	"image/jpeg"
	_ "image/png"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	xdraw "golang.org/x/image/draw"

	_ "golang.org/x/image/bmp"
	_ "golang.org/x/image/webp"

	"spindle.dev"
)

// Thumbnails are made on this machine, from the decrypted picture, and
// kept in the cache directory under a name derived from the file's name
// and version, so a changed file gets a new one.
const (
	thumbSize      = 320      // Longest side, in pixels.
	maxThumbSource = 64 << 20 // Larger files get no thumbnail.
	maxThumbPixels = 80 << 20 // Nor do pictures of more pixels.
	thumbWorkers   = 2        // Thumbnails made at once.
)

// A thumbCache makes and keeps thumbnails.
type thumbCache struct {
	dir  string
	work chan struct{} // Holds a token per thumbnail being made.
	once sync.Once

	mu     sync.Mutex          // Guards making.
	making map[string]*pending // By key.
}

// A pending thumbnail is being made; waiters read data and err after done.
type pending struct {
	done chan struct{}
	data []byte
	err  error
}

// thumbKey names the thumbnail of one version of a file.
func thumbKey(e *spindle.DirEntry) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d\x00%s\x00", e.Name, e.Sequence, e.Time, e.Size, e.Writer)
	h.Write(e.Packdata)
	return hex.EncodeToString(h.Sum(nil)[:20])
}

// thumbTimeout bounds the making of one thumbnail.
const thumbTimeout = 2 * time.Minute

// get returns the JPEG thumbnail of e, made with open if it is not in the
// cache. Requests for one thumbnail at once make it once, under a context
// of its own: the first request's browser giving up on it (as browsers do
// with images scrolled away) does not fail the others.
func (tc *thumbCache) get(ctx context.Context, e *spindle.DirEntry, open func(context.Context) (io.ReadSeekCloser, error)) ([]byte, error) {
	tc.once.Do(func() {
		tc.work = make(chan struct{}, thumbWorkers)
		tc.making = map[string]*pending{}
	})
	key := thumbKey(e)
	file := filepath.Join(tc.dir, key+".jpg")
	if data, err := os.ReadFile(file); err == nil {
		return data, nil
	}
	tc.mu.Lock()
	p := tc.making[key]
	if p == nil {
		p = &pending{done: make(chan struct{})}
		tc.making[key] = p
		tc.mu.Unlock()
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), thumbTimeout)
		p.data, p.err = tc.make(mctx, e, open)
		cancel()
		if p.err == nil {
			// A thumbnail lost in a crash is made again: no fsync.
			if err := spindle.ReplaceFile(file, p.data, 0o600, false); err != nil {
				p.err = err
			}
		}
		tc.mu.Lock()
		delete(tc.making, key)
		tc.mu.Unlock()
		close(p.done)
		return p.data, p.err
	}
	tc.mu.Unlock()
	select {
	case <-p.done:
		return p.data, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (tc *thumbCache) make(ctx context.Context, e *spindle.DirEntry, open func(context.Context) (io.ReadSeekCloser, error)) ([]byte, error) {
	if e.Size > maxThumbSource {
		return nil, spindle.E(e.Name, spindle.Invalid, "too large for a thumbnail")
	}
	select {
	case tc.work <- struct{}{}:
		defer func() { <-tc.work }()
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	f, err := open(ctx)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return makeThumb(f)
}

// makeThumb decodes the picture in f and returns its thumbnail as JPEG,
// turned upright as its EXIF orientation says.
func makeThumb(f io.ReadSeeker) ([]byte, error) {
	head := make([]byte, 128<<10)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, err
	}
	head = head[:n]
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	cfg, _, err := image.DecodeConfig(f)
	if err != nil {
		return nil, fmt.Errorf("not a picture this can read: %w", err)
	}
	if cfg.Width <= 0 || cfg.Height <= 0 || int64(cfg.Width)*int64(cfg.Height) > maxThumbPixels {
		return nil, fmt.Errorf("picture of %dx%d pixels: too large for a thumbnail", cfg.Width, cfg.Height)
	}
	orient := exifOrientation(head)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	img, _, err := image.Decode(f)
	if err != nil {
		return nil, fmt.Errorf("not a picture this can read: %w", err)
	}
	return encodeThumb(img, orient)
}

// encodeThumb scales img to fit thumbSize, turns it upright and encodes it.
func encodeThumb(img image.Image, orient int) ([]byte, error) {
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	if w > thumbSize || h > thumbSize {
		if w >= h {
			w, h = thumbSize, max(1, h*thumbSize/b.Dx())
		} else {
			w, h = max(1, w*thumbSize/b.Dy()), thumbSize
		}
	}
	small := image.NewRGBA(image.Rect(0, 0, w, h))
	if w == b.Dx() && h == b.Dy() {
		draw.Draw(small, small.Bounds(), img, b.Min, draw.Src)
	} else {
		xdraw.ApproxBiLinear.Scale(small, small.Bounds(), img, b, draw.Src, nil)
	}
	out := orientImage(small, orient)
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, out, &jpeg.Options{Quality: 82}); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// orientImage returns m as EXIF orientation o (1 to 8) says to show it.
func orientImage(m *image.RGBA, o int) *image.RGBA {
	if o < 2 || o > 8 {
		return m
	}
	w, h := m.Bounds().Dx(), m.Bounds().Dy()
	ow, oh := w, h
	if o >= 5 {
		ow, oh = h, w
	}
	out := image.NewRGBA(image.Rect(0, 0, ow, oh))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			var nx, ny int
			switch o {
			case 2: // Mirrored.
				nx, ny = w-1-x, y
			case 3: // Upside down.
				nx, ny = w-1-x, h-1-y
			case 4: // Upside down, mirrored.
				nx, ny = x, h-1-y
			case 5: // Transposed.
				nx, ny = y, x
			case 6: // Turned left: turn right.
				nx, ny = h-1-y, x
			case 7: // Transversed.
				nx, ny = h-1-y, w-1-x
			case 8: // Turned right: turn left.
				nx, ny = y, w-1-x
			}
			i, j := m.PixOffset(x, y), out.PixOffset(nx, ny)
			copy(out.Pix[j:j+4], m.Pix[i:i+4])
		}
	}
	return out
}

// exifOrientation returns the EXIF orientation (1 to 8) of the JPEG whose
// first bytes are data, or 1 if it has none that can be read. data comes
// from anyone: every offset is checked.
func exifOrientation(data []byte) int {
	if len(data) < 4 || data[0] != 0xFF || data[1] != 0xD8 {
		return 1
	}
	i := 2
	for i+4 <= len(data) {
		if data[i] != 0xFF {
			return 1
		}
		marker := data[i+1]
		if marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7) {
			i += 2
			continue
		}
		if marker == 0xDA || marker == 0xD9 { // Image data: no EXIF after it.
			return 1
		}
		n := int(binary.BigEndian.Uint16(data[i+2:]))
		if n < 2 || i+2+n > len(data) {
			return 1
		}
		seg := data[i+4 : i+2+n]
		if marker == 0xE1 && len(seg) >= 6 && string(seg[:6]) == "Exif\x00\x00" {
			return tiffOrientation(seg[6:])
		}
		i += 2 + n
	}
	return 1
}

// tiffOrientation reads the Orientation tag of IFD0 of a TIFF header.
func tiffOrientation(t []byte) int {
	if len(t) < 8 {
		return 1
	}
	var bo binary.ByteOrder
	switch string(t[:2]) {
	case "II":
		bo = binary.LittleEndian
	case "MM":
		bo = binary.BigEndian
	default:
		return 1
	}
	if bo.Uint16(t[2:]) != 42 {
		return 1
	}
	off := int64(bo.Uint32(t[4:]))
	if off < 8 || off+2 > int64(len(t)) {
		return 1
	}
	count := int64(bo.Uint16(t[off:]))
	for k := int64(0); k < count; k++ {
		e := off + 2 + 12*k
		if e+12 > int64(len(t)) {
			return 1
		}
		if bo.Uint16(t[e:]) != 0x0112 {
			continue
		}
		if bo.Uint16(t[e+2:]) != 3 { // SHORT
			return 1
		}
		if o := int(bo.Uint16(t[e+8:])); o >= 1 && o <= 8 {
			return o
		}
		return 1
	}
	return 1
}

// thumb serves the thumbnail of a picture.
func (s *Server) thumb(w http.ResponseWriter, r *http.Request) {
	p, err := s.pathValue(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	e, err := s.c.Lookup(r.Context(), p.Path(), true)
	if err != nil {
		pr := explain(err)
		http.Error(w, pr.Title, pr.Status)
		return
	}
	if e.Attr.IsDir() {
		http.Error(w, "a folder has no thumbnail", http.StatusNotFound)
		return
	}
	data, err := s.thumbs.get(r.Context(), e, func(ctx context.Context) (io.ReadSeekCloser, error) {
		return s.c.Open(ctx, e.Name)
	})
	if err != nil {
		s.log.Info("ui: no thumbnail", "name", e.Name, "err", err)
		http.Error(w, "no thumbnail: "+oneLine(err.Error()), http.StatusUnprocessableEntity)
		return
	}
	w.Header().Set("Content-Type", "image/jpeg")
	w.Header().Set("Cache-Control", "private, max-age=60")
	w.Write(data)
}
