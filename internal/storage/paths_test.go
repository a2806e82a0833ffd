package storage

import (
	"os"
	"path/filepath"
	"testing"
)

func TestClean(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	tests := []struct{ give, want string }{
		{"gs://b/r/", "gs://b/r"},
		{"gs://b//r", "gs://b/r"},
		{"gs://b/r/./x/..", "gs://b/r"},
		{"gs://b", "gs://b"},
		{"gs://b/", "gs://b"},
		{"memfs://x//y/", "memfs://x/y"},
		{filepath.Join(dir, "link", "not-yet", "deeper"), filepath.Join(real, "not-yet", "deeper")},
		{dir + "/real/", real},
		{"rel/a/../b", filepath.Join(wd, "rel", "b")},
	}
	for _, tt := range tests {
		if got := Clean(tt.give); got != tt.want {
			t.Errorf("Clean(%q) = %q, want %q", tt.give, got, tt.want)
		}
	}
}

func TestWithinAndFindOverlap(t *testing.T) {
	tests := []struct {
		p, dir string
		want   bool
	}{
		{"gs://b/r/x", "gs://b//r/", true},
		{"gs://b/r", "gs://b/r/", true},
		{"gs://b/rx", "gs://b/r", false},
		{"gs://b/r", "memfs://b/r", false},
		{"/a/b", "/a", true},
		{"/ab", "/a", false},
		{"/a", "/a/b", false},
		{"gs://b/r", "gs://b", true},
	}
	for _, tt := range tests {
		if got := Within(tt.p, tt.dir); got != tt.want {
			t.Errorf("Within(%q, %q) = %v", tt.p, tt.dir, got)
		}
	}
	a := []string{"gs://b/train/n1", "gs://b/train/n2"}
	for _, tt := range []struct {
		b      []string
		wantB  string
		wantOK bool
	}{
		{[]string{"gs://b/val", "gs://b/train-extra/n1"}, "", false},
		{[]string{"gs://b/val", "gs://b//train/"}, "gs://b//train/", true}, // holds a
		{[]string{"gs://b/train/n2/sub"}, "gs://b/train/n2/sub", true},     // under a
		{[]string{"gs://b/train/n1"}, "gs://b/train/n1", true},             // the same
		{[]string{"gs://b/train/n1-x", "gs://b/train/n1x"}, "", false},     // siblings that share a prefix
	} {
		_, gotB, ok := FindOverlap(a, tt.b)
		if ok != tt.wantOK || gotB != tt.wantB {
			t.Errorf("FindOverlap(%q, %q) = %q, %v; want %q, %v", a, tt.b, gotB, ok, tt.wantB, tt.wantOK)
		}
	}
}
