// Package rawname is the toolkit's one rule for names that are bytes where they come from
// and text where they go. A file or folder name on Linux, and a path given on the command
// line, is any bytes but '/' and NUL; the toolkit keeps it as those bytes in a Go string and
// opens, creates and compares files by it byte for byte. Where a name must be UTF-8 text (a
// Parquet string column, JSON: manifests, embeddings.json, results, a DoFn's serialised
// form), it is written as Text(name) and read back, where it is used as a name again, with
// Raw: encoding/json would turn each byte that is not UTF-8 into U+FFFD, so that two names
// become one and neither can be opened.
//
// Text writes each byte that is not part of a valid UTF-8 sequence as \xHH (two lowercase
// hex digits), and a backslash that would read as such an escape (one followed by x and two
// hex digits) as \x5c; everything else is kept. So a UTF-8 name is its own text unless it
// holds a literal \xHH, every text is UTF-8, and Raw(Text(s)) == s for every s: two names
// never share a text.
package rawname

import (
	"strings"
	"unicode/utf8"
)

// Text returns s as UTF-8 text that Raw turns back into s (see the package comment).
func Text(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			writeEscape(&b, s[i])
		case s[i] == '\\' && isEscape(s[i:]):
			writeEscape(&b, '\\')
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Raw returns the name text stands for: each \xHH (either case of hex digit) becomes the
// byte HH; everything else is kept. Raw(Text(s)) == s for every s.
func Raw(text string) string {
	if !strings.Contains(text, `\x`) {
		return text
	}
	var b strings.Builder
	b.Grow(len(text))
	for i := 0; i < len(text); {
		if text[i] == '\\' && isEscape(text[i:]) {
			b.WriteByte(unhex(text[i+2])<<4 | unhex(text[i+3]))
			i += 4
			continue
		}
		b.WriteByte(text[i])
		i++
	}
	return b.String()
}

// needsEscape says whether Text changes s.
func needsEscape(s string) bool {
	return !utf8.ValidString(s) || strings.Contains(s, `\x`) && hasEscape(s)
}

func hasEscape(s string) bool {
	for i := strings.Index(s, `\x`); i >= 0; {
		if isEscape(s[i:]) {
			return true
		}
		next := strings.Index(s[i+2:], `\x`)
		if next < 0 {
			return false
		}
		i += 2 + next
	}
	return false
}

// isEscape says whether s starts with \x and two hex digits.
func isEscape(s string) bool {
	return len(s) >= 4 && s[0] == '\\' && s[1] == 'x' && isHex(s[2]) && isHex(s[3])
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	default:
		return c - 'a' + 10
	}
}

func writeEscape(b *strings.Builder, c byte) {
	const digits = "0123456789abcdef"
	b.WriteString(`\x`)
	b.WriteByte(digits[c>>4])
	b.WriteByte(digits[c&15])
}
