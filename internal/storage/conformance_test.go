package storage

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/gcstest"
)

// Each driver runs the same conformance suite (gocloud's drivertest shape): what the package
// promises must hold on every store, not only on the one a test happens to use.

func TestLocalDriver(t *testing.T) {
	runConformance(t, func(t *testing.T) string { return t.TempDir() })
}

func TestMemDriver(t *testing.T) {
	runConformance(t, func(t *testing.T) string { return "memfs://" + strings.ReplaceAll(t.Name(), "/", "_") })
}

func TestGCSDriver(t *testing.T) {
	runConformance(t, func(t *testing.T) string { return gcstest.Start(t, "conformance") + "/run" })
}

// runConformance runs the suite on the store of the root that newRoot gives, once for the
// whole suite (a GCS emulator is started once); each check works in a folder of its own.
func runConformance(t *testing.T, newRoot func(t *testing.T) string) {
	root := newRoot(t)
	checks := []struct {
		name  string
		check func(t *testing.T, ctx context.Context, dir string)
	}{
		{"WriteReadSize", checkWriteRead},
		{"RandomAccess", checkRandomAccess},
		{"FailedWriteLeavesNothing", checkFailedWrite},
		{"WriterCommitAndAbort", checkWriter},
		{"MissingFileIsNamedAndNotExist", checkMissing},
		{"Remove", checkRemove},
		{"Rename", checkRename},
		{"Glob", checkGlob},
		{"ListDirAndTree", checkListDirAndTree},
		{"Present", checkPresent},
		{"Temporaries", checkTemporaries},
		{"RemoveTree", checkRemoveTree},
		{"Locks", checkLocks},
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			c.check(t, context.Background(), Join(root, c.name))
		})
	}
}

func mustWrite(t *testing.T, ctx context.Context, p string, data []byte) {
	t.Helper()
	if err := WriteFile(ctx, p, data); err != nil {
		t.Fatalf("WriteFile(%s): %v", p, err)
	}
}

var tenThousand = bytes.Repeat([]byte("0123456789"), 1000)

func checkWriteRead(t *testing.T, ctx context.Context, dir string) {
	p := Join(dir, "sub", "a.bin")
	mustWrite(t, ctx, p, tenThousand)
	got, err := ReadFile(ctx, p)
	if err != nil || !bytes.Equal(got, tenThousand) {
		t.Fatalf("ReadFile = %d bytes, %v; want %d bytes", len(got), err, len(tenThousand))
	}
	if n, err := Size(ctx, p); err != nil || n != int64(len(tenThousand)) {
		t.Errorf("Size = %d, %v; want %d", n, err, len(tenThousand))
	}
	if ok, err := Exists(ctx, p); !ok || err != nil {
		t.Errorf("Exists = %v, %v; want true", ok, err)
	}
	mustWrite(t, ctx, p, []byte("replaced"))
	if got, _ := ReadFile(ctx, p); string(got) != "replaced" {
		t.Errorf("after a second write: %q", truncate(got))
	}
	r, err := Open(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	half := make([]byte, 4)
	if _, err := io.ReadFull(r, half); err != nil || string(half) != "repl" {
		t.Errorf("Open then read = %q, %v", half, err)
	}
	if err := r.Close(); err != nil {
		t.Errorf("closing a reader read halfway: %v", err)
	}
}

func checkRandomAccess(t *testing.T, ctx context.Context, dir string) {
	p := Join(dir, "a.bin")
	mustWrite(t, ctx, p, tenThousand)
	f, err := OpenFile(ctx, p)
	if err != nil {
		t.Fatalf("OpenFile: %v", err)
	}
	defer f.Close()
	if f.Size() != int64(len(tenThousand)) {
		t.Errorf("File.Size = %d, want %d", f.Size(), len(tenThousand))
	}
	buf := make([]byte, 15)
	if n, err := f.ReadAt(buf, 9995); n != 5 || err != io.EOF || string(buf[:5]) != "56789" {
		t.Errorf("ReadAt past the end = %d, %v, %q; want 5, EOF, 56789", n, err, buf[:n])
	}
	if n, err := f.ReadAt(buf, 3); n != 15 || err != nil || string(buf) != "345678901234567" {
		t.Errorf("ReadAt = %d, %v, %q", n, err, buf)
	}
	if n, err := f.ReadAt(buf, 20000); n != 0 || err != io.EOF {
		t.Errorf("ReadAt beyond the end = %d, %v; want 0, EOF", n, err)
	}
}

// A failed write leaves the earlier file as it was and adds nothing, and its error is the
// writer's, naming the file.
func checkFailedWrite(t *testing.T, ctx context.Context, dir string) {
	p := Join(dir, "a.bin")
	mustWrite(t, ctx, p, tenThousand)
	boom := errors.New("boom")
	failing := func(w io.Writer) error {
		w.Write([]byte("partial"))
		return boom
	}
	err := Create(ctx, p, failing)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), p) {
		t.Fatalf("Create with a failing writer = %v, want boom naming %s", err, p)
	}
	if got, _ := ReadFile(ctx, p); !bytes.Equal(got, tenThousand) {
		t.Errorf("a failed Create changed the existing file to %q", truncate(got))
	}
	fresh := Join(dir, "never.bin")
	_ = Create(ctx, fresh, failing)
	if ok, err := Exists(ctx, fresh); ok || err != nil {
		t.Errorf("Exists(%s) after a failed Create = %v, %v; want false", fresh, ok, err)
	}
	if all, _ := ListTree(ctx, dir); !slices.Equal(all, []string{"a.bin"}) {
		t.Errorf("after failed writes the folder holds %v, want [a.bin]", all)
	}
}

