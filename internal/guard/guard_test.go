package guard

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	gcstorage "cloud.google.com/go/storage"
	"google.golang.org/api/option"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/gcstest"
	"github.com/dcl-beam/dcl-beam/internal/usage"
)

func TestCheckOverlap(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "data"), filepath.Join(dir, "alias")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "missing"), filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name            string
		out, in, holder string
		want            string // "" for no error
	}{
		{name: "apart", out: dir + "/emb", in: dir + "/data"},
		{name: "equal", out: dir + "/data/", in: dir + "/data", want: "--output=" + dir + "/data/ is also --input=" + dir + "/data"},
		{name: "inside", out: dir + "/data/pass-000", in: dir + "/data", want: "lies inside --input"},
		{name: "inside through a link", out: dir + "/alias/pass-000", in: dir + "/data", want: "lies inside --input"},
		{name: "holds", out: dir, in: dir + "/data", want: "holds --input"},
		{name: "gs spellings", out: "gs://b//r/", in: "gs://b/r", want: "is also"},
		{name: "gs sibling", out: "gs://b/r2", in: "gs://b/r"},
		{name: "stdin", out: dir + "/x", in: "-"},
		{name: "inside a holder", out: dir + "/run/embeddings", holder: dir + "/run"},
		{name: "equal to a holder", out: dir + "/run", holder: dir + "/run/", want: "is or holds --checkpoint"},
		{name: "a link to nothing", out: dir + "/dangling", want: "--output=" + dir + "/dangling: " + dir + "/dangling is a symbolic link to " + dir + "/missing, which does not exist"},
		{name: "inside a link to nothing", out: dir + "/dangling/run/x", want: dir + "/dangling is a symbolic link to " + dir + "/missing"},
		{name: "a link to a folder", out: dir + "/alias/new"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Claim{Outputs: []Path{{"--output", tt.out}}}
			if tt.in != "" {
				c.Inputs = []Path{{"--input", tt.in}}
			}
			if tt.holder != "" {
				c.Holders = []Path{{"--checkpoint", tt.holder}}
			}
			err := CheckOverlap(c)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("got %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !usage.Is(err)):
				t.Errorf("got %v, want a usage error mentioning %q", err, tt.want)
			}
		})
	}
}

func claim(out string) Claim {
	return Claim{Command: "dcl test", Outputs: []Path{{"--output", out}}}
}

