package nodetest

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"

	"spindle.dev/blocks"
)

// FindBlock returns the file holding the block with digest d under a
// node's home, and the offset of the block's bytes in it: a file of its
// own, or a record in a segment of small blocks (see package
// blocks/disk). It returns "" if the node does not hold the block.
func FindBlock(home string, d blocks.Digest) (string, int64) {
	var found string
	var off int64
	want := hex.EncodeToString(d[:])
	filepath.WalkDir(filepath.Join(home, "blocks"), func(p string, de os.DirEntry, err error) error {
		if err != nil || de.IsDir() || found != "" {
			return nil
		}
		if de.Name() == want {
			found = p
			return nil
		}
		if strings.HasSuffix(p, ".seg") {
			// A record: magic, digest, length, CRC of the data and
			// (spS2) of the header, then the data.
			b, err := os.ReadFile(p)
			if i := bytes.Index(b, append([]byte("spS2"), d[:]...)); err == nil && i >= 0 {
				found, off = p, int64(i+4+32+4+4+4)
			}
		}
		return nil
	})
	return found, off
}
