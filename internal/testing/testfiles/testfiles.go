// Package testfiles makes the small files that tests and benchmarks read: gzip and tar
// archives, JPEG and PNG images with a pattern that depends on a seed, a JPEG that fails to
// decode, and a checksum of every file of a tree. Dataset formats (CIFAR, STL-10, IDX) live
// beside the tests that own them; this package holds only what several packages share.
package testfiles

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// WriteFile writes data to p, creating its folder.
func WriteFile(t testing.TB, p string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// Gzip compresses data.
func Gzip(t testing.TB, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TarMember is an entry of a test tar: a regular file unless Type says otherwise
// (tar.TypeDir, or tar.TypeSymlink, which points at "elsewhere.JPEG").
type TarMember struct {
	Name string
	Data []byte
	Type byte
}

// Tar returns a tar of the members, in order.
func Tar(t testing.TB, members []TarMember) []byte {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, m := range members {
		kind := m.Type
		if kind == 0 {
			kind = tar.TypeReg
		}
		hdr := &tar.Header{Name: m.Name, Typeflag: kind, Mode: 0o644}
		switch kind {
		case tar.TypeReg:
			hdr.Size = int64(len(m.Data))
		case tar.TypeSymlink:
			hdr.Linkname = "elsewhere.JPEG"
		}
		if err := w.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if kind == tar.TypeReg {
			if _, err := w.Write(m.Data); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Photo is a w×h RGB image that depends on seed: smooth gradients and noise.
func Photo(w, h, seed int) *image.RGBA {
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	r := rand.New(rand.NewPCG(uint64(seed), 0x9407))
	a, b := r.IntN(5)+1, r.IntN(5)+1
	for y := range h {
		for x := range w {
			m.Set(x, y, color.RGBA{uint8(x*a + seed), uint8(y*b + seed*3), uint8((x+y)*a/2 + r.IntN(24)), 255})
		}
	}
	return m
}

// JPEG encodes Photo(w, h, seed) at quality 90.
func JPEG(t testing.TB, w, h, seed int) []byte {
	t.Helper()
	return encodeJPEG(t, Photo(w, h, seed))
}

// PhotoJPEG is a JPEG with the detail of a photograph: at 500×375 it is about as large as
// an average ILSVRC-2012 training image (110 KB), so decoding it costs what decoding one
// of those does.
func PhotoJPEG(t testing.TB, w, h, seed int) []byte {
	t.Helper()
	m := Photo(w, h, seed)
	r := rand.New(rand.NewPCG(uint64(seed), 0x1a9e))
	for i := range m.Pix {
		if i%4 != 3 {
			m.Pix[i] = uint8(int(m.Pix[i]) + r.IntN(40) - 20)
		}
	}
	return encodeJPEG(t, m)
}

func encodeJPEG(t testing.TB, m image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, m, &jpeg.Options{Quality: 90}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// PNG encodes Photo(w, h, seed).
func PNG(t testing.TB, w, h, seed int) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, Photo(w, h, seed)); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// CorruptJPEG is a JPEG whose headers are valid up to the scan, so a reader's header check
// accepts it, and whose scan is cut short: decoding it fails.
func CorruptJPEG(t testing.TB) []byte {
	t.Helper()
	good := JPEG(t, 24, 24, 1)
	sos := bytes.Index(good, []byte{0xFF, 0xDA})
	if sos < 0 {
		t.Fatal("no SOS marker in the encoded JPEG")
	}
	keep := sos + 2 + int(binary.BigEndian.Uint16(good[sos+2:])) + 4
	return append(good[:keep:keep], bytes.Repeat([]byte{0x55}, 20)...)
}

// TreeChecksums returns the sha256 of every file under dir by slash-separated relative path.
func TreeChecksums(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(data)
		out[filepath.ToSlash(rel)] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// GlobParquet lists the files under root that a reader given the glob ROOT/**/*.parquet
// takes for data: with skipHidden false as DuckDB's glob does (1.5: every folder at any
// depth, hidden ones included; names ending in .parquet), with skipHidden true as readers
// that skip entries whose name starts with "." or "_" (pyarrow datasets, Spark).
func GlobParquet(t testing.TB, root string, skipHidden bool) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		hidden := p != root && (d.Name()[0] == '.' || d.Name()[0] == '_')
		switch {
		case hidden && skipHidden && d.IsDir():
			return filepath.SkipDir
		case hidden && skipHidden, d.IsDir():
			return nil
		}
		if ok, _ := filepath.Match("*.parquet", d.Name()); ok {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}

// DuckDBCount runs SELECT count(*) FROM read_parquet(glob) in DuckDB through Node and
// @duckdb/node-api, found in the node_modules folder $DCL_DUCKDB_NODE_MODULES: the rows, or
// the error DuckDB gave. ok is false where that is not installed.
func DuckDBCount(t testing.TB, glob string) (rows int64, duckErr string, ok bool) {
	t.Helper()
	modules := os.Getenv("DCL_DUCKDB_NODE_MODULES")
	if modules == "" {
		return 0, "", false
	}
	if _, err := exec.LookPath("node"); err != nil {
		return 0, "", false
	}
	script := `const { DuckDBInstance } = require("@duckdb/node-api");
(async () => {
  const c = await (await DuckDBInstance.create(":memory:")).connect();
  try {
    const r = await c.runAndReadAll("SELECT count(*) FROM read_parquet(" + JSON.stringify(process.argv[1]).replaceAll('"', "'") + ")");
    console.log("rows " + r.getRows()[0][0]);
  } catch (e) { console.log("error " + e.message.split("\n")[0]); }
})();`
	cmd := exec.Command("node", "-e", script, glob)
	cmd.Env = append(os.Environ(), "NODE_PATH="+modules)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("node with DuckDB: %v\n%s", err, out)
	}
	line := strings.TrimSpace(string(out))
	if n, found := strings.CutPrefix(line, "rows "); found {
		rows, err = strconv.ParseInt(n, 10, 64)
		if err != nil {
			t.Fatalf("DuckDB said %q", line)
		}
		return rows, "", true
	}
	return 0, strings.TrimPrefix(line, "error "), true
}
