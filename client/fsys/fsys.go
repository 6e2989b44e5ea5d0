package fsys

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"spindle.dev"
)

// Config configures a mount. The zero value of each field but Client
// means its default.
type Config struct {
	Client spindle.Client
	// Timeout bounds every operation, and each block of a long
	// transfer (default DefaultTimeout).
	Timeout time.Duration
	// CacheDir holds the block cache and the staging files (default
	// the user's cache directory, os.UserCacheDir, under spindle/mount).
	CacheDir string
	// CacheSize bounds the block cache in bytes (default
	// DefaultCacheSize).
	CacheSize int64
	// Logger takes what cannot be returned as an errno: a put that
	// failed when a file was closed.
	Logger *slog.Logger
	// Debug logs every FUSE request.
	Debug bool
}

// Defaults of Config.
const (
	DefaultTimeout   = 5 * time.Second
	DefaultCacheSize = 1 << 30
)

// kernelTTL is how long the kernel keeps names and attributes.
const kernelTTL = time.Second

// An FS is a mounted file system.
type FS struct {
	dir    string
	server *fuse.Server
	fs     *filesys
	raw    *counted
}

// filesys is the state every node of a mount shares.
type filesys struct {
	client   spindle.Client
	timeout  time.Duration
	log      *slog.Logger
	ctx      context.Context // Ends when the mount does.
	cancel   context.CancelFunc
	meta     *meta
	snaps    *snapshots
	blocks   *blockCache
	staging  string // Directory of staging files.
	wb       *writeBack
	finished sync.Once
	mountDir string // Where the file system is mounted.
}

// Mount mounts the namespace cfg.Client sees on dir, which must be an
// existing directory that is not a mount point already, and serves it
// until it is unmounted.
func Mount(dir string, cfg Config) (*FS, error) {
	const op spindle.Op = "fsys.Mount"
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, spindle.E(op, spindle.Invalid, err)
	}
	// Checked before anything touches dir, which may be a hung mount.
	if mounted, err := IsMountPoint(abs); err != nil {
		return nil, spindle.E(op, spindle.IO, err)
	} else if mounted {
		return nil, spindle.E(op, spindle.Exist, fmt.Errorf("%s is a mount point already", abs))
	}
	if info, err := os.Stat(abs); err != nil {
		return nil, spindle.E(op, spindle.NotExist, err)
	} else if !info.IsDir() {
		return nil, spindle.E(op, spindle.NotDir, fmt.Errorf("%s is not a directory", abs))
	}
	if cfg.Client == nil {
		return nil, spindle.E(op, spindle.Invalid, "no client")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = DefaultCacheSize
	}
	if cfg.CacheDir == "" {
		d, err := os.UserCacheDir()
		if err != nil {
			return nil, spindle.E(op, spindle.Invalid, fmt.Errorf("no cache directory given, and none by default: %v", err))
		}
		cfg.CacheDir = filepath.Join(d, "spindle", "mount", string(cfg.Client.User()))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	blocks, err := openBlockCache(filepath.Join(cfg.CacheDir, "blocks"), cfg.CacheSize)
	if err != nil {
		return nil, spindle.E(op, spindle.IO, err)
	}
	staging := filepath.Join(cfg.CacheDir, "staging")
	if err := os.MkdirAll(staging, 0o700); err != nil {
		return nil, spindle.E(op, spindle.IO, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &filesys{
		client:   cfg.Client,
		timeout:  cfg.Timeout,
		log:      cfg.Logger,
		ctx:      ctx,
		cancel:   cancel,
		blocks:   blocks,
		staging:  staging,
		mountDir: abs,
	}
	f.meta = newMeta(f)
	f.snaps = &snapshots{f: f}
	f.wb = newWriteBack(f)
	go blocks.writer(ctx)
	f.wb.start()
	left, _ := filepath.Glob(filepath.Join(staging, "*"+journalSuffix))
	go f.recoverQueued(left)
	ttl := kernelTTL
	neg := time.Duration(0)
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			DirectMount:  true,
			FsName:       "spindle",
			Name:         "spindle",
			MaxWrite:     1 << 20,
			MaxReadAhead: 1 << 20,
			// Reads answer with bytes, never a file to splice from;
			// go-fuse would try to, and fail, for every read of more
			// than a pipe's default size.
			DisableSplice: true,
			Debug:         cfg.Debug,
		},
		EntryTimeout:    &ttl,
		AttrTimeout:     &ttl,
		NegativeTimeout: &neg,
	}
	raw := &counted{RawFileSystem: fs.NewNodeFS(&rootNode{fs: f}, opts)}
	server, err := fuse.NewServer(raw, abs, &opts.MountOptions)
	if err == nil {
		go server.Serve()
		err = server.WaitMount()
	}
	if err != nil {
		cancel()
		return nil, spindle.E(op, spindle.IO, fmt.Errorf("mounting on %s: %v", abs, err))
	}
	raiseReadAhead(abs, server, cfg.Logger)
	return &FS{dir: abs, server: server, fs: f, raw: raw}, nil
}

// readAheadKB is the kernel's read-ahead on the mount. The kernel takes
// no more than its default (128 KiB) from the file system, and then
// reads a file in requests of that size; the administrator, or the
// mount's user when it is root, may raise it.
const readAheadKB = 8192

// raiseReadAhead raises the kernel's read-ahead of the mount on dir to
// readAheadKB, if it may.
func raiseReadAhead(dir string, server *fuse.Server, log *slog.Logger) {
	if err := server.WaitMount(); err != nil {
		return
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return
	}
	bdi := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	if err := os.WriteFile(bdi, []byte(fmt.Sprint(readAheadKB)), 0); err != nil {
		log.Debug("kernel read-ahead left as it was", "file", bdi, "err", err)
	}
}

// Dir returns the directory the file system is mounted on.
func (m *FS) Dir() string { return m.dir }

// Wait returns when the file system has been unmounted, by Unmount or by
// umount(8).
func (m *FS) Wait() {
	m.server.Wait()
	m.fs.finish()
}

// Unmount unmounts the file system. If it is busy (a process has a file
// open in it, or its working directory there), it is detached lazily:
// it disappears from the namespace at once and is gone when no longer
// used.
func (m *FS) Unmount() error {
	err := m.server.Unmount()
	if err != nil {
		if lerr := syscall.Unmount(m.dir, syscall.MNT_DETACH); lerr != nil {
			return fmt.Errorf("unmounting %s: %v (lazily: %v)", m.dir, err, lerr)
		}
	}
	m.fs.finish()
	return nil
}

// finish puts the files still queued, until none is left or none has
// been put for the timeout, and ends the mount's work. Files left are
// kept, with their journal entries, for the next mount to put.
func (f *filesys) finish() {
	f.finished.Do(func() {
		if left := f.wb.drain(f.timeout); left > 0 {
			f.log.Error("unmounted with files not yet put; the next mount puts them", "files", left, "dir", f.staging)
		}
		f.cancel()
	})
}

// Drain waits until every file closed so far is stored, or until none
// has been stored for the timeout, and reports how many are left.
func (m *FS) Drain() int { return m.fs.wb.drain(m.fs.timeout) }

// IsMountPoint reports whether dir, an absolute clean path, is the mount
// point of a file system, by reading /proc/self/mountinfo: it never
// touches dir, so a hung mount cannot hang it.
func IsMountPoint(dir string) (bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && unescapeMount(fields[4]) == dir {
			return true, nil
		}
	}
	return false, s.Err()
}

// unescapeMount undoes the octal escapes (\040 for a space) of a path in
// /proc/self/mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range []byte(s[i+1 : i+4]) {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + c - '0'
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