// Writer pushes data over time: Commit makes the file appear with the size and sha256 it
// reports; Abort leaves nothing.
func checkWriter(t *testing.T, ctx context.Context, dir string) {
	p := Join(dir, "w.bin")
	w := NewWriter(ctx, p)
	for range 10 {
		if _, err := w.Write(tenThousand[:1000]); err != nil {
			t.Fatal(err)
		}
	}
	if ok, _ := Exists(ctx, p); ok {
		t.Error("the file is visible before Commit")
	}
	n, sha, err := w.Commit()
	if want := sha256.Sum256(tenThousand); err != nil || n != 10000 || sha != hex.EncodeToString(want[:]) {
		t.Fatalf("Commit = %d, %q, %v", n, sha, err)
	}
	if got, _ := ReadFile(ctx, p); !bytes.Equal(got, tenThousand) {
		t.Errorf("committed %d bytes, want the 10000 written", len(got))
	}
	w.Abort() // after Commit: nothing
	if ok, _ := Exists(ctx, p); !ok {
		t.Error("Abort after Commit removed the file")
	}

	aborted := Join(dir, "aborted.bin")
	w = NewWriter(ctx, aborted)
	w.Write([]byte("half"))
	w.Abort()
	w.Abort()
	if ok, err := Exists(ctx, aborted); ok || err != nil {
		t.Errorf("Exists after Abort = %v, %v; want false", ok, err)
	}
	if _, _, err := w.Commit(); err == nil {
		t.Error("Commit after Abort succeeded")
	}
}

// Reading, sizing or opening a missing file fails with an error that names it and that
// errors.Is recognises as fs.ErrNotExist, whatever the store; Exists says false without an
// error.
func checkMissing(t *testing.T, ctx context.Context, dir string) {
	p := Join(dir, "missing.bin")
	errs := map[string]error{}
	_, errs["ReadFile"] = ReadFile(ctx, p)
	_, errs["Open"] = Open(ctx, p)
	_, errs["OpenFile"] = OpenFile(ctx, p)
	_, errs["Size"] = Size(ctx, p)
	for name, err := range errs {
		if err == nil || !strings.Contains(err.Error(), p) || !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s of a missing file = %v; want fs.ErrNotExist naming %s", name, err, p)
		}
	}
	if ok, err := Exists(ctx, p); ok || err != nil {
		t.Errorf("Exists of a missing file = %v, %v", ok, err)
	}
}

func checkRemove(t *testing.T, ctx context.Context, dir string) {
	p := Join(dir, "a.bin")
	mustWrite(t, ctx, p, []byte("a"))
	if err := Remove(ctx, p); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if ok, _ := Exists(ctx, p); ok {
		t.Errorf("%s exists after Remove", p)
	}
	if err := Remove(ctx, p); err != nil {
		t.Errorf("removing a missing file = %v, want nil", err)
	}
}

// Rename replaces what is under the new name and leaves nothing under the old.
func checkRename(t *testing.T, ctx context.Context, dir string) {
	from, to := Join(dir, "staging", "a.bin"), Join(dir, "final", "a.bin")
	mustWrite(t, ctx, from, []byte("new"))
	mustWrite(t, ctx, to, []byte("old"))
	if err := Rename(ctx, from, to); err != nil {
		t.Fatalf("Rename: %v", err)
	}
	if got, err := ReadFile(ctx, to); err != nil || string(got) != "new" {
		t.Errorf("after Rename the target holds %q, %v", got, err)
	}
	if ok, _ := Exists(ctx, from); ok {
		t.Error("the renamed file is still under its old name")
	}
	err := Rename(ctx, Join(dir, "nothing.bin"), Join(dir, "x.bin"))
	if err == nil || !strings.Contains(err.Error(), Join(dir, "nothing.bin")) {
		t.Errorf("renaming a missing file = %v, want an error naming it", err)
	}
	other := "memfs://elsewhere/x"
	if Scheme(to) == "memfs" {
		other = filepath.Join(t.TempDir(), "x")
	}
	if err := Rename(ctx, to, other); err == nil {
		t.Error("a rename across stores succeeded")
	}
}

