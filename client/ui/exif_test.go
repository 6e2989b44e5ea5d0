package ui

import (
	"bytes"
	"encoding/binary"
	"image"
	"image/jpeg"
	"testing"
)

// exifJPEG returns a small JPEG with an EXIF orientation tag.
func exifJPEG(t testing.TB, orient int, bo binary.ByteOrder) []byte {
	var j bytes.Buffer
	if err := jpeg.Encode(&j, image.NewGray(image.Rect(0, 0, 8, 4)), nil); err != nil {
		t.Fatal(err)
	}
	var tiff bytes.Buffer
	if bo == binary.BigEndian {
		tiff.WriteString("MM")
	} else {
		tiff.WriteString("II")
	}
	for _, v := range []any{uint16(42), uint32(8), uint16(1), uint16(0x0112), uint16(3), uint32(1), uint16(orient), uint16(0), uint32(0)} {
		binary.Write(&tiff, bo, v)
	}
	seg := append([]byte("Exif\x00\x00"), tiff.Bytes()...)
	out := []byte{0xFF, 0xD8, 0xFF, 0xE1, byte((len(seg) + 2) >> 8), byte(len(seg) + 2)}
	out = append(out, seg...)
	return append(out, j.Bytes()[2:]...)
}

func TestExifOrientation(t *testing.T) {
	for o := 1; o <= 8; o++ {
		for _, bo := range []binary.ByteOrder{binary.BigEndian, binary.LittleEndian} {
			if got := exifOrientation(exifJPEG(t, o, bo)); got != o {
				t.Errorf("orientation %d (%v): read %d", o, bo, got)
			}
		}
	}
	for _, bad := range [][]byte{nil, {0xFF}, {0xFF, 0xD8}, {0xFF, 0xD8, 0xFF, 0xE1, 0xFF, 0xFF}, exifJPEG(t, 9, binary.BigEndian)} {
		if got := exifOrientation(bad); got != 1 {
			t.Errorf("exifOrientation(%q) = %d, want 1", bad, got)
		}
	}
}

// TestOrientImage checks each orientation against its definition: the
// pixel at the top left of the stored picture goes where EXIF says.
func TestOrientImage(t *testing.T) {
	m := image.NewRGBA(image.Rect(0, 0, 3, 2))
	m.Pix[0] = 255 // Red at (0,0).
	where := map[int]image.Point{1: {0, 0}, 2: {2, 0}, 3: {2, 1}, 4: {0, 1}, 5: {0, 0}, 6: {1, 0}, 7: {1, 2}, 8: {0, 2}}
	for o, p := range where {
		out := orientImage(m, o)
		if out.Pix[out.PixOffset(p.X, p.Y)] != 255 {
			t.Errorf("orientation %d: the first pixel is not at %v", o, p)
		}
	}
}

func FuzzExifOrientation(f *testing.F) {
	f.Add(exifJPEG(f, 6, binary.BigEndian))
	f.Add(exifJPEG(f, 3, binary.LittleEndian))
	f.Add([]byte{0xFF, 0xD8, 0xFF, 0xE1, 0x00, 0x10, 'E', 'x', 'i', 'f', 0, 0, 'M', 'M', 0, 42, 0xFF, 0xFF, 0xFF, 0xF0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if o := exifOrientation(data); o < 1 || o > 8 {
			t.Fatalf("orientation %d out of range", o)
		}
	})
}

// FuzzMakeThumb feeds untrusted bytes to the thumbnail maker: it may
// refuse them, never panic or run away with memory.
func FuzzMakeThumb(f *testing.F) {
	f.Add(exifJPEG(f, 6, binary.BigEndian))
	f.Fuzz(func(t *testing.T, data []byte) {
		makeThumb(bytes.NewReader(data))
	})
}

// BenchmarkThumbnail makes the thumbnail of a 12-megapixel JPEG photo
// (4000×3000) from its bytes: decode, scale, turn and encode, as done
// after the file is decrypted.
func BenchmarkThumbnail(b *testing.B) {
	img := image.NewRGBA(image.Rect(0, 0, 4000, 3000))
	for i := range img.Pix {
		img.Pix[i] = uint8(i*7 + i/4000)
	}
	var j bytes.Buffer
	if err := jpeg.Encode(&j, img, &jpeg.Options{Quality: 85}); err != nil {
		b.Fatal(err)
	}
	data := j.Bytes()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := makeThumb(bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "thumbs/s")
}
