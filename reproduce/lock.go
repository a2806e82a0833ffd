package reproduce

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// LockName is the file a reproduction locks (flock) in a local run directory for as long as
// it runs, so that two never write the same outputs. The kernel releases the lock when the
// process ends, however it ends: a lock is never stale.
const LockName = ".dcl-reproduce.lock"

// ErrLocked is Run's error when another reproduction holds the run directory and
// Options.WaitLock is off.
var ErrLocked = errors.New("another reproduction holds the run directory")

// lockPath is the lock file of a run directory. A gs:// run directory cannot hold an flock:
// its lock is a local file named after it, which keeps two reproductions on this machine
// apart, not two machines (a scheduler that never overlaps its jobs does that).
func lockPath(out string) string {
	if storage.Scheme(out) == "" {
		return filepath.Join(out, LockName)
	}
	sum := sha256.Sum256([]byte(out))
	return filepath.Join(os.TempDir(), "dcl-reproduce-"+hex.EncodeToString(sum[:8])+".lock")
}

// lockRunDir takes the run directory's lock, waiting for it if wait, and returns its
// release.
func lockRunDir(ctx context.Context, out string, wait bool, log *slog.Logger) (func(), error) {
	p := lockPath(out)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("creating the run directory %s: %w", out, err)
	}
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening the lock file: %w", err)
	}
	delay := 50 * time.Millisecond
	for waited := false; ; waited = true {
		ok, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("locking %s: %w", p, err)
		}
		if ok {
			break
		}
		holder := lockHolder(f)
		if !wait {
			f.Close()
			return nil, fmt.Errorf("%w %s (%s; lock file %s)", ErrLocked, out, holder, p)
		}
		if !waited {
			log.Info("waiting for another reproduction to finish with the run directory", "out", out, "holder", holder)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
	host, _ := os.Hostname()
	// Who holds it, for the message of the next one that finds it locked.
	if err := f.Truncate(0); err == nil {
		fmt.Fprintf(f, "pid %d on %s since %s\n", os.Getpid(), host, time.Now().UTC().Format(time.RFC3339))
	}
	return func() {
		_ = f.Truncate(0)
		_ = unlock(f)
		f.Close()
	}, nil
}

func lockHolder(f *os.File) string {
	b := make([]byte, 200)
	n, _ := f.ReadAt(b, 0)
	if s := strings.TrimSpace(string(b[:n])); s != "" {
		return "dcl reproduce, " + s
	}
	return "a process that did not say which"
}
