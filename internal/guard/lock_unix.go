//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package guard

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes an flock on f without waiting, exclusive or shared, and reports whether it
// got it. The kernel releases it when the process ends, however it ends: a lock is never
// stale.
func tryLock(f *os.File, exclusive bool) (bool, error) {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB)
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, syscall.EWOULDBLOCK):
			return false, nil
		case errors.Is(err, syscall.EINTR):
			continue
		}
		return false, err
	}
}

func unlock(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_UN) }
