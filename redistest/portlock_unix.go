//go:build unix

package redistest

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// lockPort takes an exclusive, non-blocking flock on a per-port file under
// os.TempDir(). It reports locked=false when another holder has it. The
// kernel drops the lock when the holding process dies. Files are opened
// close-on-exec, so redis-server children never inherit a lock.
func lockPort(port int) (unlock func(), locked bool, err error) {
	dir := filepath.Join(os.TempDir(), "shardcast-redistest-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, false, lockDirError(err)
	}
	path := filepath.Join(dir, strconv.Itoa(port)+".lock")
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			return nil, false, lockDirError(err)
		}
		fd := int(f.Fd())
		if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			_ = f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, false, nil
			}
			return nil, false, lockDirError(err)
		}
		// The previous holder unlinks the file before unlocking it. If that
		// happened between our open and our flock, we hold a lock on an
		// orphaned inode that nobody else can see: start over.
		var held, current syscall.Stat_t
		if syscall.Fstat(fd, &held) != nil || syscall.Stat(path, &current) != nil ||
			held.Ino != current.Ino || held.Dev != current.Dev {
			_ = f.Close()
			continue
		}
		return func() {
			_ = os.Remove(path)
			_ = f.Close()
		}, true, nil
	}
}
