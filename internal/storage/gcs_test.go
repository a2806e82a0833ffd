package storage

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsouza/fake-gcs-server/fakestorage"

	"github.com/dcl-beam/dcl-beam/internal/testing/gcstest"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

// captureLog captures slog's output for the rest of the test.
func captureLog(t *testing.T) *testfiles.SyncBuffer {
	l := &testfiles.SyncBuffer{}
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(l, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })
	return l
}

func setWait(t *testing.T, d time.Duration) {
	old := Wait()
	if err := SetWait(d); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { SetWait(old) })
}

// gcsOps are the storage operations on a gs:// root, each in a form that reports only an
// error, for tests that run them all under the same fault.
func gcsOps(root string) map[string]func(ctx context.Context) error {
	p := Join(root, "d", "a.bin")
	return map[string]func(ctx context.Context) error{
		"WriteFile": func(ctx context.Context) error { return WriteFile(ctx, Join(root, "d", "new.bin"), []byte("new")) },
		"ReadFile":  func(ctx context.Context) error { _, err := ReadFile(ctx, p); return err },
		"OpenFile": func(ctx context.Context) error {
			f, err := OpenFile(ctx, p)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.ReadAt(make([]byte, 4), 2)
			return err
		},
		"Exists":   func(ctx context.Context) error { _, err := Exists(ctx, p); return err },
		"Size":     func(ctx context.Context) error { _, err := Size(ctx, p); return err },
		"List":     func(ctx context.Context) error { _, err := List(ctx, Join(root, "d", "*.bin")); return err },
		"ListDir":  func(ctx context.Context) error { _, err := ListDir(ctx, Join(root, "d")); return err },
		"ListTree": func(ctx context.Context) error { _, err := ListTree(ctx, root); return err },
		"Remove":   func(ctx context.Context) error { return Remove(ctx, Join(root, "d", "gone.bin")) },
	}
}

// With nothing listening at the endpoint, every operation fails within the wait (plus the
// client's last back-off), with one line naming the endpoint and the cause, after logging
// its retries.
func TestGCSUnreachableFailsFastInOneLine(t *testing.T) {
	root, endpoint := gcstest.Unreachable(t, "nowhere")
	const wait = 2 * time.Second
	setWait(t, wait)
	logs := captureLog(t)
	ops := gcsOps(root)
	errs := make(map[string]error, len(ops))
	took := make(map[string]time.Duration, len(ops))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, op := range ops {
		wg.Go(func() {
			start := time.Now()
			err := op(context.Background())
			mu.Lock()
			defer mu.Unlock()
			errs[name], took[name] = err, time.Since(start)
		})
	}
	wg.Wait()
	for name := range ops {
		err := errs[name]
		var se *Error
		switch {
		case !errors.As(err, &se):
			t.Errorf("%s = %v, want a *storage.Error", name, err)
			continue
		case took[name] > wait+5*time.Second:
			t.Errorf("%s took %s to fail, want about the wait of %s", name, took[name], wait)
		case strings.Contains(err.Error(), "\n"):
			t.Errorf("%s: error spans lines: %q", name, err)
		}
		for _, want := range []string{endpoint, "connection refused", root} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %q does not name %q", name, err, want)
			}
		}
	}
	if n := strings.Count(logs.String(), "storage: retrying"); n < len(ops) {
		t.Errorf("%d retry lines logged for %d operations that each retried:\n%s", n, len(ops), logs)
	}
}

// An endpoint that refuses connections for a while (a restarting server) costs retries,
// not the operation.
func TestGCSRetriesUntilTheServerAnswers(t *testing.T) {
	root := gcstest.StartLate(t, "late", 300*time.Millisecond)
	setWait(t, 20*time.Second)
	logs := captureLog(t)
	ctx := context.Background()
	p := Join(root, "x.bin")
	if err := WriteFile(ctx, p, []byte("after the restart")); err != nil {
		t.Fatalf("WriteFile while the server starts: %v", err)
	}
	if got, err := ReadFile(ctx, p); err != nil || string(got) != "after the restart" {
		t.Fatalf("ReadFile = %q, %v", got, err)
	}
	if !strings.Contains(logs.String(), "storage: retrying") || !strings.Contains(logs.String(), "connection refused") {
		t.Errorf("no retry line for the refused connections:\n%s", logs)
	}
}

