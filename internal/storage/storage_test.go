package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
)

// A crash between creating the temporary file and renaming it leaves a temporary behind:
// readers must not list it and RemoveTemporaries must delete it.
func TestLeftoverTemporariesAreNotData(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	planted := filepath.Join(dir, tempPrefix("part-00000.parquet")+"123")
	if err := os.WriteFile(planted, []byte("half a shard"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(ctx, filepath.Join(dir, "part-00001.parquet"), []byte("ok")); err != nil {
		t.Fatal(err)
	}
	listed, err := List(ctx, filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	if names := baseNames(listed); !slices.Equal(names, []string{"part-00001.parquet"}) {
		t.Errorf("List = %v, want only the committed file", names)
	}
	n, err := RemoveTemporaries(ctx, dir)
	if err != nil || n != 1 {
		t.Fatalf("RemoveTemporaries = %d, %v; want 1, nil", n, err)
	}
	if _, err := os.Stat(planted); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the planted temporary is still there: %v", err)
	}
	if n, err := RemoveTemporaries(ctx, filepath.Join(dir, "missing")); n != 0 || err != nil {
		t.Errorf("RemoveTemporaries on a missing folder = %d, %v", n, err)
	}
}

// The temporary a write leaves when it is interrupted is not data to other programs either:
// it is hidden (a leading dot, which pyarrow datasets, Spark and Hadoop skip) and no glob
// for the final name's extension (DuckDB's '**/*.parquet') matches it.
func TestTemporaryNamesMatchNoGlobOfData(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"part-00000-of-00002.parquet", "manifest.json", "step-000000009.dclckpt"} {
		t.Run(name, func(t *testing.T) {
			var temps []string
			err := Create(context.Background(), filepath.Join(dir, name), func(w io.Writer) error {
				entries, err := os.ReadDir(dir)
				for _, e := range entries {
					if strings.Contains(e.Name(), TempMarker) {
						temps = append(temps, e.Name())
					}
				}
				return err
			})
			if err != nil || len(temps) != 1 {
				t.Fatalf("Create: %v; temporaries while writing %v, want one", err, temps)
			}
			tmp := temps[0]
			if !strings.HasPrefix(tmp, ".") {
				t.Errorf("temporary %q is not hidden", tmp)
			}
			if ok, _ := path.Match("*"+path.Ext(name), tmp); ok {
				t.Errorf("temporary %q matches the glob *%s of the final files", tmp, path.Ext(name))
			}
		})
	}
}

func TestJoin(t *testing.T) {
	tests := []struct {
		give []string
		want string
	}{
		{[]string{"out", "a", "b.parquet"}, filepath.Join("out", "a", "b.parquet")},
		{[]string{"gs://bucket/x", "manifest.json"}, "gs://bucket/x/manifest.json"},
		{[]string{"gs://bucket/x/", "y", "z"}, "gs://bucket/x/y/z"},
		{[]string{"memfs://t", "f"}, "memfs://t/f"},
	}
	for _, tt := range tests {
		if got := Join(tt.give[0], tt.give[1:]...); got != tt.want {
			t.Errorf("Join(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func baseNames(paths []string) []string {
	var names []string
	for _, p := range paths {
		names = append(names, Base(p))
	}
	slices.Sort(names)
	return names
}

func truncate(b []byte) string {
	if len(b) > 20 {
		return fmt.Sprintf("%s… (%d bytes)", b[:20], len(b))
	}
	return string(b)
}

// Files on gs:// share one storage client per emulator setting (a client per file would
// fetch credentials per file on Dataflow's workers); another setting gets its own.
func TestGCSClientIsSharedPerEmulator(t *testing.T) {
	ctx := context.Background()
	t.Setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:1")
	a, err := newGCSClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := newGCSClient(ctx)
	if a != b {
		t.Error("two clients for the same emulator setting")
	}
	t.Setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:2")
	if c, _ := newGCSClient(ctx); c == a {
		t.Error("the client of another emulator setting was reused")
	}
}

func TestDecodeJSONIsStrict(t *testing.T) {
	type inner struct {
		A int `json:"a"`
	}
	type doc struct {
		X  []inner         `json:"x"`
		M  map[string]int  `json:"m"`
		In inner           `json:"in"`
		R  json.RawMessage `json:"r"`
	}
	tests := []struct {
		give    string
		wantErr string
	}{
		{`{"x": [{"a": 1}, {"a": 2}], "m": {"a": 1, "b": 2}, "in": {"a": 3}, "r": {"a": 1}}`, ""},
		{` {"x": []}` + "\n\t ", ""},
		{`{"x": [], "x": []}`, `key "x" given twice`},
		{`{"in": {"a": 1, "a": 2}}`, `key "a" given twice`},
		{`{"x": [{"a": 1, "a": 1}]}`, `key "a" given twice`},
		{`{"m": {"k": 1, "k": 2}}`, `key "k" given twice`},
		{`{"r": {"k": 1, "k": 2}}`, `key "k" given twice`},
		{`{"x": []} garbage`, "data after the JSON value"},
		{`{"x": []}{}`, "data after the JSON value"},
		{`{"y": 1}`, "unknown field"},
		{`{"x": [`, "unexpected EOF"},
	}
	for _, tt := range tests {
		var d doc
		err := DecodeJSON([]byte(tt.give), &d)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("DecodeJSON(%s) = %v, want %q", tt.give, err, tt.wantErr)
		}
	}
}

// A process killed while writing a file leaves its temporary; the next complete write of the
// same file removes it, but not a temporary that this process may be writing now.
func TestWriteRemovesWhatKilledWritesOfTheFileLeft(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "step-000000009.dclckpt")
	stale := filepath.Join(dir, tempPrefix(filepath.Base(p))+"111")
	staleOldName := p + TempMarker + "110" // named as versions before tempPrefix named them
	live := filepath.Join(dir, tempPrefix(filepath.Base(p))+"222")
	other := filepath.Join(dir, tempPrefix("step-000000012.dclckpt")+"333")
	for _, f := range []string{stale, staleOldName, live, other} {
		if err := os.WriteFile(f, []byte("half"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	old := processStart.Add(-time.Hour)
	for _, f := range []string{stale, staleOldName, other} {
		if err := os.Chtimes(f, old, old); err != nil {
			t.Fatal(err)
		}
	}
	if err := WriteFile(context.Background(), p, []byte("whole")); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[string]bool{stale: false, staleOldName: false, live: true, other: true} {
		if _, err := os.Stat(f); (err == nil) != want {
			t.Errorf("%s: present %v, want %v", filepath.Base(f), err == nil, want)
		}
	}
}

// TestWritesKeepTheUmask: a file written atomically, and the folders made for it, get the
// permissions a plain create gives under the process's umask.
func TestWritesKeepTheUmask(t *testing.T) {
	for _, tt := range []struct{ umask, file, folder os.FileMode }{{0o077, 0o600, 0o700}, {0o002, 0o664, 0o775}, {0o022, 0o644, 0o755}} {
		old := syscall.Umask(int(tt.umask))
		dir := t.TempDir()
		p := filepath.Join(dir, "made", "out.json")
		err := WriteFile(context.Background(), p, []byte("{}"))
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		for f, want := range map[string]os.FileMode{p: tt.file, filepath.Dir(p): tt.folder} {
			if st, err := os.Stat(f); err != nil || st.Mode().Perm() != want {
				t.Errorf("umask %03o: %s is %v (%v), want %v", tt.umask, filepath.Base(f), st.Mode().Perm(), err, want)
			}
		}
	}
}

// TestLongNamesAreWritten: every name the filesystem takes can be written atomically and
// locked, although the temporary and the lock file derive longer names from it.
func TestLongNamesAreWritten(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []int{200, 248, 255} {
		name := strings.Repeat("é", n/2) + strings.Repeat("x", n%2)
		p := filepath.Join(dir, name)
		if err := WriteFile(context.Background(), p, []byte("x")); err != nil {
			t.Errorf("a %d-byte name: %v", n, err)
		}
		l, _, err := TryLock(context.Background(), Clean(p), true, "test")
		if err != nil {
			t.Errorf("locking a %d-byte name: %v", n, err)
			continue
		}
		if base := filepath.Base(LockFile(Clean(p))); len(base) > maxNameLen || !utf8.ValidString(base) {
			t.Errorf("the lock file of a %d-byte name is %q", n, base)
		}
		l.Release()
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 3 {
		t.Errorf("left in the folder: %v", entries)
	}
	if a, b := tempPrefix(strings.Repeat("a", 250)+"1"), tempPrefix(strings.Repeat("a", 250)+"2"); a == b {
		t.Errorf("two long names share the temporary prefix %q", a)
	}
}
