package host

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"spindle.dev"
	"spindle.dev/dirlog"
)

// Backup writes to dir, which must not exist, a copy of every log the
// server holds that is not damaged, each as a log file of a disk store
// (see DiskStore) that holds the log's whole records as they were at one
// moment: appends to a log wait while it is copied. It returns the users
// whose logs it copied and those it left out as damaged.
func (s *Server) Backup(ctx context.Context, dir string) (copied, damaged []spindle.UserName, err error) {
	const op spindle.Op = "dirlog.Backup"
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, nil, spindle.E(op, spindle.IO, err)
	}
	s.mu.RLock()
	logs := make([]*hosted, 0, len(s.logs))
	for _, h := range s.logs {
		logs = append(logs, h)
	}
	s.mu.RUnlock()
	slices.SortFunc(logs, func(a, b *hosted) int { return cmp.Compare(a.user, b.user) })
	for _, h := range logs {
		ok, err := s.backupLog(ctx, h, dir)
		if err != nil {
			return nil, nil, spindle.E(op, h.user, err)
		}
		if ok {
			copied = append(copied, h.user)
		} else {
			damaged = append(damaged, h.user)
		}
	}
	return copied, damaged, nil
}

// backupLog copies h's log into dir, unless it is damaged or has none.
func (s *Server) backupLog(ctx context.Context, h *hosted, dir string) (bool, error) {
	h.appendMu.Lock() // Appends wait; so do scans of the history.
	defer h.appendMu.Unlock()
	s.mu.RLock()
	log, bad := h.log, h.damaged != nil
	s.mu.RUnlock()
	if bad {
		return false, nil
	}
	if log == nil {
		return true, nil // No entry stored yet: nothing to copy.
	}
	buf := []byte(dirlog.FileHeader)
	if err := log.Scan(ctx, func(rec []byte) error {
		buf = dirlog.AppendFrame(buf, rec)
		return nil
	}); err != nil {
		return false, fmt.Errorf("read the log: %w", err)
	}
	if err := spindle.ReplaceFile(filepath.Join(dir, string(h.user)+logSuffix), buf, 0o600, true); err != nil {
		return false, err
	}
	return true, nil
}
