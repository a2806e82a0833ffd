// Package guard keeps commands from destroying outputs and inputs: every command that writes
// a run or output folder (or file) claims it first (Acquire), which
//
//   - refuses an output that is, holds or lies in one of the command's inputs (CheckOverlap):
//     writing it would replace what is being read, or add to a dataset being read;
//   - locks the output for as long as the command runs, so that two commands never write
//     it at once (and a third never writes a folder that holds it, or one inside it).
//
// Locks are flocks on files of one lock folder (DCL_LOCK_DIR, by default dcl-locks in the
// temporary folder the process started with), named after the output as storage.Clean
// spells it, so that every spelling of a path (gs://b/r/, gs://b//r, a local path through a
// link) takes the same lock. A writer holds its output's lock exclusively and those of the
// folders above it shared: two writers of different folders of one run directory go on side
// by side, and a writer of the run directory waits for both. The kernel releases a lock when
// its process ends, however it ends, so a lock is never stale. Locks keep apart the commands
// of one machine (one lock folder); commands on two machines writing one gs:// folder are
// kept apart by the scheduler that runs them, and found out by the readers' checks that
// metadata and data agree.
package guard

import (
	"cmp"
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
	"github.com/dcl-beam/dcl-beam/internal/usage"
)

// LockDirEnv names the environment variable that sets the lock folder.
const LockDirEnv = "DCL_LOCK_DIR"

// ErrLocked is Acquire's error when another command holds an output and Claim.Wait is off.
var ErrLocked = errors.New("another dcl command is writing")

// startTemp is the temporary folder when the process started: pipelines point TMPDIR
// elsewhere while they run, and the lock folder must not move with it.
var startTemp = os.TempDir()

// LockDir is the folder of the lock files.
func LockDir() string {
	if d := os.Getenv(LockDirEnv); d != "" {
		return d
	}
	return filepath.Join(startTemp, "dcl-locks")
}

// Path is a path a command reads or writes, with the flag that gave it.
type Path struct {
	Flag string // "--output", "--input", "--checkpoint"; "" for a positional argument
	Path string
}

func (p Path) String() string {
	if p.Flag == "" {
		return p.Path
	}
	return p.Flag + "=" + p.Path
}

// Claim is what a command is about to write and what it reads.
type Claim struct {
	// Command names the writer in the message of the next one that finds it locked.
	Command string
	Outputs []Path
	// Inputs are read whole (datasets, shard folders, embeddings): an output may be none of
	// them, hold none and lie in none.
	Inputs []Path
	// Holders are read in part (a training run's folder, for its newest checkpoint): an
	// output may lie in one (embeddings beside the run's checkpoints), but not be or hold it.
	Holders []Path
	// Wait waits for another command that holds an output, instead of failing at once with
	// ErrLocked; Logger says so once.
	Wait   bool
	Logger *slog.Logger
}

// CheckOverlap refuses, with a usage error in one line naming both, an output that is, holds
// or lies in an input, or that is or holds a holder. Empty paths and "-" (standard input or
// output) are skipped.
func CheckOverlap(c Claim) error {
	for _, out := range c.Outputs {
		if skip(out.Path) {
			continue
		}
		for _, in := range c.Inputs {
			if skip(in.Path) {
				continue
			}
			switch {
			case storage.Within(in.Path, out.Path) && storage.Within(out.Path, in.Path):
				return usage.Errorf("%s is also %s: writing it would destroy what is read; write elsewhere", out, in)
			case storage.Within(in.Path, out.Path):
				return usage.Errorf("%s holds %s: writing it could destroy what is read; write elsewhere", out, in)
			case storage.Within(out.Path, in.Path):
				return usage.Errorf("%s lies inside %s: it would become part of what is read; write elsewhere", out, in)
			}
		}
		for _, in := range c.Holders {
			if skip(in.Path) {
				continue
			}
			if storage.Within(in.Path, out.Path) {
				return usage.Errorf("%s is or holds %s: writing it could destroy what is read; write elsewhere (a folder inside it is fine)", out, in)
			}
		}
	}
	return nil
}

func skip(p string) bool { return p == "" || p == "-" }

