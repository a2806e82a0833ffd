package storage

import (
	"crypto/sha256"
	"encoding/hex"
	"unicode/utf8"
)

// maxNameLen is the longest file name the common filesystems take (NAME_MAX on Linux, the
// BSDs and macOS): a name this package derives from another (a temporary, a lock file) must
// fit in it whenever the name it derives from does.
const maxNameLen = 255

// hiddenName returns "." + name + suffix, the name of a file this package keeps beside name,
// in at most maxNameLen-reserve bytes (reserve: what the caller appends). A name too long
// for that keeps its start and gains a hash of the whole, so two long names that share their
// start still get two names.
func hiddenName(name, suffix string, reserve int) string {
	n := "." + name + suffix
	if len(n)+reserve <= maxNameLen {
		return n
	}
	sum := sha256.Sum256([]byte(name))
	tag := "~" + hex.EncodeToString(sum[:8])
	keep := max(maxNameLen-reserve-len(n)+len(name)-len(tag), 0)
	cut := keep
	// Cut between characters, so that a UTF-8 name stays UTF-8.
	for cut > 0 && cut < len(name) && !utf8.RuneStart(name[cut]) && keep-cut < utf8.UTFMax {
		cut--
	}
	if keep-cut >= utf8.UTFMax {
		cut = keep
	}
	return "." + name[:min(cut, len(name))] + tag + suffix
}
