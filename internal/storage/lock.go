package storage

import (
	"context"
	"errors"
	"strings"
	"sync"
)

// lockMarker ends the name of a lock file (see LockFile).
const lockMarker = ".dcl-lock"

// ErrNoLock is TryLock's error when the folder that would hold the lock file refuses it (a
// folder the process may not write, a read-only filesystem): whoever cannot write there
// cannot write what the lock guards either.
var ErrNoLock = errors.New("no lock file can be made there")

// LockFile is the file that holds the lock of p (a path as Clean spells it): beside p, in
// p's own folder, hidden and named after it (".NAME.dcl-lock"), so that every writer of p,
// from any machine or temporary folder, meets the same lock, and only those who may write
// p's folder can make it. A root (/, gs://bucket), which has no folder, holds its lock file.
func LockFile(p string) string {
	s := syntaxOf(p)
	parent := s.parent(p)
	if parent == p {
		return s.join(p, lockMarker)
	}
	return s.join(parent, hiddenName(s.base(p), lockMarker, len(sharedLockMarker)+sharedIDLen))
}

// isLockFile reports whether the file name (the last element of a path) is a lock file.
func isLockFile(name string) bool {
	return strings.HasPrefix(name, ".") && strings.Contains(name, lockMarker)
}

// sharedLockMarker and a random id of sharedIDLen characters follow a lock file's name in
// the objects of its shared holders on object stores (see gcsLock).
const (
	sharedLockMarker = ".shared-"
	sharedIDLen      = 16
)

// Lock is a lock that TryLock took.
type Lock struct {
	release func()
	once    sync.Once
}

// Release lets the lock go (and removes its file when no one else holds it). It is safe to
// call more than once.
func (l *Lock) Release() { l.once.Do(l.release) }

// TryLock takes the lock of p (a path as Clean spells it) without waiting: exclusive (one
// holder, which leaves holder, a line saying who it is, for the next one), or shared (any
// number of holders, while no one holds it exclusive). When someone else holds it, it
// returns a nil Lock and what the holder said, or "" when it said nothing (shared holders
// do not). The lock lives in LockFile(p):
//
//   - a local file, flocked: opened without following a link (a link there is refused, so
//     that no one can point the lock at a file of theirs to have it written), only if it is
//     a plain file, and created with the permissions of its folder's writers (whoever cannot
//     write the folder cannot open it to block it). The kernel lets go of a flock when its
//     process ends, however it ends;
//   - on gs://, an object created only if none exists (a generation precondition), which its
//     holder refreshes while it holds it; a lock whose holder stopped refreshing it (a killed
//     process; on the same machine, a process that is gone) is taken over;
//   - on memfs://, a lock of this process.
//
// TryLock creates the folder of the lock file if need be, and Release removes it again if
// it is still empty. It fails with ErrNoLock when that folder refuses the file.
func TryLock(ctx context.Context, p string, exclusive bool, holder string) (*Lock, string, error) {
	lockFile := LockFile(p)
	type result struct {
		release func()
		heldBy  string
	}
	r, err := run(ctx, "locking", lockFile, func(d driver, o *op) (result, error) {
		release, heldBy, err := d.tryLock(o, lockFile, exclusive, holder)
		return result{release, heldBy}, err
	})
	if err != nil || r.release == nil {
		return nil, r.heldBy, err
	}
	return &Lock{release: r.release}, "", nil
}

// memLocks holds the locks of memfs:// paths: memfs:// files live in this process, and so do
// their writers.
var memLocks = struct {
	sync.Mutex
	m map[string]*memLock
}{m: map[string]*memLock{}}

type memLock struct {
	holder string // the exclusive holder; "" when shared
	shared int
}

func (memDriver) tryLock(_ *op, name string, exclusive bool, holder string) (func(), string, error) {
	memLocks.Lock()
	defer memLocks.Unlock()
	l := memLocks.m[name]
	switch {
	case l == nil:
		l = &memLock{}
		memLocks.m[name] = l
	case l.shared == 0 || exclusive:
		return nil, l.holder, nil
	}
	if exclusive {
		l.holder = holder
	} else {
		l.shared++
	}
	return func() {
		memLocks.Lock()
		defer memLocks.Unlock()
		if l.shared--; l.shared <= 0 {
			delete(memLocks.m, name)
		}
	}, "", nil
}