// Acquire checks the claim (CheckOverlap) and locks its outputs, waiting for them when
// c.Wait; release unlocks them. It fails with ErrLocked, naming the holder where it said who
// it is, when another command holds one.
func Acquire(ctx context.Context, c Claim) (release func(), err error) {
	if err := CheckOverlap(c); err != nil {
		return nil, err
	}
	var held []*lock
	release = func() {
		for i := len(held) - 1; i >= 0; i-- {
			held[i].release()
		}
		held = nil
	}
	for _, out := range c.Outputs {
		if skip(out.Path) {
			continue
		}
		l, err := acquire(ctx, c, out.Path)
		if err != nil {
			release()
			return nil, err
		}
		held = append(held, l)
	}
	return release, nil
}

// lock is one output's lock: its file, held exclusively, and the files of the folders above
// it, held shared.
type lock struct {
	self    *os.File
	parents []*os.File
}

func (l *lock) release() {
	_ = l.self.Truncate(0)
	for _, f := range append([]*os.File{l.self}, l.parents...) {
		_ = unlock(f)
		f.Close()
	}
}

func acquire(ctx context.Context, c Claim, out string) (*lock, error) {
	key := storage.Clean(out)
	delay := 50 * time.Millisecond
	for waited := false; ; waited = true {
		l, holder, err := tryAcquire(key)
		if err != nil {
			return nil, err
		}
		if l != nil {
			host, _ := os.Hostname()
			// Who holds it, for the message of the next one that finds it locked.
			if err := l.self.Truncate(0); err == nil {
				fmt.Fprintf(l.self, "%s (pid %d on %s since %s, writing %s)\n", cmp.Or(c.Command, "dcl"), os.Getpid(), host,
					time.Now().UTC().Format(time.RFC3339), key)
			}
			return l, nil
		}
		if !c.Wait {
			return nil, fmt.Errorf("%w %s: %s", ErrLocked, out, holder)
		}
		if !waited && c.Logger != nil {
			c.Logger.Info("waiting for another dcl command to finish writing", "output", out, "holder", holder)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// tryAcquire takes key's lock without waiting: the folders above it shared, from the top,
// then key exclusively. When another command holds one, it returns nil and who holds it.
func tryAcquire(key string) (*lock, string, error) {
	chain := ancestors(key)
	files := make([]*os.File, 0, len(chain)+1)
	closeAll := func(locked int) {
		for i, f := range files {
			if i < locked {
				_ = unlock(f)
			}
			f.Close()
		}
	}
	for _, k := range append(chain, key) {
		f, err := openLockFile(k)
		if err != nil {
			closeAll(0)
			return nil, "", err
		}
		files = append(files, f)
	}
	for i, f := range files {
		exclusive := i == len(files)-1
		ok, err := tryLock(f, exclusive)
		if err != nil {
			closeAll(i)
			return nil, "", fmt.Errorf("locking %s (lock file %s): %w", key, f.Name(), err)
		}
		if !ok {
			holder := holderOf(f)
			switch {
			case holder != "":
			case exclusive:
				holder = "a command writing inside it"
			default:
				holder = "a command writing " + append(chain, key)[i] + ", which holds it"
			}
			closeAll(i)
			return nil, holder + "; lock file " + f.Name(), nil
		}
	}
	return &lock{self: files[len(files)-1], parents: files[:len(files)-1]}, "", nil
}

// ancestors lists the folders above a cleaned path, from the top: /, /home, /home/u for
// /home/u/run; gs://b, gs://b/runs for gs://b/runs/r.
func ancestors(key string) []string {
	var out []string
	for p := storage.Parent(key); p != key; key, p = p, storage.Parent(p) {
		out = append([]string{p}, out...)
	}
	return out
}

// openLockFile opens (creating it) the lock file of a cleaned path.
func openLockFile(key string) (*os.File, error) {
	dir := LockDir()
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o777); err != nil {
			return nil, fmt.Errorf("creating the lock folder %s (set %s or TMPDIR to a writable folder): %w", dir, LockDirEnv, err)
		}
		// Shared by every user of the machine, as the temporary folder is.
		_ = os.Chmod(dir, 0o777|os.ModeSticky)
	}
	sum := sha256.Sum256([]byte(key))
	p := filepath.Join(dir, hex.EncodeToString(sum[:12])+".lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o666)
	if errors.Is(err, os.ErrPermission) {
		f, err = os.Open(p) // another user's lock file: flock needs no write access
	}
	if err != nil {
		return nil, fmt.Errorf("opening the lock file of %s (set %s or TMPDIR to a writable folder): %w", key, LockDirEnv, err)
	}
	return f, nil
}

func holderOf(f *os.File) string {
	b := make([]byte, 400)
	n, _ := f.ReadAt(b, 0)
	return strings.TrimSpace(string(b[:n]))
}