// The conformance checks' operations under faults that a retry cures: every operation meets
// a 503 first, and every upload and ranged read a connection dropped halfway; each still
// succeeds with the right bytes, and the faults were met.
func TestGCSOperationsSurviveTransientFaults(t *testing.T) {
	root, faults, _ := gcstest.StartFaulty(t, "faulty")
	setWait(t, 20*time.Second)
	captureLog(t)
	ctx := context.Background()
	want := bytes.Repeat([]byte("0123456789"), 3000)
	if err := WriteFile(ctx, Join(root, "d", "a.bin"), want); err != nil {
		t.Fatal(err)
	}
	for name, op := range gcsOps(root) {
		faults.Inject(gcstest.Fault{Status: http.StatusServiceUnavailable})
		if err := op(ctx); err != nil {
			t.Errorf("%s after a 503: %v", name, err)
		}
	}
	faults.Inject(gcstest.Fault{Drop: true, Match: gcstest.Uploads})
	p := Join(root, "d", "dropped.bin")
	if err := WriteFile(ctx, p, want); err != nil {
		t.Fatalf("WriteFile with its upload dropped once: %v", err)
	}
	faults.Inject(gcstest.Fault{Drop: true})
	if got, err := ReadFile(ctx, p); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("ReadFile with a dropped connection = %d bytes, %v; want %d bytes", len(got), err, len(want))
	}
	f, err := OpenFile(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	faults.Inject(gcstest.Fault{Drop: true})
	buf := make([]byte, 10)
	if n, err := f.ReadAt(buf, 12345); err != nil || n != 10 || string(buf) != "5678901234" {
		t.Errorf("ReadAt with a dropped connection = %d, %v, %q", n, err, buf)
	}
	if n := faults.Injected(); n != len(gcsOps(root))+3 {
		t.Errorf("%d faults met, want %d: the operations did not go through the proxy", n, len(gcsOps(root))+3)
	}
}

// An upload whose connection drops every time fails within the wait, and nothing of it
// becomes visible; nor does an upload whose writer fails halfway.
func TestGCSFailedUploadLeavesNothing(t *testing.T) {
	root, faults, srv := gcstest.StartFaulty(t, "drops")
	setWait(t, 2*time.Second)
	captureLog(t)
	ctx := context.Background()
	for range 1000 {
		faults.Inject(gcstest.Fault{Drop: true, Match: gcstest.Uploads})
	}
	start := time.Now()
	err := WriteFile(ctx, Join(root, "never.bin"), bytes.Repeat([]byte("x"), 1<<20))
	var se *Error
	if !errors.As(err, &se) || se.Stalled == 0 {
		t.Fatalf("WriteFile with every upload dropped = %v, want a stalled *storage.Error", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the failing upload took %s", d)
	}
	t.Logf("%d upload attempts dropped before the wait of 2s ran out", faults.Injected())
	faults.Clear()
	boom := errors.New("boom")
	err = Create(ctx, Join(root, "half.bin"), func(w io.Writer) error {
		w.Write(bytes.Repeat([]byte("y"), 1<<20))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Create with a failing writer = %v", err)
	}
	listed, err := srv.ListObjectsWithOptionsPaginated("drops", fakestorage.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range listed.Objects {
		t.Errorf("object %s (%d bytes) is visible after failed uploads", o.Name, o.Size)
	}
}

func TestGlobRegexp(t *testing.T) {
	tests := []struct {
		give    string
		match   []string
		noMatch []string
	}{
		{"d/*.bin", []string{"d/a.bin", "d/.bin"}, []string{"d/e/a.bin", "d/a.bins"}},
		{"d/**", []string{"d/a", "d/e/f/g"}, []string{"e/a"}},
		{"d/**/x", []string{"d/x", "d/e/x", "d/e/f/x"}, []string{"d/ex"}},
		{"d/?.bin", []string{"d/a.bin"}, []string{"d/ab.bin", "d//.bin"}},
		{"d/[ab].bin", []string{"d/a.bin", "d/b.bin"}, []string{"d/c.bin"}},
		{"d/[!ab].bin", []string{"d/c.bin"}, []string{"d/a.bin"}},
		{"d/a+b(1).bin", []string{"d/a+b(1).bin"}, []string{"d/aab1.bin"}},
	}
	for _, tt := range tests {
		re, err := globRegexp(tt.give)
		if err != nil {
			t.Fatalf("globRegexp(%q): %v", tt.give, err)
		}
		for _, s := range tt.match {
			if !re.MatchString(s) {
				t.Errorf("%q does not match %q", tt.give, s)
			}
		}
		for _, s := range tt.noMatch {
			if re.MatchString(s) {
				t.Errorf("%q matches %q", tt.give, s)
			}
		}
	}
	if _, err := globRegexp("d/[ab"); err == nil {
		t.Error("an unclosed class was accepted")
	}
}

func TestWaitFromEnv(t *testing.T) {
	tests := []struct {
		give    string
		want    time.Duration
		wantErr bool
	}{
		{"", DefaultWait, false},
		{"2m", 2 * time.Minute, false},
		{"90", 0, true},
		{"-1s", 0, true},
	}
	for _, tt := range tests {
		t.Setenv(WaitEnv, tt.give)
		got, err := WaitFromEnv()
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("%s=%q: %v, %v; want %v, error %v", WaitEnv, tt.give, got, err, tt.want, tt.wantErr)
		}
	}
}
