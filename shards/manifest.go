package shards

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// Manifest is manifest.json: the run's configuration and every shard of a dataset. It is
// written last, so a directory holding one is complete; readers refuse a directory without.
type Manifest struct {
	Format int         `json:"format"`
	Config Config      `json:"config"`
	Shards []ShardInfo `json:"shards"` // sorted by path: pass, then part
	// Records is the number of source records read; each one that is not a dead letter
	// gives exactly one row per pass, so Rows = (Records - DeadLetters.Count) × Passes.
	Records     int64           `json:"records"`
	Rows        int64           `json:"rows"`
	Bytes       int64           `json:"bytes"`
	Labels      map[int32]int64 `json:"labels"`
	DeadLetters DeadLetters     `json:"dead_letters"`
}

// DeadLetters describes the records a run could not turn into rows: how many, and the file
// (relative to the dataset directory, empty when there are none) that lists them with the
// source file, position and reason.
type DeadLetters struct {
	Count int64  `json:"count"`
	File  string `json:"file,omitempty"`
}

// ErrNoManifest marks a directory that has no manifest.json: an incomplete run, or not a
// dataset at all.
var ErrNoManifest = errors.New("no " + ManifestName + ": the directory is not a complete dataset (an interrupted or running preprocess, or not a dataset)")

