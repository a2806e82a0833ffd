package shards

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"runtime"
	"slices"
	"sync"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// Summary is what Verify found, printed by `dcl shards verify` as JSON:
//
//	{"shards":64,"rows":50000,"views":100000,"labels":{"0":5000,…},"ok":true}
//
// Rows, Views and Labels count what was read from the shards, not what the manifest says.
type Summary struct {
	Shards   int             `json:"shards"`
	Rows     int64           `json:"rows"`
	Views    int64           `json:"views"`
	Labels   map[int32]int64 `json:"labels"`
	OK       bool            `json:"ok"`
	Problems []Problem       `json:"problems,omitempty"`
}

// Problem is one mismatch between a dataset directory and its manifest.
type Problem struct {
	Shard   string `json:"shard,omitempty"` // relative path; empty for the directory as a whole
	Problem string `json:"problem"`
}

// maxRowProblems caps the problems reported about the rows of one shard: one broken shard
// should not bury the others.
const maxRowProblems = 5

// Verify re-reads every shard of the dataset in dir and checks it against the manifest:
// present, size, sha256, footer provenance equal to the manifest's config, row groups, row
// count, labels, and every row's pass, size, encoding and view bytes (raw by length,
// PNG/JPEG by their headers). It also reports Parquet files the manifest does not list;
// temporaries left by interrupted writes are ignored.
//
// The error is nil exactly when Summary.OK is true; otherwise it names the first problem.
func Verify(ctx context.Context, dir string) (Summary, error) {
	sum := Summary{Labels: map[int32]int64{}}
	fail := func(err error) (Summary, error) {
		sum.Problems = append(sum.Problems, Problem{Problem: err.Error()})
		return sum, fmt.Errorf("verifying %s: %w", dir, err)
	}
	m, err := ReadManifest(ctx, dir)
	if err != nil {
		return fail(err)
	}
	files, err := storage.ListTree(ctx, dir)
	if err != nil {
		return fail(err)
	}
	sum.Shards = len(m.Shards)
	present := map[string]bool{}
	for _, f := range files {
		present[f] = true
	}
	listed := map[string]bool{}
	for _, s := range m.Shards {
		listed[s.Path] = true
	}
	for _, f := range files {
		if isShardLike(f) && !listed[f] && f != m.DeadLetters.File {
			sum.Problems = append(sum.Problems, Problem{Shard: f, Problem: "Parquet file not listed in the manifest"})
		}
	}
	if m.DeadLetters.File != "" && !present[m.DeadLetters.File] {
		sum.Problems = append(sum.Problems, Problem{Shard: m.DeadLetters.File, Problem: "dead-letter file listed in the manifest is missing"})
	}

	results := make([]shardCheck, len(m.Shards))
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(runtime.GOMAXPROCS(0), 4, len(m.Shards)) {
		wg.Go(func() {
			for i := range next {
				s := m.Shards[i]
				if !present[s.Path] {
					results[i].problems = []string{"listed in the manifest but missing"}
					continue
				}
				results[i] = checkShard(ctx, storage.Join(dir, s.Path), s, &m.Config)
			}
		})
	}
	for i := range m.Shards {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	for i, r := range results {
		sum.Rows += r.rows
		sum.Views += r.views
		for l, n := range r.labels {
			sum.Labels[l] += n
		}
		for _, p := range r.problems {
			sum.Problems = append(sum.Problems, Problem{Shard: m.Shards[i].Path, Problem: p})
		}
	}
	if sum.Rows != m.Rows && len(sum.Problems) == 0 {
		sum.Problems = append(sum.Problems, Problem{Problem: fmt.Sprintf("read %d rows, the manifest says %d", sum.Rows, m.Rows)})
	}
	sum.OK = len(sum.Problems) == 0
	if !sum.OK {
		p := sum.Problems[0]
		more := ""
		if len(sum.Problems) > 1 {
			more = fmt.Sprintf(" (and %d more problems)", len(sum.Problems)-1)
		}
		if p.Shard != "" {
			return sum, fmt.Errorf("verifying %s: %s: %s%s", dir, p.Shard, p.Problem, more)
		}
		return sum, fmt.Errorf("verifying %s: %s%s", dir, p.Problem, more)
	}
	return sum, nil
}

type shardCheck struct {
	rows, views int64
	labels      map[int32]int64
	problems    []string
}

func (c *shardCheck) addf(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

func checkShard(ctx context.Context, p string, want ShardInfo, cfg *Config) shardCheck {
	c := shardCheck{labels: map[int32]int64{}}
	if size, sha, err := hashFile(ctx, p); err != nil {
		c.addf("%v", err)
		return c
	} else {
		if size != want.Bytes {
			c.addf("%d bytes, the manifest says %d", size, want.Bytes)
		}
		if sha != want.SHA256 {
			c.addf("sha256 %s, the manifest says %s", sha, want.SHA256)
		}
	}
	sf, err := openShardFile(ctx, p)
	if err != nil {
		c.addf("%v", err)
		return c
	}
	defer sf.Close()
	if d := sf.config.Diff(*cfg); len(d) > 0 {
		c.addf("footer provenance differs from the manifest: %v", d)
	}
	if sf.pass != want.Pass || sf.part != want.Part {
		c.addf("footer says pass %d part %d, the manifest pass %d part %d", sf.pass, sf.part, want.Pass, want.Part)
	}
	if got := sf.rowGroupSizes(); !slices.Equal(got, want.RowGroups) && !(len(got) == 0 && len(want.RowGroups) == 0) {
		c.addf("row groups of %v rows, the manifest says %v", got, want.RowGroups)
	}
	var rowProblems int
	var buf []Row
	for g := range sf.pf.RowGroups() {
		if ctx.Err() != nil {
			c.addf("%v", ctx.Err())
			return c
		}
		rows, err := sf.readRowGroup(g, buf)
		if err != nil {
			c.addf("%v", err)
			return c
		}
		for i := range rows {
			r := &rows[i]
			c.rows++
			c.labels[r.Label]++
			c.views++
			if len(r.View2) > 0 {
				c.views++
			}
			if err := checkRow(r, want.Pass, cfg); err != nil {
				rowProblems++
				if rowProblems <= maxRowProblems {
					c.addf("row group %d, row %d (key %q): %v", g, i, r.Key, err)
				}
			}
		}
		clear(rows) // let the image bytes go
		buf = rows
	}
	if rowProblems > maxRowProblems {
		c.addf("%d more rows with problems", rowProblems-maxRowProblems)
	}
	if c.rows != want.Rows {
		c.addf("%d rows, the manifest says %d", c.rows, want.Rows)
	}
	if !maps.Equal(c.labels, want.Labels) {
		c.addf("label counts %v, the manifest says %v", c.labels, want.Labels)
	}
	return c
}

func checkRow(r *Row, pass int, cfg *Config) error {
	switch {
	case r.Key == "":
		return fmt.Errorf("no key")
	case int(r.Pass) != pass:
		return fmt.Errorf("pass %d in a shard of pass %d", r.Pass, pass)
	case r.Label < Unlabelled:
		return fmt.Errorf("label %d", r.Label)
	case cfg.Online:
		if err := cfg.checkRow(r); err != nil {
			return err
		}
		return checkViewHeader(r.View1, Encoding(r.Encoding), int(r.Height), int(r.Width), cfg.Channels)
	case int(r.Height) != cfg.Height || int(r.Width) != cfg.Width || int(r.Channels) != cfg.Channels:
		return fmt.Errorf("size %dx%dx%d, the dataset's is %dx%dx%d", r.Height, r.Width, r.Channels, cfg.Height, cfg.Width, cfg.Channels)
	case r.Encoding != string(cfg.Encoding):
		return fmt.Errorf("encoding %q, the dataset's is %q", r.Encoding, cfg.Encoding)
	case cfg.Views == 2 && len(r.View2) == 0:
		return fmt.Errorf("view 2 is empty")
	case cfg.Views == 1 && len(r.View2) > 0:
		return fmt.Errorf("view 2 is set in a single-view dataset")
	}
	if err := checkViewHeader(r.View1, cfg.Encoding, cfg.Height, cfg.Width, cfg.Channels); err != nil {
		return fmt.Errorf("view 1: %w", err)
	}
	if cfg.Views == 2 {
		if err := checkViewHeader(r.View2, cfg.Encoding, cfg.Height, cfg.Width, cfg.Channels); err != nil {
			return fmt.Errorf("view 2: %w", err)
		}
	}
	return nil
}

// ChecksumFile returns the sha256 (hex) and size of the file p, local or remote, read
// as a stream: for the Sources of a Config.
func ChecksumFile(ctx context.Context, p string) (sha string, size int64, err error) {
	size, sha, err = hashFile(ctx, p)
	return sha, size, err
}

func hashFile(ctx context.Context, p string) (int64, string, error) {
	r, err := storage.Open(ctx, p)
	if err != nil {
		return 0, "", err
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, r)
	if err != nil {
		return n, "", fmt.Errorf("reading %s: %w", p, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}
