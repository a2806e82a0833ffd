package trainstep

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/mutate"
)

// checkpointFile frames header and data as a first-format checkpoint file with a valid checksum, so that
// the fuzzer's bytes reach the header's parsing and checks instead of stopping at the CRC.
func checkpointFile(header, data []byte) []byte {
	var b bytes.Buffer
	b.WriteString(legacyMagic)
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.Write(header)
	b.Write(data)
	binary.Write(&b, binary.LittleEndian, crc32.Checksum(b.Bytes(), crcTable))
	return b.Bytes()
}

// Any header bytes of a first-format checkpoint (behind a valid frame and checksum) give a
// checkpoint or an error, never a panic; an accepted checkpoint's variables all lie inside its
// tensor data, so restoring them cannot read outside it.
func FuzzCheckpointHeader(f *testing.F) {
	raw, err := os.ReadFile(filepath.Join("testdata", "gomlx-v0.26-resnet18-cifar.dclckpt"))
	if err != nil {
		f.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(raw[8:16])
	header, data := raw[16:16+n], raw[16+n:len(raw)-4]
	f.Add(bytes.Clone(header), bytes.Clone(data[:min(len(data), 4096)]))
	f.Add([]byte(`{"format_version":1,"variables":[{"scope":"/m","name":"w","dtype":"Float32","dims":[2],"offset":0,"bytes":8}]}`), make([]byte, 8))
	f.Add([]byte(`{"format_version":1,"variables":[{"scope":"/m","name":"w","dtype":"Float32","dims":[2],"offset":-8,"bytes":8}]}`), make([]byte, 8))
	f.Add([]byte(`{"format_version":1,"variables":[{"scope":"/m","name":"w","dtype":"Float32","dims":[-2],"offset":0,"bytes":8}]}`), make([]byte, 8))
	// An offset and a size whose sum overflows int64 (accepted once, then read out of range).
	f.Add([]byte(`{"format_version":1,"variables":[{"scope":"/m","name":"w","dtype":"Uint8","dims":[4611686018427387904],"offset":4611686018427387904,"bytes":4611686018427387904}]}`), make([]byte, 8))
	f.Add([]byte(`{"format_version":1,"state":{"epoch":-1}}`), []byte{})
	f.Add([]byte(`{"format_version":2}`), []byte{})
	f.Add([]byte(`not json`), []byte{1, 2, 3})
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, header, data []byte) {
		if err := checkCheckpointHeader(filepath.Join(dir, "fuzz"+LegacyCheckpointExt), header, data); err != nil {
			t.Fatal(err)
		}
	})
}

// Every test run reads a second's worth of mutations of a real checkpoint's header (behind a
// valid frame and checksum).
func TestMutatedCheckpointHeaders(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "gomlx-v0.26-resnet18-cifar.dclckpt"))
	if err != nil {
		t.Fatal(err)
	}
	n := binary.LittleEndian.Uint64(raw[8:16])
	header, data := raw[16:16+n], raw[16+n:len(raw)-4]
	data = data[:min(len(data), 4096)]
	p := filepath.Join(t.TempDir(), "mutated"+LegacyCheckpointExt)
	seeds := [][]byte{header, []byte(`{"format_version":1,"variables":[{"scope":"/m","name":"w","dtype":"Float32","dims":[2],"offset":0,"bytes":8}]}`)}
	mutate.Run(t, seeds, func(header []byte) error { return checkCheckpointHeader(p, header, data) })
}

// checkCheckpointHeader writes header and data as a checkpoint file at p and reads it: an
// error is fine, a panic is not, and an accepted checkpoint's variables all lie inside its
// tensor data.
func checkCheckpointHeader(p string, header, data []byte) error {
	if err := os.WriteFile(p, checkpointFile(header, data), 0o644); err != nil {
		return err
	}
	ctx := context.Background()
	_, _ = ReadCheckpointHeader(ctx, p)
	c, err := ReadCheckpoint(ctx, p)
	if err != nil {
		return nil
	}
	for _, v := range c.Header.Variables {
		if n := int64(len(c.raw(v))); n != v.Bytes {
			return fmt.Errorf("accepted variable %s/%s of %d bytes with %d bytes stored", v.Scope, v.Name, v.Bytes, n)
		}
		if _, err := c.tensor(v); err != nil {
			return nil
		}
	}
	return nil
}
