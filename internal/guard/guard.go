// Package guard keeps commands from destroying outputs and inputs: every command that writes
// a run or output folder (or file) claims it first (Acquire), which
//
//   - refuses an output that is, holds or lies in one of the command's inputs (CheckOverlap):
//     writing it would replace what is being read, or add to a dataset being read;
//   - locks the output for as long as the command runs, so that two commands never write
//     it at once (and a third never writes a folder that holds it, or one inside it).
//
// A lock lives with the data (storage.TryLock): in a lock file beside the output as
// storage.Clean spells it, so that every spelling of a path (gs://b/r/, gs://b//r, a local
// path through a link) and every writer, from any machine, user or temporary folder, meets
// the same lock, and no one who cannot write the output's folder can make or hold it. A
// local lock is a flock, which the kernel lets go when its process ends, however it ends; a
// gs:// lock is an object created under a generation precondition, refreshed while held and
// taken over once its holder stops refreshing it. A writer holds its output's lock
// exclusively and those of the folders above it shared: two writers of different folders of
// one run directory go on side by side, and a writer of the run directory waits for both.
package guard

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/usage"
)

// ErrLocked is Acquire's error when another command holds an output and Claim.Wait is off.
var ErrLocked = errors.New("another dcl command is writing")

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
// or lies in an input, or that is or holds a holder; and an output that would be made
// through a link to nothing (storage.DanglingLink). Empty paths and "-" (standard input or
// output) are skipped.
func CheckOverlap(c Claim) error {
	for _, out := range c.Outputs {
		if skip(out.Path) {
			continue
		}
		if link, target := storage.DanglingLink(out.Path); link != "" {
			return usage.Errorf("%s: %s is a symbolic link to %s, which does not exist: create %s, or write elsewhere", out, link, target, target)
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

// lock is one output's lock: its own, held exclusively, and those of the folders above it,
// held shared.
type lock struct {
	self    *storage.Lock
	parents []*storage.Lock
}

func (l *lock) release() {
	l.self.Release()
	for i := len(l.parents) - 1; i >= 0; i-- {
		l.parents[i].Release()
	}
}

func acquire(ctx context.Context, c Claim, out string) (*lock, error) {
	key := storage.Clean(out)
	host, _ := os.Hostname()
	// Who holds it, for the message of the next one that finds it locked.
	holder := fmt.Sprintf("%s (pid %d on %s since %s, writing %s)\n", cmp.Or(c.Command, "dcl"), os.Getpid(), host,
		time.Now().UTC().Format(time.RFC3339), key)
	delay := 50 * time.Millisecond
	for waited := false; ; waited = true {
		l, heldBy, err := tryAcquire(ctx, key, holder)
		if err != nil {
			return nil, err
		}
		if l != nil {
			return l, nil
		}
		if !c.Wait {
			return nil, fmt.Errorf("%w %s: %s", ErrLocked, out, heldBy)
		}
		if !waited && c.Logger != nil {
			c.Logger.Info("waiting for another dcl command to finish writing", "output", out, "holder", heldBy)
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
// then key exclusively. A folder above it that takes no lock file (one this process may not
// write) is skipped: whoever cannot write there cannot write it as an output either. When
// another command holds one, it returns nil and who holds it.
func tryAcquire(ctx context.Context, key, holder string) (*lock, string, error) {
	l := &lock{}
	chain := append(ancestors(key), key)
	for i, k := range chain {
		exclusive := i == len(chain)-1
		got, heldBy, err := storage.TryLock(ctx, k, exclusive, holder)
		switch {
		case err != nil && !exclusive && errors.Is(err, storage.ErrNoLock):
			continue
		case err != nil:
			l.releaseHeld()
			return nil, "", fmt.Errorf("locking %s (lock file %s): %w", key, storage.LockFile(k), err)
		case got == nil:
			l.releaseHeld()
			switch {
			case heldBy != "":
			case exclusive:
				heldBy = "a command writing inside it"
			default:
				heldBy = "a command writing " + k + ", which holds it"
			}
			return nil, heldBy + "; lock file " + storage.LockFile(k), nil
		case exclusive:
			l.self = got
		default:
			l.parents = append(l.parents, got)
		}
	}
	return l, "", nil
}

// releaseHeld lets go of what a failed tryAcquire took.
func (l *lock) releaseHeld() {
	for i := len(l.parents) - 1; i >= 0; i-- {
		l.parents[i].Release()
	}
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