// NewManifest builds the manifest of a finished run from its shards' entries: totals are
// summed and shards sorted, and the result is validated.
func NewManifest(cfg Config, shards []ShardInfo, records int64, dead DeadLetters) (*Manifest, error) {
	m := &Manifest{Format: FormatVersion, Config: cfg, Shards: slices.Clone(shards), Records: records,
		DeadLetters: dead, Labels: map[int32]int64{}}
	slices.SortFunc(m.Shards, func(a, b ShardInfo) int { return strings.Compare(a.Path, b.Path) })
	for _, s := range m.Shards {
		m.Rows += s.Rows
		m.Bytes += s.Bytes
		for l, n := range s.Labels {
			m.Labels[l] += n
		}
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// Validate checks that the manifest is complete and adds up: known format, a valid config,
// every shard of every pass listed once with sane fields, totals equal to the sums, and
// records = rows per pass + dead letters.
func (m *Manifest) Validate() error {
	if m.Format != FormatVersion {
		return fmt.Errorf("manifest format version %d: this program reads version %d", m.Format, FormatVersion)
	}
	if err := m.Config.Validate(); err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	cfg := &m.Config
	if want := cfg.Passes * cfg.Parts; len(m.Shards) != want {
		return fmt.Errorf("manifest lists %d shards, want %d passes × %d parts = %d", len(m.Shards), cfg.Passes, cfg.Parts, want)
	}
	seen := map[string]bool{}
	var rows, size int64
	labels := map[int32]int64{}
	perPass := make([]int64, cfg.Passes)
	for i, s := range m.Shards {
		if s.Path == "" {
			return fmt.Errorf("manifest shard %d: path is missing", i)
		}
		if seen[s.Path] {
			return fmt.Errorf("manifest lists shard %s twice", s.Path)
		}
		seen[s.Path] = true
		id, err := ParseShardPath(s.Path)
		if err != nil {
			return fmt.Errorf("manifest: %w", err)
		}
		if err := id.validate(cfg); err != nil {
			return fmt.Errorf("manifest shard %s: %w", s.Path, err)
		}
		switch {
		case id.Pass != s.Pass || id.Part != s.Part:
			return fmt.Errorf("manifest shard %s: says pass %d part %d", s.Path, s.Pass, s.Part)
		case s.Rows < 0 || s.Bytes <= 0:
			return fmt.Errorf("manifest shard %s: %d rows, %d bytes", s.Path, s.Rows, s.Bytes)
		case len(s.SHA256) != 64:
			return fmt.Errorf("manifest shard %s: sha256 is missing or malformed", s.Path)
		case s.Labels == nil:
			return fmt.Errorf("manifest shard %s: labels are missing", s.Path)
		}
		var inGroups, inLabels int64
		for _, n := range s.RowGroups {
			if n <= 0 {
				return fmt.Errorf("manifest shard %s: a row group of %d rows", s.Path, n)
			}
			inGroups += n
		}
		for l, n := range s.Labels {
			if l < Unlabelled || n <= 0 {
				return fmt.Errorf("manifest shard %s: label %d counted %d times", s.Path, l, n)
			}
			if k := len(cfg.Classes); k > 0 && int(l) >= k {
				return fmt.Errorf("manifest shard %s: label %d, but the config names %d classes", s.Path, l, k)
			}
			inLabels += n
			labels[l] += n
		}
		if inGroups != s.Rows || inLabels != s.Rows {
			return fmt.Errorf("manifest shard %s: %d rows, but its row groups hold %d and its labels count %d", s.Path, s.Rows, inGroups, inLabels)
		}
		rows += s.Rows
		size += s.Bytes
		perPass[s.Pass] += s.Rows
	}
	if rows != m.Rows || size != m.Bytes {
		return fmt.Errorf("manifest totals %d rows, %d bytes; its shards add up to %d rows, %d bytes", m.Rows, m.Bytes, rows, size)
	}
	if len(labels) != len(m.Labels) {
		return fmt.Errorf("manifest label totals do not match its shards")
	}
	for l, n := range labels {
		if m.Labels[l] != n {
			return fmt.Errorf("manifest counts %d rows of label %d; its shards %d", m.Labels[l], l, n)
		}
	}
	if m.DeadLetters.Count < 0 || m.Records < m.DeadLetters.Count {
		return fmt.Errorf("manifest: %d records, %d dead letters", m.Records, m.DeadLetters.Count)
	}
	if m.DeadLetters.Count > 0 && m.DeadLetters.File == "" {
		return fmt.Errorf("manifest: %d dead letters but no dead-letter file", m.DeadLetters.Count)
	}
	for p, n := range perPass {
		if want := m.Records - m.DeadLetters.Count; n != want {
			return fmt.Errorf("manifest: pass %d has %d rows; %d records less %d dead letters is %d", p, n, m.Records, m.DeadLetters.Count, want)
		}
	}
	return nil
}

// ShardsOfPass returns the shards of one pass, in part order.
func (m *Manifest) ShardsOfPass(pass int) []ShardInfo {
	var out []ShardInfo
	for _, s := range m.Shards {
		if s.Pass == pass {
			out = append(out, s)
		}
	}
	return out
}

// Views returns the number of views in the dataset (rows × views per row).
func (m *Manifest) Views() int64 { return m.Rows * int64(m.Config.Views) }

// ReadManifest reads and validates dir's manifest. A directory without one gets an error
// wrapping ErrNoManifest.
func ReadManifest(ctx context.Context, dir string) (*Manifest, error) {
	p := storage.Join(dir, ManifestName)
	ok, err := storage.Exists(ctx, p)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%s: %w", dir, ErrNoManifest)
	}
	data, err := storage.ReadFile(ctx, p)
	if err != nil {
		return nil, err
	}
	return parseManifest(p, data)
}

func parseManifest(p string, data []byte) (*Manifest, error) {
	// Read the version first: a manifest of another version may not parse as this one.
	var head struct {
		Format *int `json:"format"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, fmt.Errorf("reading %s: not valid JSON: %w", p, err)
	}
	if head.Format == nil {
		return nil, fmt.Errorf("reading %s: no format version", p)
	}
	if *head.Format != FormatVersion {
		return nil, fmt.Errorf("reading %s: manifest format version %d, this program reads version %d", p, *head.Format, FormatVersion)
	}
	var m Manifest
	if err := storage.DecodeJSON(data, &m); err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	return &m, nil
}

// Marshal returns the manifest as indented JSON. It holds no time stamps: the same run gives
// the same bytes.
func (m *Manifest) Marshal() ([]byte, error) {
	cfg, err := m.Config.canonical()
	if err != nil {
		return nil, err
	}
	c := *m
	c.Config = Config{} // unmarshalling into a RawMessage reuses its array, which m shares
	if err := json.Unmarshal(cfg, &c.Config); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding manifest: %w", err)
	}
	return append(data, '\n'), nil
}

// WriteManifest validates m and writes it atomically as dir/manifest.json.
func WriteManifest(ctx context.Context, dir string, m *Manifest) error {
	if err := m.Validate(); err != nil {
		return err
	}
	data, err := m.Marshal()
	if err != nil {
		return err
	}
	return storage.WriteFile(ctx, storage.Join(dir, ManifestName), data)
}

// StagingDir is the hidden folder under a dataset (or embeddings) directory that writers
// write their files into, each named with StagedSuffix after its final name; Commit moves
// them into place. A run's files are not data to any reader before it commits, so a killed
// run leaves nothing another tool takes for data: readers that skip hidden entries (pyarrow
// datasets, Spark) do not look in the folder, and a glob such as DuckDB's
// read_parquet('DIR/**/*.parquet'), which does (DuckDB 1.5), matches no staged name.
const (
	StagingDir   = ".staging"
	StagedSuffix = ".uncommitted"
)

// StagedPath is where a file of a directory is written before its commit, relative to the
// directory.
func StagedPath(rel string) string { return StagingDir + "/" + rel + StagedSuffix }

// Commit is the pipeline's last, metadata-only step: given the entries its writers returned,
// it checks that every listed shard is staged with the size its writer reported, removes
// temporaries and shard files the run did not write (left by an earlier run), moves the
// shards from the staging folder into place and writes the manifest (StagedCommit). Only
// after Commit returns nil is the directory a dataset. Run again after a failure part-way (a
// retried step), it finds the shards it already moved in place.
func Commit(ctx context.Context, dir string, cfg Config, shards []ShardInfo, records int64, dead DeadLetters) (*Manifest, error) {
	m, err := NewManifest(cfg, shards, records, dead)
	if err != nil {
		return nil, fmt.Errorf("committing %s: %w", dir, err)
	}
	data, err := m.Marshal()
	if err != nil {
		return nil, err
	}
	c := StagedCommit{Dir: dir, Kind: "shard", Stray: isShardLike, ManifestName: ManifestName, Manifest: data}
	for _, s := range m.Shards {
		c.Files = append(c.Files, StagedFile{Path: s.Path, Bytes: s.Bytes})
	}
	if dead.File != "" {
		c.Present = []string{dead.File}
	}
	if err := c.Commit(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// StagedFile is a file a writer wrote into a directory's staging folder (StagedPath), as
// the directory's manifest lists it: its final path, relative to the directory, and size.
type StagedFile struct {
	Path  string
	Bytes int64
}

// StagedCommit is the commit of a directory whose writers stage their files: a dataset's
// shards (Commit) or an embeddings directory's files (package shards/embeddings).
type StagedCommit struct {
	Dir string
	// Kind names the files in errors ("shard").
	Kind  string
	Files []StagedFile
	// Present are other files the manifest names, which must be there (a dead-letter file).
	Present []string
	// Stray reports whether a file the run did not write would be taken for data (a Parquet
	// file where the directory's own are): such files, left by an earlier run, are removed.
	Stray func(rel string) bool
	// Manifest is the manifest's bytes, written as ManifestName.
	ManifestName string
	Manifest     []byte
}

// Commit checks that every file is staged, or already in place (a commit cut short and run
// again), with the size its writer reported, and that the Present files are there; removes
// temporaries, stray files and an earlier manifest; moves the staged files into place;
// writes the manifest, last; and removes the staging folder.
func (c StagedCommit) Commit(ctx context.Context) error {
	files, err := storage.ListTree(ctx, c.Dir)
	if err != nil {
		return err
	}
	present := map[string]bool{}
	for _, f := range files {
		present[f] = true
	}
	listed := map[string]bool{}
	var moves []string
	for _, f := range c.Files {
		if listed[f.Path] {
			return fmt.Errorf("committing %s: %s %s listed twice", c.Dir, c.Kind, f.Path)
		}
		listed[f.Path] = true
		at := f.Path
		switch staged := StagedPath(f.Path); {
		case present[staged]:
			at = staged
			moves = append(moves, f.Path)
		case !present[f.Path]:
			return fmt.Errorf("committing %s: %s %s is missing", c.Dir, c.Kind, f.Path)
		}
		size, err := storage.Size(ctx, storage.Join(c.Dir, at))
		if err != nil {
			return fmt.Errorf("committing %s: %w", c.Dir, err)
		}
		if size != f.Bytes {
			return fmt.Errorf("committing %s: %s %s has %d bytes, its writer wrote %d", c.Dir, c.Kind, at, size, f.Bytes)
		}
	}
	for _, p := range c.Present {
		if !present[p] {
			return fmt.Errorf("committing %s: %s, which the manifest names, is missing", c.Dir, p)
		}
	}
	for _, f := range files {
		if (c.Stray(f) && !listed[f]) || isTemporary(f) {
			if err := storage.Remove(ctx, storage.Join(c.Dir, f)); err != nil {
				return err
			}
		}
	}
	// The manifest is the commit record: it is there only when every file it lists is in
	// place, as a single file is renamed in only when whole. So an earlier run's manifest goes
	// before the moves (it would list files they replace), and this one is written after
	// them. The moves are many renames, not one: a kill among them leaves whole files in
	// place and no manifest, which no reader of the manifest takes for data (a bare glob
	// sees those files until the same command, run again, moves the rest and writes the
	// manifest; it never sees a staged or partial file).
	if err := storage.Remove(ctx, storage.Join(c.Dir, c.ManifestName)); err != nil {
		return err
	}
	for _, p := range moves {
		if err := storage.Rename(ctx, storage.Join(c.Dir, StagedPath(p)), storage.Join(c.Dir, p)); err != nil {
			return fmt.Errorf("committing %s: %w", c.Dir, err)
		}
	}
	if err := storage.WriteFile(ctx, storage.Join(c.Dir, c.ManifestName), c.Manifest); err != nil {
		return err
	}
	return storage.RemoveTree(ctx, storage.Join(c.Dir, StagingDir))
}

// isShardLike reports whether a file under a dataset directory would be taken for a shard:
// any Parquet file in a pass folder or at the top. Staged shards are not (isStagedShard).
func isShardLike(rel string) bool {
	if isTemporary(rel) || !strings.HasSuffix(rel, ".parquet") {
		return false
	}
	dir, _, found := strings.Cut(rel, "/")
	return !found || strings.HasPrefix(dir, "pass-")
}

func isTemporary(rel string) bool { return strings.Contains(rel, storage.TempMarker) }

// isStagedShard reports whether a file under a dataset directory is a shard written and not
// committed: one of an interrupted run.
func isStagedShard(rel string) bool {
	staged, ok := strings.CutPrefix(rel, StagingDir+"/")
	staged, staging := strings.CutSuffix(staged, StagedSuffix)
	return ok && staging && isShardLike(staged)
}

// DifferentDatasetError is Prepare's refusal to write into a directory that holds another
// dataset.
type DifferentDatasetError struct {
	Dir   string
	Where string // what holds the other dataset: the manifest or a shard's footer
	Diffs []string
}

func (e *DifferentDatasetError) Error() string {
	return fmt.Sprintf("%s already holds a different dataset (%s differs: %s); use --overwrite to replace it, or another output directory",
		e.Dir, e.Where, strings.Join(e.Diffs, "; "))
}

// Prepare readies dir for a run with configuration cfg, before any shard is written:
//
//   - If dir holds a dataset (a manifest, or shards of an interrupted run) with another
//     configuration, it refuses with a *DifferentDatasetError unless overwrite is set.
//   - It then removes the manifest (the directory is incomplete until Commit), every shard
//     file, the dead-letter file and temporaries that interrupted writes left, so a re-run
//     starts clean and ends with exactly the files it writes.
//
// Files that are not shards (anything but Parquet files at the top or in pass-NNN folders,
// and the staging folder) are left alone. Even with overwrite, it removes only what a
// preprocessing run writes: a directory that holds something else that readers take for
// data (embeddings, Parquet files at the top that are no dataset's shards) is refused.
func Prepare(ctx context.Context, dir string, cfg Config, overwrite bool) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	files, err := storage.ListTree(ctx, dir)
	if err != nil {
		return err
	}
	if !overwrite {
		if err := checkSameDataset(ctx, dir, cfg, files); err != nil {
			return err
		}
	} else if err := checkOnlyDatasetFiles(ctx, dir, files); err != nil {
		return err
	}
	// The manifest goes first: from here on no reader takes the directory for data.
	if err := storage.Remove(ctx, storage.Join(dir, ManifestName)); err != nil {
		return err
	}
	for _, f := range files {
		if isShardLike(f) || isTemporary(f) || f == DeadLettersName {
			if err := storage.Remove(ctx, storage.Join(dir, f)); err != nil {
				return err
			}
		}
	}
	return storage.RemoveTree(ctx, storage.Join(dir, StagingDir))
}

// CheckOverwritable refuses, as Prepare with overwrite does, a directory that holds what no
// preprocessing run wrote and readers take for data; a command checks it before it reads
// its input.
func CheckOverwritable(ctx context.Context, dir string) error {
	files, err := storage.ListTree(ctx, dir)
	if err != nil {
		return err
	}
	return checkOnlyDatasetFiles(ctx, dir, files)
}

// embeddingsManifest is the manifest of an embeddings directory (shards/embeddings).
const embeddingsManifest = "embeddings.json"

// checkOnlyDatasetFiles refuses a directory that --overwrite would strip of files no
// preprocessing run wrote: an embeddings directory, or Parquet files at its top whose footer
// is not a dataset's (shards in pass folders are a dataset's by their place).
func checkOnlyDatasetFiles(ctx context.Context, dir string, files []string) error {
	refuse := func(f, what string) error {
		return fmt.Errorf("%s holds %s, %s: --overwrite replaces a dataset only; write the dataset elsewhere", dir, f, what)
	}
	for _, f := range files {
		switch {
		case f == embeddingsManifest:
			return refuse(f, "so it is an embeddings directory, not a dataset")
		case isShardLike(f) && !strings.Contains(f, "/"):
			if _, err := readFooterConfig(ctx, storage.Join(dir, f)); err != nil {
				return refuse(f, "which is no shard of a dataset ("+err.Error()+")")
			}
		}
	}
	return nil
}

func checkSameDataset(ctx context.Context, dir string, cfg Config, files []string) error {
	if slices.Contains(files, ManifestName) {
		data, err := storage.ReadFile(ctx, storage.Join(dir, ManifestName))
		if err != nil {
			return err
		}
		var m struct {
			Format int    `json:"format"`
			Config Config `json:"config"`
		}
		if err := json.Unmarshal(data, &m); err != nil || m.Format != FormatVersion {
			return &DifferentDatasetError{Dir: dir, Where: ManifestName, Diffs: []string{"it is not a manifest of this format version"}}
		}
		if d := m.Config.Diff(cfg); len(d) > 0 {
			return &DifferentDatasetError{Dir: dir, Where: ManifestName, Diffs: d}
		}
	}
	// Shards without a manifest, staged or (from an earlier version, or a commit cut short)
	// in place, are an interrupted run: the same command may finish it, another may not mix
	// its shards in.
	for _, f := range files {
		if !isShardLike(f) && !isStagedShard(f) {
			continue
		}
		foot, err := readFooterConfig(ctx, storage.Join(dir, f))
		if err != nil {
			return &DifferentDatasetError{Dir: dir, Where: f, Diffs: []string{err.Error()}}
		}
		if d := foot.Diff(cfg); len(d) > 0 {
			return &DifferentDatasetError{Dir: dir, Where: "the footer of " + f, Diffs: d}
		}
	}
	return nil
}

func readFooterConfig(ctx context.Context, p string) (Config, error) {
	sf, err := openShardFile(ctx, p)
	if err != nil {
		return Config{}, err
	}
	defer sf.Close()
	return sf.config, nil
}
