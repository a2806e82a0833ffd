package storage

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/dcl-beam/dcl-beam/internal/testing/mutate"
)

// Every test run derives the names this package keeps beside a file (its lock file, its
// temporaries) from a second's worth of mutated file names, bytes that are not UTF-8
// included: each fits NAME_MAX with what is appended to it, stays hidden beside the file,
// keeps a UTF-8 name UTF-8, and differs for two names; and Clean spells each path once.
func TestMutatedNamesDeriveSafeNames(t *testing.T) {
	seeds := [][]byte{
		[]byte("emb.parquet"), []byte("run"), []byte("\xff\xfeclass"), []byte("é"),
		[]byte(strings.Repeat("a", 255)), []byte(strings.Repeat("é", 127)), []byte(".hidden" + TempMarker + "12"),
	}
	mutate.Run(t, seeds, checkDerivedNames)
}

func checkDerivedNames(data []byte) error {
	// A file name: no separator, no NUL, at most NAME_MAX bytes, not "." or "..".
	name := string(bytes.ReplaceAll(bytes.ReplaceAll(data[:min(len(data), maxNameLen)], []byte("/"), []byte("_")), []byte{0}, []byte("_")))
	if name == "" || name == "." || name == ".." {
		return nil
	}
	other := []byte(name)
	other[len(other)-1] ^= 1
	if bytes.IndexByte(other, '/') >= 0 || bytes.IndexByte(other, 0) >= 0 {
		other[len(other)-1] ^= 3
	}
	for _, d := range []struct {
		suffix  string
		reserve int
	}{{lockMarker, len(sharedLockMarker) + sharedIDLen}, {TempMarker, tempDigits}} {
		h := hiddenName(name, d.suffix, d.reserve)
		switch {
		case len(h)+d.reserve > maxNameLen:
			return fmt.Errorf("%q%s: %d bytes with the %d appended, more than %d", name, d.suffix, len(h), d.reserve, maxNameLen)
		case !strings.HasPrefix(h, ".") || !strings.HasSuffix(h, d.suffix) || strings.ContainsAny(h, "/\x00"):
			return fmt.Errorf("%q%s: derived %q is not a hidden name ending %s", name, d.suffix, h, d.suffix)
		case utf8.ValidString(name) && !utf8.ValidString(h):
			return fmt.Errorf("%q%s: derived %q is not UTF-8", name, d.suffix, h)
		case h == hiddenName(string(other), d.suffix, d.reserve):
			return fmt.Errorf("%q and %q derive one name %q", name, other, h)
		}
	}
	for _, dir := range []string{"/data/out", "gs://b/out"} {
		p := Join(dir, name)
		if got := Parent(LockFile(p)); got != Parent(p) {
			return fmt.Errorf("the lock file of %q is in %q, not beside it", p, got)
		}
		if c := Clean(p); Clean(c) != c {
			return fmt.Errorf("Clean(%q) = %q, and Clean of that is %q", p, c, Clean(c))
		}
	}
	return nil
}
