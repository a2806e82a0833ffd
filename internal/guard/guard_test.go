package guard

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	t.Setenv(LockDirEnv, t.TempDir())
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

// TestUnwritableLockDir: a lock folder that cannot be made is one clear error.
func TestUnwritableLockDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(LockDirEnv, filepath.Join(file, "locks"))
	_, err := Acquire(context.Background(), claim(t.TempDir()))
	if err == nil || !strings.Contains(err.Error(), "lock f") || !strings.Contains(err.Error(), LockDirEnv) {
		t.Errorf("got %v", err)
	}
}