// Globs match alike on every store: * ? and [...] within one element, ** across elements;
// only files match (not folders), temporaries never, and the result is sorted.
func checkGlob(t *testing.T, ctx context.Context, dir string) {
	for _, f := range []string{"a.bin", "b.bin", "c.txt", "e/f.bin", "e/g/h.bin", "e/g/i.txt", tempPrefix("a.bin") + "1"} {
		mustWrite(t, ctx, Join(dir, strings.Split(f, "/")...), []byte(f))
	}
	mustWrite(t, ctx, dir+"-sibling.bin", []byte("not under dir"))
	tests := []struct {
		give string
		want []string
	}{
		{"*.bin", []string{"a.bin", "b.bin"}},
		{"*", []string{"a.bin", "b.bin", "c.txt"}},
		{"?.bin", []string{"a.bin", "b.bin"}},
		{"[!a].bin", []string{"b.bin"}},
		{"[ab].*", []string{"a.bin", "b.bin"}},
		{"*/f.bin", []string{"e/f.bin"}},
		{"e/*/*.txt", []string{"e/g/i.txt"}},
		{"**", []string{"a.bin", "b.bin", "c.txt", "e/f.bin", "e/g/h.bin", "e/g/i.txt"}},
		{"**/*.bin", []string{"a.bin", "b.bin", "e/f.bin", "e/g/h.bin"}},
		{"e/**", []string{"e/f.bin", "e/g/h.bin", "e/g/i.txt"}},
		{"a.bin", []string{"a.bin"}},
		{"nothing/*", nil},
	}
	for _, tt := range tests {
		got, err := List(ctx, Join(dir, tt.give))
		if err != nil {
			t.Errorf("List(%s): %v", tt.give, err)
			continue
		}
		var want []string
		for _, w := range tt.want {
			want = append(want, Join(dir, strings.Split(w, "/")...))
		}
		if !slices.Equal(got, want) {
			t.Errorf("List(%s) = %v, want %v", tt.give, got, want)
		}
	}
	if _, err := List(ctx, Join(dir, "[ab")); err == nil || !strings.Contains(err.Error(), dir) {
		t.Errorf("List of a malformed glob = %v, want an error naming it", err)
	}
}

func checkListDirAndTree(t *testing.T, ctx context.Context, dir string) {
	for _, f := range []string{"a.json", "pass-000/part-1.parquet", "pass-001/x/deep.bin"} {
		mustWrite(t, ctx, Join(dir, strings.Split(f, "/")...), []byte(f))
	}
	mustWrite(t, ctx, dir+"-sibling", []byte("not under dir"))
	entries, err := ListDir(ctx, dir)
	slices.Sort(entries)
	if want := []string{"a.json", "pass-000", "pass-001"}; err != nil || !slices.Equal(entries, want) {
		t.Errorf("ListDir = %v, %v; want %v", entries, err, want)
	}
	tree, err := ListTree(ctx, dir)
	if want := []string{"a.json", "pass-000/part-1.parquet", "pass-001/x/deep.bin"}; err != nil || !slices.Equal(tree, want) {
		t.Errorf("ListTree = %v, %v; want %v", tree, err, want)
	}
	for name, list := range map[string]func(context.Context, string) ([]string, error){"ListDir": ListDir, "ListTree": ListTree} {
		if got, err := list(ctx, Join(dir, "missing")); err != nil || len(got) != 0 {
			t.Errorf("%s of a missing folder = %v, %v; want nothing", name, got, err)
		}
	}
}

func checkPresent(t *testing.T, ctx context.Context, dir string) {
	mustWrite(t, ctx, Join(dir, "d", "e", "f.bin"), []byte("x"))
	for _, tt := range []struct {
		give string
		want bool
	}{
		{dir, true}, {Join(dir, "d"), true}, {Join(dir, "d", "e"), true}, {Join(dir, "d", "e", "f.bin"), true},
		{Join(dir, "nothing"), false}, {Join(dir, "d", "e", "f"), false}, {Join(dir, "d", "e", "f.bin", "under"), false},
	} {
		if got, err := Present(ctx, tt.give); got != tt.want || err != nil {
			t.Errorf("Present(%s) = %v, %v; want %v", tt.give, got, err, tt.want)
		}
	}
}

