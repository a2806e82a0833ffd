//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package storage

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// tryLock flocks the local lock file name (see TryLock).
func (localDriver) tryLock(_ *op, name string, exclusive bool, holder string) (func(), string, error) {
	created, err := mkdirAllCreated(filepath.Dir(name))
	removeCreated := func() {
		for i := len(created) - 1; i >= 0; i-- {
			_ = os.Remove(created[i]) // only if still empty: another writer may use it now
		}
	}
	if err != nil {
		removeCreated()
		return nil, "", lockRefused(err)
	}
	// A lock file that is removed between our open and our flock (its holder let it go) is
	// not the lock any more: open it again.
	for range 100 {
		f, err := openLockFile(name)
		if err != nil {
			removeCreated()
			return nil, "", err
		}
		got, err := flock(f, exclusive)
		if err != nil {
			f.Close()
			removeCreated()
			return nil, "", err
		}
		if !got {
			heldBy := readHolder(f)
			f.Close()
			removeCreated()
			return nil, heldBy, nil
		}
		if !sameFile(f, name) {
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			f.Close()
			continue
		}
		if exclusive {
			// Who holds it, for the message of the next one that finds it locked. A file this
			// process may only read (another writer's) keeps what it says.
			if _, err := f.WriteAt([]byte(holder), 0); err == nil {
				_ = f.Truncate(int64(len(holder)))
			}
		}
		return func() {
			// The last holder removes the file while it still holds it exclusively: whoever
			// opened it meanwhile finds, once it has the flock, that it is no longer the file
			// of that name, and opens the new one.
			last := exclusive
			if !exclusive {
				last, _ = flock(f, true)
			}
			if last && sameFile(f, name) {
				_ = os.Remove(name)
			}
			_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
			f.Close()
			removeCreated()
		}, "", nil
	}
	removeCreated()
	return nil, "", fmt.Errorf("the lock file kept being replaced while it was taken")
}

// openLockFile opens (creating it) the lock file name for flock: never through a link, only a
// plain file with no other name (a hard link would make it another file's name too), created
// readable and writable by those who may write its folder and by no one else.
func openLockFile(name string) (*os.File, error) {
	perm, err := writersPerm(filepath.Dir(name))
	if err != nil {
		return nil, lockRefused(err)
	}
	const flags = syscall.O_NOFOLLOW | syscall.O_NONBLOCK // NONBLOCK: a FIFO planted there must not block the open
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|flags, perm)
	if errors.Is(err, fs.ErrPermission) {
		// A lock file of another writer of the folder, readable but not writable here: a
		// flock needs no write access.
		if g, err2 := os.OpenFile(name, os.O_RDONLY|flags, 0); err2 == nil {
			f, err = g, nil
		}
	}
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, fmt.Errorf("the lock file is a symbolic link, which no lock follows; remove it if no dcl command is running")
	case err != nil:
		return nil, lockRefused(err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); !st.Mode().IsRegular() || ok && sys.Nlink > 1 {
		f.Close()
		return nil, fmt.Errorf("the lock file is not a plain file (%s, %d names); remove it if no dcl command is running", st.Mode().Type(), linkCount(st))
	}
	return f, nil
}

func linkCount(st fs.FileInfo) uint64 {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return uint64(sys.Nlink)
	}
	return 1
}

// writersPerm is the mode of a lock file in dir: read and write for each class of users
// (owner, group, others) that may write dir, nothing for the others.
func writersPerm(dir string) (os.FileMode, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return 0, err
	}
	m := st.Mode().Perm()
	var perm os.FileMode
	for _, class := range []struct{ write, rw os.FileMode }{{0o200, 0o600}, {0o020, 0o060}, {0o002, 0o006}} {
		if m&class.write != 0 {
			perm |= class.rw
		}
	}
	return perm, nil
}

// lockRefused marks the errors of a folder that takes no lock file as ErrNoLock.
func lockRefused(err error) error {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		return fmt.Errorf("%w: %w", ErrNoLock, err)
	}
	return err
}

// flock takes an flock on f without waiting, exclusive or shared, and reports whether it got
// it.
func flock(f *os.File, exclusive bool) (bool, error) {
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

// sameFile reports whether name still names the file f has open.
func sameFile(f *os.File, name string) bool {
	a, err := f.Stat()
	if err != nil {
		return false
	}
	b, err := os.Lstat(name)
	return err == nil && os.SameFile(a, b)
}

// readHolder returns what the holder of the lock file f wrote there.
func readHolder(f *os.File) string {
	b := make([]byte, 400)
	n, _ := f.ReadAt(b, 0)
	return strings.TrimSpace(strings.ToValidUTF8(string(b[:n]), "?"))
}

// mkdirAllCreated is os.MkdirAll that returns the folders it created, from the top.
func mkdirAllCreated(dir string) ([]string, error) {
	var missing []string
	for cur := dir; ; {
		if _, err := os.Stat(cur); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		missing = append([]string{cur}, missing...)
		parent := filepath.Dir(cur)
		if parent == cur {
			break
		}
		cur = parent
	}
	var created []string
	for _, d := range missing {
		err := os.Mkdir(d, 0o777)
		if err == nil {
			created = append(created, d)
			continue
		}
		if st, serr := os.Stat(d); serr == nil && st.IsDir() {
			continue // made by another writer meanwhile
		}
		return created, err
	}
	return created, nil
}

// processAlive reports whether a process of this machine with the id pid runs.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
