package datasets

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/rawname"
	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// imagenetMeanBytes is the average size of an ILSVRC-2012 train image with its tar header
// (138 GB / 1,281,167 images): tar units estimate their records from it.
const imagenetMeanBytes = 107_850

// tarIndexSpan is how many indices a tar of n bytes reserves: every member takes a 512-byte
// header at least, so no tar holds more members.
func tarIndexSpan(n int64) int64 { return n/512 + 1 }

// checkMemberName refuses tar entry names that would leave the archive's folder if
// extracted: absolute paths and paths with a ".." element. Read never writes members to
// disk, but such an archive is not a published dataset, and its names would make keys that
// collide with other members'.
func checkMemberName(name string) error {
	n := strings.ReplaceAll(name, "\\", "/")
	switch {
	case n == "":
		return errors.New("entry has an empty name")
	case strings.HasPrefix(n, "/") || (len(n) >= 2 && n[1] == ':'):
		return fmt.Errorf("entry %q has an absolute path", name)
	}
	for _, seg := range strings.Split(n, "/") {
		if seg == ".." {
			return fmt.Errorf("entry %q escapes the archive (a %q element)", name, "..")
		}
	}
	return nil
}

// countingReader counts the bytes read through it: the offset of the tar reader.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func readTarUnit(ctx context.Context, u Unit, emit func(Record) error, bad func(BadRecord) error) (int64, error) {
	r, err := openRange(ctx, u.Path, u.Offset, u.Length)
	if err != nil {
		return 0, err
	}
	defer r.Close()
	return readTar(ctx, r, u, emit, bad)
}

// readTar streams the image members of a tar (r reads it from its first byte), which sits at
// u.Offset in u.Path. Members that are not images (by extension) are counted and skipped,
// folders skipped; an image member that is not a regular file, is larger than u.MaxFileBytes
// or has a bad header is a bad record. A member whose path escapes the archive, or a tar
// that is corrupt or truncated, stops the read with an error.
func readTar(ctx context.Context, r io.Reader, u Unit, emit func(Record) error, bad func(BadRecord) error) (ignored int64, err error) {
	name := u.Path
	memberPrefix := ""
	if u.Member != "" {
		name = u.Path + ": " + u.Member
		memberPrefix = u.Member + "/"
	}
	cr := &countingReader{r: r}
	tr := tar.NewReader(cr)
	var ordinal int64
	last := "its first member"
	seen := map[string]bool{} // keys of the members read: a name given twice would key two records alike
	for {
		if err := ctx.Err(); err != nil {
			return ignored, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return ignored, nil
		}
		if err != nil {
			return ignored, fmt.Errorf("tar %s: reading the entry after %s: %w", name, last, err)
		}
		last = fmt.Sprintf("%q", hdr.Name)
		if err := checkMemberName(hdr.Name); err != nil {
			return ignored, fmt.Errorf("tar %s: %w", name, err)
		}
		if hdr.Typeflag == tar.TypeDir {
			continue
		}
		clean := cleanMemberName(hdr.Name)
		if !isImageName(clean) {
			ignored++
			continue
		}
		offset := u.Offset + cr.n
		key := tarKey(&u, clean)
		rec := Record{Key: key, Index: u.Index + ordinal, Label: u.Label, Source: u.Path, Member: memberPrefix + hdr.Name, Offset: offset,
			Ref: tarRef(offset, hdr.Size, hdr.Name)}
		ordinal++
		reason := ""
		switch {
		case seen[key]:
			// tar -r appends a newer copy under the same name; extracting keeps the last, a
			// dataset cannot hold both under one key.
			reason = fmt.Sprintf("a second member named %q (the archive holds the name twice)", clean)
		case hdr.Typeflag != tar.TypeReg:
			reason = fmt.Sprintf("not a regular file (tar type %q)", hdr.Typeflag)
		case hdr.Size > u.maxFileBytes():
			reason = fmt.Sprintf("%d bytes, more than the limit of %d", hdr.Size, u.maxFileBytes())
		}
		if reason == "" {
			data, err := io.ReadAll(tr)
			if err != nil {
				return ignored, fmt.Errorf("tar %s: reading %q (%d bytes at byte %d): %w", name, hdr.Name, hdr.Size, offset, err)
			}
			h, err := DecodeHeader(data, formatOfName(clean), u.Limits)
			if err != nil {
				reason = err.Error()
			} else {
				rec.Encoded, rec.Format, rec.Width, rec.Height = data, h.Format, h.Width, h.Height
			}
		}
		seen[key] = true
		if reason != "" {
			err = bad(BadRecord{Source: rec.Source, Position: rec.Position(), Key: rec.Key, Reason: reason})
		} else {
			err = emit(rec)
		}
		if err != nil {
			return ignored, err
		}
	}
}

