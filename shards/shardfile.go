package shards

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/parquet-go/parquet-go"
)

var rowSchema = parquet.SchemaOf(Row{})

// shardFile is an open shard whose footer has been read and checked: it is Parquet, has the
// shard schema and carries provenance of this format version.
type shardFile struct {
	path   string
	file   File
	pf     *parquet.File
	config Config
	pass   int
	part   int
}

// openShardFile opens a shard and checks its footer. parquet.OpenFile returns an error on
// a truncated or non-Parquet file, where NewGenericReader would panic.
func openShardFile(ctx context.Context, p string) (*shardFile, error) {
	f, err := OpenFile(ctx, p)
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

func checkShardFooter(p string, f File) (*shardFile, error) {
	pf, err := parquet.OpenFile(f, f.Size(), parquet.SkipBloomFilters(true), parquet.SkipPageIndex(true))
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
	sf := &shardFile{path: p, file: f, pf: pf}
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
