package shards

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// A damaged shard (any bytes at all) gives an error, never a panic: through the footer check
// and through reading every row group.
func FuzzShardFile(f *testing.F) {
	dir := f.TempDir()
	cfg := testConfig()
	cfg.Passes, cfg.Parts = 1, 1
	writeDataset(f, dir, cfg, 6, WriterOptions{RowGroupBytes: 500})
	good, err := os.ReadFile(filepath.Join(dir, ShardID{Pass: 0, Part: 0, Parts: 1}.Path()))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, 0, byte(0))
	f.Add(good, len(good)/2, byte(0xff))
	f.Add(good, len(good)-9, byte(0x10))
	f.Add(good[:len(good)-1], 4, byte(1))
	// Found by this fuzzer: a footer whose column count turns negative made parquet.OpenFile
	// panic ("slice bounds out of range [::-11]") before checkShardFooter recovered it.
	f.Add(good, 3616, byte(1))
	f.Fuzz(func(t *testing.T, data []byte, at int, x byte) {
		data = bytes.Clone(data)
		if len(data) > 0 && at >= 0 {
			data[at%len(data)] ^= x
		}
		sf, err := checkShardFooter("fuzz.parquet", storage.BytesFile(data))
		if err != nil {
			return
		}
		for g := range sf.pf.RowGroups() {
			if _, err := sf.readRowGroup(g, nil); err != nil {
				return
			}
		}
	})
}

// Any manifest bytes give a manifest or an error, never a panic.
func FuzzParseManifest(f *testing.F) {
	m := writeDataset(f, f.TempDir(), testConfig(), 5, WriterOptions{})
	good, err := m.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`{"format":1,"config":{"passes":1,"parts":1},"shards":[{"path":"pass-000/part-00000-of-00001.parquet"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := parseManifest("fuzz.json", data)
		if err == nil {
			if err := m.Validate(); err != nil {
				t.Errorf("parseManifest accepted a manifest Validate refuses: %v", err)
			}
		}
	})
}