// cleanMemberName is a member's name as keys use it: slash-separated and cleaned.
func cleanMemberName(name string) string { return path.Clean(strings.ReplaceAll(name, "\\", "/")) }

// tarKey is the key of the member of u named clean: the synset folder's key when the tar is
// a class's (KeyDir), so that a tar's records get the same keys as the extracted folder's.
func tarKey(u *Unit, clean string) string {
	if u.KeyDir != "" {
		return rawname.Text(u.Split + "/" + u.KeyDir + "/" + clean)
	}
	return rawname.Text(u.Split + "/" + clean)
}

// tarRef is the reference of a member: its data's byte range in the unit's file and its
// name, "OFFSET LENGTH NAME".
func tarRef(offset, length int64, name string) string {
	b := strconv.AppendInt(nil, offset, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, length, 10)
	b = append(b, ' ')
	return string(append(b, name...))
}

func parseTarRef(ref string) (offset, length int64, name string, err error) {
	o, rest, ok1 := strings.Cut(ref, " ")
	l, name, ok2 := strings.Cut(rest, " ")
	offset, err1 := strconv.ParseInt(o, 10, 64)
	length, err2 := strconv.ParseInt(l, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || offset < 0 || length < 0 {
		return 0, 0, "", fmt.Errorf("reference %q is not OFFSET LENGTH NAME", ref)
	}
	return offset, length, name, nil
}

// fetchTar fetches tar members again by their byte ranges, from files the Fetcher keeps
// open: a shard reads members of many tars, each many times.
func fetchTar(ctx context.Context, f *Fetcher, refs []Ref, got func(int, Record) error) error {
	for i, r := range refs {
		u := f.Unit(r)
		offset, length, name, err := parseTarRef(r.Ref)
		if err != nil {
			return fmt.Errorf("%s: %w", u, err)
		}
		if length > u.maxFileBytes() {
			return fmt.Errorf("%s: reference to %d bytes, more than the limit of %d", u, length, u.maxFileBytes())
		}
		file, err := f.Open(ctx, u.Path)
		if err != nil {
			return err
		}
		key := tarKey(u, cleanMemberName(name))
		data := make([]byte, length)
		if _, err := file.ReadAt(data, offset); err != nil {
			return fmt.Errorf("reading %s (%d bytes at byte %d, record %s): %w", u.Path, length, offset, key, err)
		}
		member := name
		if u.Member != "" {
			member = u.Member + "/" + name
		}
		rec := Record{Key: key, Index: r.Index, Label: u.Label, Source: u.Path, Member: member, Offset: offset, Ref: r.Ref, Encoded: data}
		if err := got(i, rec); err != nil {
			return err
		}
	}
	return nil
}

// tarMember is a member of an outer tar: a tar in a tar.
type tarMember struct {
	name           string
	offset, length int64
}

// scanOuterTar lists the members of a tar without reading their data: the reader seeks
// past each (one ranged read per header on gs://). Non-tar members go to ignore.
func scanOuterTar(ctx context.Context, p string, ignore func(string)) ([]tarMember, error) {
	f, err := storage.OpenFile(ctx, p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sr := io.NewSectionReader(f, 0, f.Size())
	tr := tar.NewReader(sr)
	var out []tarMember
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("tar %s: reading the entry after %d tars: %w", p, len(out), err)
		}
		if err := checkMemberName(hdr.Name); err != nil {
			return nil, fmt.Errorf("tar %s: %w", p, err)
		}
		if hdr.Typeflag == tar.TypeDir {
			continue
		}
		if hdr.Typeflag != tar.TypeReg || !strings.HasSuffix(hdr.Name, ".tar") {
			ignore(hdr.Name)
			continue
		}
		off, err := sr.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, fmt.Errorf("tar %s: %w", p, err)
		}
		out = append(out, tarMember{name: hdr.Name, offset: off, length: hdr.Size})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("tar %s holds no .tar members", p)
	}
	return out, nil
}
