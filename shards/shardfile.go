package shards

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"

	"github.com/parquet-go/parquet-go"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

var rowSchema = parquet.SchemaOf(Row{})

// shardFile is an open shard whose footer has been read and checked: it is Parquet, has the
// shard schema and carries provenance of this format version.
type shardFile struct {
	path   string
	file   storage.File
	cache  *rangeCache // nil for local files
	pf     *parquet.File
	config Config
	pass   int
	part   int
}

// openShardFile opens a shard and checks its footer. parquet.OpenFile returns an error on
// a truncated or non-Parquet file, where NewGenericReader would panic.
func openShardFile(ctx context.Context, p string) (*shardFile, error) {
	f, err := storage.OpenFile(ctx, p)
	if err != nil {
		return nil, err
	}
	sf, err := checkShardFooter(p, f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return sf, nil
}

// checkShardFooter reads and checks a shard's footer. parquet-go panics on some corrupt
// footers (a negative count, say); that is bad input, so it becomes an error.
func checkShardFooter(p string, f storage.File) (sf *shardFile, err error) {
	defer func() {
		if r := recover(); r != nil {
			sf, err = nil, fmt.Errorf("%s is not a readable Parquet file: corrupt footer: %v", p, r)
		}
	}()
	var cache *rangeCache
	var ra io.ReaderAt = f
	if storage.Scheme(p) != "" {
		cache = &rangeCache{File: f}
		ra = cache
	}
	pf, err := parquet.OpenFile(ra, f.Size(), parquet.SkipBloomFilters(true), parquet.SkipPageIndex(true))
	if err != nil {
		return nil, fmt.Errorf("%s is not a readable Parquet file (truncated or corrupt?): %w", p, err)
	}
	if !parquet.EqualNodes(pf.Schema(), rowSchema) {
		return nil, fmt.Errorf("%s does not have the shard schema: it has %s", p, pf.Schema())
	}
	format, ok := pf.Lookup(FormatKey)
	if !ok {
		return nil, fmt.Errorf("%s: footer has no %s: not a shard written by dcl", p, FormatKey)
	}
	if format != strconv.Itoa(FormatVersion) {
		return nil, fmt.Errorf("%s: shard format version %s, this program reads version %d", p, format, FormatVersion)
	}
	sf = &shardFile{path: p, file: f, cache: cache, pf: pf}
	js, _ := pf.Lookup(ConfigKey)
	if err := json.Unmarshal([]byte(js), &sf.config); err != nil {
		return nil, fmt.Errorf("%s: footer %s is not a valid config: %w", p, ConfigKey, err)
	}
	pass, err1 := strconv.Atoi(lookup(pf, PassKey))
	part, err2 := strconv.Atoi(lookup(pf, PartKey))
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%s: footer has no valid %s and %s", p, PassKey, PartKey)
	}
	sf.pass, sf.part = pass, part
	return sf, nil
}

func lookup(pf *parquet.File, key string) string {
	v, _ := pf.Lookup(key)
	return v
}

func (s *shardFile) Close() error { return s.file.Close() }

// rowGroupSizes returns the row count of every row group in the file.
func (s *shardFile) rowGroupSizes() []int64 {
	groups := s.pf.RowGroups()
	out := make([]int64, len(groups))
	for i, g := range groups {
		out[i] = g.NumRows()
	}
	return out
}

// readRowGroup reads row group g whole. parquet-go may panic on corrupt pages; that is bad
// input, not a bug, so it becomes an error naming the file and row group.
func (s *shardFile) readRowGroup(g int, buf []Row) (rows []Row, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s row group %d: corrupt data: %v", s.path, g, r)
		}
	}()
	groups := s.pf.RowGroups()
	if g < 0 || g >= len(groups) {
		return nil, fmt.Errorf("%s has %d row groups, no row group %d", s.path, len(groups), g)
	}
	if s.cache != nil {
		// parquet-go reads a page header and a page per ReadAt: on GCS each one would be a
		// request. Fetch the row group's bytes in one ranged read instead.
		off, size := rowGroupRange(s.pf, g)
		if err := s.cache.load(off, size); err != nil {
			return nil, fmt.Errorf("%s row group %d: %w", s.path, g, err)
		}
		defer s.cache.drop(off)
	}
	n := int(groups[g].NumRows())
	if cap(buf) < n {
		buf = make([]Row, n)
	}
	buf = buf[:n]
	r := parquet.NewGenericRowGroupReader[Row](groups[g])
	defer r.Close()
	got := 0
	for got < n {
		k, err := r.Read(buf[got:])
		got += k
		if err != nil {
			if got == n {
				break
			}
			return nil, fmt.Errorf("%s row group %d: read %d of %d rows: %w", s.path, g, got, n, err)
		}
		if k == 0 {
			return nil, fmt.Errorf("%s row group %d: read %d of %d rows", s.path, g, got, n)
		}
	}
	return buf, nil
}

// rowGroupRange returns the byte range of row group g's column chunks.
func rowGroupRange(pf *parquet.File, g int) (off, size int64) {
	first, end := int64(-1), int64(0)
	for _, c := range pf.Metadata().RowGroups[g].Columns {
		start := c.MetaData.DataPageOffset
		if d := c.MetaData.DictionaryPageOffset; d > 0 && d < start {
			start = d
		}
		if first < 0 || start < first {
			first = start
		}
		end = max(end, start+c.MetaData.TotalCompressedSize)
	}
	if first < 0 {
		return 0, 0
	}
	return first, end - first
}

// rangeCache serves reads that fall inside byte ranges fetched whole, and passes the others
// (the footer, or a range it does not hold) to the file. Several row groups may be loaded
// at once by concurrent readers.
type rangeCache struct {
	storage.File
	mu     sync.Mutex
	ranges map[int64][]byte
	refs   map[int64]int
}

func (c *rangeCache) load(off, size int64) error {
	c.mu.Lock()
	if c.ranges == nil {
		c.ranges, c.refs = map[int64][]byte{}, map[int64]int{}
	}
	if _, ok := c.ranges[off]; ok {
		c.refs[off]++
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	if size <= 0 || off+size > c.File.Size() {
		return fmt.Errorf("column chunks at %d+%d lie outside the file's %d bytes", off, size, c.File.Size())
	}
	buf := make([]byte, size)
	if _, err := c.File.ReadAt(buf, off); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.ranges[off]; !ok {
		c.ranges[off] = buf
	}
	c.refs[off]++
	return nil
}

func (c *rangeCache) drop(off int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refs[off]--; c.refs[off] <= 0 {
		delete(c.ranges, off)
		delete(c.refs, off)
	}
}

func (c *rangeCache) ReadAt(b []byte, off int64) (int, error) {
	c.mu.Lock()
	for start, data := range c.ranges {
		if off >= start && off+int64(len(b)) <= start+int64(len(data)) {
			n := copy(b, data[off-start:])
			c.mu.Unlock()
			return n, nil
		}
	}
	c.mu.Unlock()
	return c.File.ReadAt(b, off)
}
