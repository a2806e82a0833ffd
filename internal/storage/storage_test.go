package storage

import (
	"bytes"
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
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/gcstest"
)

// TestFilesystemConformance runs the same checks against every scheme the toolkit writes to:
// a local folder, Beam's in-memory filesystem and a GCS emulator on loopback.
func TestFilesystemConformance(t *testing.T) {
	roots := map[string]func(t *testing.T) string{
		"local": func(t *testing.T) string { return t.TempDir() },
		"mem":   func(t *testing.T) string { return "memfs://" + strings.ReplaceAll(t.Name(), "/", "_") },
		"gcs":   func(t *testing.T) string { return gcstest.Start(t, "conformance") + "/run" },
	}
	for name, root := range roots {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			dir := root(t)

			p := Join(dir, "sub", "a.bin")
			want := bytes.Repeat([]byte("0123456789"), 1000)
			if err := WriteFile(ctx, p, want); err != nil {
				t.Fatalf("WriteFile: %v", err)
			}
			got, err := ReadFile(ctx, p)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("ReadFile = %d bytes, %v; want %d bytes", len(got), err, len(want))
			}
			if n, err := Size(ctx, p); err != nil || n != int64(len(want)) {
				t.Fatalf("Size = %d, %v; want %d", n, err, len(want))
			}

			f, err := OpenFile(ctx, p)
			if err != nil {
				t.Fatalf("OpenFile: %v", err)
			}
			if f.Size() != int64(len(want)) {
				t.Errorf("File.Size = %d, want %d", f.Size(), len(want))
			}
			buf := make([]byte, 15)
			if n, err := f.ReadAt(buf, 9995); n != 5 || err != io.EOF || string(buf[:5]) != "56789" {
				t.Errorf("ReadAt past the end = %d, %v, %q; want 5, EOF, 56789", n, err, buf[:n])
			}
			if n, err := f.ReadAt(buf, 3); n != 15 || err != nil || string(buf) != "345678901234567" {
				t.Errorf("ReadAt = %d, %v, %q", n, err, buf)
			}
			f.Close()

			// A failed write leaves the earlier file as it was and adds nothing.
			boom := errors.New("boom")
			err = Create(ctx, p, func(w io.Writer) error {
				w.Write([]byte("partial"))
				return boom
			})
			if !errors.Is(err, boom) {
				t.Fatalf("Create with a failing writer = %v, want boom", err)
			}
			if got, _ := ReadFile(ctx, p); !bytes.Equal(got, want) {
				t.Errorf("a failed Create changed the existing file to %q", truncate(got))
			}
			fresh := Join(dir, "sub", "never.bin")
			_ = Create(ctx, fresh, func(w io.Writer) error {
				w.Write([]byte("partial"))
				return boom
			})
			if ok, err := Exists(ctx, fresh); ok || err != nil {
				t.Errorf("Exists(%s) after a failed Create = %v, %v; want false", fresh, ok, err)
			}

			if err := WriteFile(ctx, Join(dir, "sub", "b.bin"), []byte("b")); err != nil {
				t.Fatal(err)
			}
			listed, err := List(ctx, Join(dir, "sub", "*.bin"))
			if err != nil {
				t.Fatalf("List: %v", err)
			}
			names := baseNames(listed)
			if !slices.Equal(names, []string{"a.bin", "b.bin"}) {
				t.Errorf("List = %v, want [a.bin b.bin]", names)
			}
			entries, err := ListDir(ctx, Join(dir, "sub"))
			if err != nil {
				t.Fatalf("ListDir: %v", err)
			}
			slices.Sort(entries)
			if !slices.Equal(entries, []string{"a.bin", "b.bin"}) {
				t.Errorf("ListDir = %v, want [a.bin b.bin]", entries)
			}

			if err := Remove(ctx, p); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			if ok, _ := Exists(ctx, p); ok {
				t.Errorf("%s exists after Remove", p)
			}
			if err := Remove(ctx, p); err != nil {
				t.Errorf("removing a missing file = %v, want nil", err)
			}
			if _, err := ReadFile(ctx, p); err == nil || !strings.Contains(err.Error(), "a.bin") {
				t.Errorf("reading a missing file = %v, want an error naming it", err)
			}
		})
	}
}

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

func TestPresent(t *testing.T) {
	ctx := context.Background()
	roots := map[string]string{"local": t.TempDir(), "mem": "memfs://present", "gcs": gcstest.Start(t, "present")}
	for name, root := range roots {
		if err := WriteFile(ctx, Join(root, "d", "e", "f.bin"), []byte("x")); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			give string
			want bool
		}{
			{root, true}, {Join(root, "d"), true}, {Join(root, "d", "e", "f.bin"), true},
			{Join(root, "nothing"), false}, {Join(root, "d", "e", "f"), false},
		} {
			if name == "mem" && (tt.give == root || tt.give == Join(root, "d")) {
				continue // memfs lists one level under a folder only
			}
			if got, err := Present(ctx, tt.give); got != tt.want || err != nil {
				t.Errorf("%s: Present(%s) = %v, %v; want %v", name, tt.give, got, err, tt.want)
			}
		}
	}
}
