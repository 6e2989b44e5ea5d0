package node

import (
	"os"
	"path/filepath"

	"spindle.dev"
)

// replaceFile replaces the file name with data, through a temporary file
// of its own in the same directory and a rename, so that readers never see
// a partial file and writers running at once never leave a mixed one: the
// last to finish wins whole. With sync, the data is on disk before the
// rename.
func replaceFile(name string, data []byte, perm os.FileMode, sync bool) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o700); err != nil {
		return spindle.E(spindle.IO, err)
	}
	f, err := os.CreateTemp(filepath.Dir(name), filepath.Base(name)+".tmp*")
	if err != nil {
		return spindle.E(spindle.IO, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		os.Remove(f.Name())
		return spindle.E(spindle.IO, err)
	}
	return nil
}