// A temporary left in a folder (by a killed local write, or by another tool) is not data:
// List leaves it out and RemoveTemporaries deletes it and nothing else.
func checkTemporaries(t *testing.T, ctx context.Context, dir string) {
	planted := Join(dir, tempPrefix("part-00000.parquet")+"123")
	mustWrite(t, ctx, planted, []byte("half a shard"))
	mustWrite(t, ctx, Join(dir, "part-00001.parquet"), []byte("ok"))
	listed, err := List(ctx, Join(dir, "*"))
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
	if ok, _ := Exists(ctx, planted); ok {
		t.Error("the planted temporary is still there")
	}
	if ok, _ := Exists(ctx, Join(dir, "part-00001.parquet")); !ok {
		t.Error("RemoveTemporaries removed data")
	}
	if n, err := RemoveTemporaries(ctx, Join(dir, "missing")); n != 0 || err != nil {
		t.Errorf("RemoveTemporaries on a missing folder = %d, %v", n, err)
	}
}

func checkRemoveTree(t *testing.T, ctx context.Context, dir string) {
	tree := Join(dir, "tree")
	for _, f := range []string{"a", "b/c", "b/d/e"} {
		mustWrite(t, ctx, Join(tree, strings.Split(f, "/")...), []byte(f))
	}
	mustWrite(t, ctx, tree+"-sibling", []byte("stays"))
	if err := RemoveTree(ctx, tree); err != nil {
		t.Fatalf("RemoveTree: %v", err)
	}
	if ok, err := Present(ctx, tree); ok || err != nil {
		t.Errorf("Present after RemoveTree = %v, %v", ok, err)
	}
	if ok, _ := Exists(ctx, tree+"-sibling"); !ok {
		t.Error("RemoveTree removed a sibling whose name starts like the tree")
	}
	if err := RemoveTree(ctx, Join(dir, "missing")); err != nil {
		t.Errorf("RemoveTree of a missing folder = %v", err)
	}
}

// A scheme no driver stores is refused with the path and the scheme named, yet its paths
// still join.
// checkLocks: one exclusive holder, named to the next; shared holders side by side and
// excluding an exclusive one; a released lock can be taken again and leaves nothing that
// listings show.
func checkLocks(t *testing.T, ctx context.Context, dir string) {
	p := Join(dir, "out")
	mustWrite(t, ctx, Join(dir, "data.bin"), []byte("x"))
	ex, _, err := TryLock(ctx, p, true, "the first")
	if err != nil || ex == nil {
		t.Fatalf("TryLock = %v, %v", ex, err)
	}
	if l, heldBy, err := TryLock(ctx, p, true, "the second"); l != nil || err != nil || heldBy != "the first" {
		t.Errorf("a second exclusive: %v, %q, %v; want refused naming the first", l, heldBy, err)
	}
	if l, _, err := TryLock(ctx, p, false, ""); l != nil || err != nil {
		t.Errorf("a shared one while held exclusive: %v, %v", l, err)
	}
	if files, err := ListTree(ctx, dir); err != nil || !slices.Equal(files, []string{"data.bin"}) {
		t.Errorf("ListTree while locked = %v, %v", files, err)
	}
	ex.Release()
	ex.Release()
	s1, _, err := TryLock(ctx, p, false, "")
	if err != nil || s1 == nil {
		t.Fatalf("shared after the release: %v, %v", s1, err)
	}
	s2, _, err := TryLock(ctx, p, false, "")
	if err != nil || s2 == nil {
		t.Fatalf("a second shared: %v, %v", s2, err)
	}
	if l, _, err := TryLock(ctx, p, true, "x"); l != nil || err != nil {
		t.Errorf("an exclusive one while held shared: %v, %v", l, err)
	}
	s1.Release()
	if l, _, err := TryLock(ctx, p, true, "x"); l != nil || err != nil {
		t.Errorf("an exclusive one while one shared holder is left: %v, %v", l, err)
	}
	s2.Release()
	ex, _, err = TryLock(ctx, p, true, "x")
	if err != nil || ex == nil {
		t.Fatalf("after every release: %v, %v", ex, err)
	}
	ex.Release()
	if names, err := ListDir(ctx, dir); err != nil || !slices.Equal(names, []string{"data.bin"}) {
		t.Errorf("ListDir after the releases = %v, %v", names, err)
	}
}

func TestUnknownSchemeIsNamed(t *testing.T) {
	_, err := ReadFile(context.Background(), "s3://bucket/x.bin")
	if err == nil || !strings.Contains(err.Error(), "s3://bucket/x.bin") || !strings.Contains(err.Error(), `"s3"`) {
		t.Errorf("ReadFile on s3:// = %v, want an error naming the path and the scheme", err)
	}
	if got := Join("s3://bucket/x", "y"); got != "s3://bucket/x/y" {
		t.Errorf("Join = %q", got)
	}
}