// TestLocks: one writer per output however the path is spelt; a writer of a folder and a
// writer of a folder inside it exclude each other, writers of two folders side by side do
// not; the holder is named; waiting ends when the holder lets go, or with the context.
func TestLocks(t *testing.T) {
	gcstest.Start(t, "b")
	ctx := context.Background()
	release, err := Acquire(ctx, claim("gs://b/runs/r"))
	if err != nil {
		t.Fatal(err)
	}
	for _, other := range []string{"gs://b/runs/r/", "gs://b//runs/r", "gs://b/runs/./r", "gs://b/runs/r/embeddings/test", "gs://b/runs", "gs://b"} {
		_, err := Acquire(ctx, claim(other))
		if !errors.Is(err, ErrLocked) {
			t.Errorf("%s: got %v, want ErrLocked", other, err)
		}
	}
	_, err = Acquire(ctx, claim("gs://b/runs/r/"))
	if err == nil || !strings.Contains(err.Error(), "dcl test (pid") || !strings.Contains(err.Error(), "writing gs://b/runs/r") {
		t.Errorf("got %v, want the holder named", err)
	}
	side, err := Acquire(ctx, claim("gs://b/runs/r2"))
	if err != nil {
		t.Errorf("a folder beside the held one: %v", err)
	} else {
		side()
	}

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	wait := claim("gs://b/runs")
	wait.Wait = true
	if _, err := Acquire(short, wait); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("waiting past the deadline = %v", err)
	}
	got := make(chan error, 1)
	go func() {
		r, err := Acquire(ctx, wait)
		if err == nil {
			r()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("the waiting lock returned %v while the first was held", err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	select {
	case err := <-got:
		if err != nil {
			t.Errorf("the waiting lock = %v after the release", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting lock was not taken within 10 s of the release")
	}

	// Local paths, also through a link.
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	r1, err := Acquire(ctx, claim(filepath.Join(dir, "out")))
	if err != nil {
		t.Fatal(err)
	}
	defer r1()
	if _, err := Acquire(ctx, claim(filepath.Join(link, "out", "sub"))); !errors.Is(err, ErrLocked) {
		t.Errorf("through a link: got %v, want ErrLocked", err)
	}
}

// TestLocksLiveWithTheData: an output's lock is a file beside it, the same for every writer
// whatever its temporary folder or environment, gone when the lock is let go, as are the
// folders taking it made.
func TestLocksLiveWithTheData(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	out := filepath.Join(dir, "new", "run")
	t.Setenv("DCL_LOCK_DIR", t.TempDir())
	t.Setenv("TMPDIR", t.TempDir())
	release, err := Acquire(ctx, claim(out))
	if err != nil {
		t.Fatal(err)
	}
	lockFile := filepath.Join(dir, "new", ".run.dcl-lock")
	if b, err := os.ReadFile(lockFile); err != nil || !strings.Contains(string(b), "dcl test (pid") {
		t.Errorf("the lock file beside the output: %q, %v", b, err)
	}
	// A writer with another temporary folder and lock folder meets the same lock.
	t.Setenv("DCL_LOCK_DIR", t.TempDir())
	t.Setenv("TMPDIR", t.TempDir())
	if _, err := Acquire(ctx, claim(out)); !errors.Is(err, ErrLocked) {
		t.Errorf("another TMPDIR: got %v, want ErrLocked", err)
	}
	release()
	if _, err := os.Stat(filepath.Join(dir, "new")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the folder made for the lock is left after the release: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Errorf("left beside the output after the release: %v", entries)
	}
	r, err := Acquire(ctx, claim(out))
	if err != nil {
		t.Fatalf("after the release: %v", err)
	}
	r()
}

// TestLockFilesCannotBeTurnedAgainstOtherFiles: a link, a second name of another file or a
// FIFO planted where a lock file goes is refused in one line; the file it points to is left
// as it was, and nothing blocks.
func TestLockFilesCannotBeTurnedAgainstOtherFiles(t *testing.T) {
	dir := t.TempDir()
	plants := map[string]func(victim, lockFile string) error{
		"symbolic link": func(v, l string) error { return os.Symlink(v, l) },
		"hard link":     func(v, l string) error { return os.Link(v, l) },
		"FIFO":          func(_, l string) error { return syscall.Mkfifo(l, 0o666) },
	}
	for name, plant := range plants {
		t.Run(name, func(t *testing.T) {
			victim := filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, strings.ReplaceAll(name, " ", "-"))
			lockFile := filepath.Join(dir, "."+filepath.Base(out)+".dcl-lock")
			if err := plant(victim, lockFile); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				r, err := Acquire(context.Background(), claim(out))
				if err == nil {
					r()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "lock file") || errors.Is(err, ErrLocked) {
					t.Errorf("got %v, want the planted lock file refused", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Acquire blocked on the planted lock file")
			}
			if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
				t.Errorf("the file the plant points to: %q, %v", b, err)
			}
		})
	}
}

// TestLockFilesAreTheFolderWritersOnly: a lock file can be opened (and so held) only by those
// who may write the folder it is in: its mode follows the folder's write bits.
func TestLockFilesAreTheFolderWritersOnly(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	for _, tt := range []struct {
		folder, want os.FileMode
	}{{0o755, 0o600}, {0o775, 0o660}, {0o777, 0o666}, {0o733, 0o666}, {0o700, 0o600}} {
		dir := filepath.Join(t.TempDir(), "d")
		if err := os.Mkdir(dir, tt.folder); err != nil {
			t.Fatal(err)
		}
		r, err := Acquire(context.Background(), claim(filepath.Join(dir, "out")))
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(filepath.Join(dir, ".out.dcl-lock"))
		if err != nil || st.Mode().Perm() != tt.want {
			t.Errorf("folder %o: lock file %v, %v; want mode %o", tt.folder, st.Mode(), err, tt.want)
		}
		r()
	}
}

// TestLocksOnGCS: on gs:// the lock is an object beside the output, created under a
// generation precondition: a second writer is refused naming the first, a writer inside a
// held folder too, and a lock left by a process that is gone is taken over.
func TestLocksOnGCS(t *testing.T) {
	root := gcstest.Start(t, "locks")
	ctx := context.Background()
	run := root + "/runs/r"
	release, err := Acquire(ctx, claim(run))
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := storage.Exists(ctx, root+"/runs/.r.dcl-lock"); !ok || err != nil {
		t.Errorf("the lock object beside the output: %v, %v", ok, err)
	}
	for _, other := range []string{run + "/", root + "//runs/r", run + "/embeddings", root + "/runs"} {
		_, err := Acquire(ctx, claim(other))
		if !errors.Is(err, ErrLocked) {
			t.Errorf("%s: got %v, want ErrLocked", other, err)
		}
	}
	if _, err := Acquire(ctx, claim(run)); err == nil || !strings.Contains(err.Error(), "dcl test (pid") {
		t.Errorf("got %v, want the holder named", err)
	}
	side, err := Acquire(ctx, claim(root+"/runs/r2"))
	if err != nil {
		t.Errorf("a folder beside the held one: %v", err)
	} else {
		side()
	}
	inside, err := Acquire(ctx, claim(root+"/runs/r2/embeddings"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Acquire(ctx, claim(root+"/runs/r2")); !errors.Is(err, ErrLocked) {
		t.Errorf("a folder holding a held one: got %v, want ErrLocked", err)
	}
	inside()
	release()
	if ok, _ := storage.Exists(ctx, root+"/runs/.r.dcl-lock"); ok {
		t.Error("the lock object is left after the release")
	}

	// A lock object left by a killed process of this machine (a pid that no longer runs).
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	plantGCSLock(t, root+"/runs/.k.dcl-lock", dead.Process.Pid, time.Now())
	r, err := Acquire(ctx, claim(root+"/runs/k"))
	if err != nil {
		t.Fatalf("a lock of a process that is gone: %v", err)
	}
	r()
	// One of another machine, refreshed long ago.
	plantGCSLock(t, root+"/runs/.m.dcl-lock", 0, time.Now().Add(-time.Hour))
	if r, err := Acquire(ctx, claim(root+"/runs/m")); err != nil {
		t.Errorf("a lock its holder stopped refreshing: %v", err)
	} else {
		r()
	}
	// One of another machine, fresh: held.
	plantGCSLock(t, root+"/runs/.f.dcl-lock", 0, time.Now())
	if _, err := Acquire(ctx, claim(root+"/runs/f")); !errors.Is(err, ErrLocked) || !strings.Contains(err.Error(), "planted") {
		t.Errorf("a fresh lock of another machine: got %v, want ErrLocked naming it", err)
	}
}

// plantGCSLock writes a lock object as a holder would: on another machine when pid is 0.
func plantGCSLock(t *testing.T, p string, pid int, refreshed time.Time) {
	t.Helper()
	host, _ := os.Hostname()
	if pid == 0 {
		host, pid = "elsewhere", 1
	}
	_, object, _ := strings.Cut(strings.TrimPrefix(p, "gs://"), "/")
	bucket, _, _ := strings.Cut(strings.TrimPrefix(p, "gs://"), "/")
	client, err := gcstorage.NewClient(context.Background(), option.WithoutAuthentication())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	w := client.Bucket(bucket).Object(object).NewWriter(context.Background())
	w.Metadata = map[string]string{"dcl-holder": "planted", "dcl-host": host, "dcl-pid": strconv.Itoa(pid),
		"dcl-token": "planted", "dcl-refreshed": refreshed.UTC().Format(time.RFC3339Nano)}
	if _, err := w.Write([]byte("planted\n")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
