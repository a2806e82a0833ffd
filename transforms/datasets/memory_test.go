//go:build linux

package datasets

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// writeBlankPNG writes a w×h PNG of zeros, 8 or 16 bits per channel, RGBA, streaming its
// rows through zlib: a file of a few hundred KB that claims gigabytes of pixels.
func writeBlankPNG(t testing.TB, p string, w, h, depth int) {
	t.Helper()
	var idat bytes.Buffer
	z, err := zlib.NewWriterLevel(&idat, zlib.DefaultCompression)
	if err != nil {
		t.Fatal(err)
	}
	row := make([]byte, 1+w*4*depth/8) // filter byte 0, then zeros
	for range h {
		if _, err := z.Write(row); err != nil {
			t.Fatal(err)
		}
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	out.WriteString("\x89PNG\r\n\x1a\n")
	chunk := func(kind string, data []byte) {
		binary.Write(&out, binary.BigEndian, uint32(len(data)))
		out.WriteString(kind)
		out.Write(data)
		crc := crc32.NewIEEE()
		crc.Write([]byte(kind))
		crc.Write(data)
		binary.Write(&out, binary.BigEndian, crc.Sum32())
	}
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = byte(depth), 6 // RGBA
	chunk("IHDR", ihdr)
	chunk("IDAT", idat.Bytes())
	chunk("IEND", nil)
	if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDecodeMemoryIsBounded decodes, in a child process, large PNGs side by side, as the
// workers of a preprocessing run would (each holding its image a moment to augment it), and
// reads the child's peak resident memory: 16-bit 8000×8000 PNGs (refused at their header:
// 488 MiB each to decode), 8-bit 8000×8000 RGBA PNGs (accepted: 244 MiB each to decode,
// 183 MiB converted, which the process's decode budget lets through one or two at a time)
// and 16-bit RGBA PNGs at the limit (256 MiB each to decode, 96 MiB converted, two at a
// time), whose peak stays near the budget: what decoding allocates is all counted
// (TestDecodeAllocatesWhatTheBudgetCounts), and the rest is spans the heap freed and has not
// reused or returned yet.
func TestDecodeMemoryIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("decodes gigabytes of pixels")
	}
	if raceDetector {
		t.Skip("the race detector multiplies memory: make test runs this test again without it")
	}
	if os.Getenv("DCL_DECODE_CHILD") != "" {
		decodeChild()
		return
	}
	dir := t.TempDir()
	for _, c := range []struct {
		name           string
		side, depth, n int
		wantDecoded    int
		maxPeak        int64 // MiB
	}{
		{"16-bit, one", 8000, 16, 1, 0, 100},
		{"16-bit, seven", 8000, 16, 7, 0, 200},
		{"8-bit, four", 8000, 8, 4, 4, 1100},
		{"16-bit in the limit, seven", inLimit16, 16, 7, 7, DefaultDecodeBudget>>20 + 256}, // and the heap's free spans
	} {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(dir, fmt.Sprintf("%d-%d.png", c.side, c.depth))
			if _, err := os.Stat(p); err != nil {
				writeBlankPNG(t, p, c.side, c.side, c.depth)
			}
			st, _ := os.Stat(p)
			decoded, peak := measureDecodes(t, p, c.n)
			t.Logf("%d-bit %dx%[2]d RGBA PNG (%d KB), %d side by side: %d decoded, peak RSS %d MiB", c.depth, c.side, st.Size()>>10, c.n, decoded, peak)
			if decoded != c.wantDecoded || peak > c.maxPeak {
				t.Errorf("%d decoded, peak %d MiB; want %d decoded, at most %d MiB", decoded, peak, c.wantDecoded, c.maxPeak)
			}
		})
	}
}

// inLimit16 is the side of the largest square 16-bit RGBA image DefaultMaxDecodeBytes
// accepts.
const inLimit16 = 5792

// measureDecodes runs decodeChild on n copies of the file p and returns how many decoded and
// the child's peak resident memory in MiB.
func measureDecodes(t *testing.T, p string, n int) (decoded int, peakMiB int64) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestDecodeMemoryIsBounded$")
	cmd.Env = append(os.Environ(), "DCL_DECODE_CHILD="+p, "DCL_DECODE_N="+strconv.Itoa(n))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	for line := range strings.Lines(string(out)) {
		if _, err := fmt.Sscanf(line, "decoded %d peak %d", &decoded, &peakMiB); err == nil {
			return decoded, peakMiB
		}
	}
	t.Fatalf("child said %s", out)
	return 0, 0
}

// decodeChild decodes DCL_DECODE_N copies of the file DCL_DECODE_CHILD at once, holding each
// image 100 ms, and prints how many decoded and the peak resident memory.
func decodeChild() {
	data, err := os.ReadFile(os.Getenv("DCL_DECODE_CHILD"))
	if err != nil {
		panic(err)
	}
	n, _ := strconv.Atoi(os.Getenv("DCL_DECODE_N"))
	var wg sync.WaitGroup
	var mu sync.Mutex
	decoded := 0
	for range n {
		wg.Go(func() {
			img, release, err := DecodeHeld(bytes.Clone(data), "", Limits{})
			defer release()
			if err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond) // augmenting it
			mu.Lock()
			decoded += min(1, len(img.Pix))
			mu.Unlock()
		})
	}
	wg.Wait()
	// The peak of this process's own memory (VmHWM, KiB), not getrusage's, which on Linux
	// also counts the parent's peak: Go starts the child sharing the parent's memory until
	// exec, and exec keeps that memory's peak as the child's.
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		panic(err)
	}
	var peakKiB int64 = -1
	for line := range strings.Lines(string(status)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			peakKiB, err = strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				panic(err)
			}
		}
	}
	if peakKiB < 0 {
		panic("no VmHWM in /proc/self/status")
	}
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "decoded %d peak %d\n", decoded, peakKiB>>10)
	w.Flush()
	os.Exit(0)
}
