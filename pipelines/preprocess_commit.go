package pipelines

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"slices"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/shards"
)

func init() {
	register.DoFn5x1[context.Context, []byte, func(*string) bool, func(int, refBatch), func(string), error](&prepareOutputFn{})
	register.DoFn6x1[context.Context, []byte, func(*string) bool, func(*string) bool, func(*string) bool, func(*string) bool, error](&commitFn{})
}

// readStats collects the unit statistics side input, in plan order, and checks that every
// unit reported exactly once.
func readStats(stats func(*string) bool, units int) ([]unitStats, error) {
	var all []unitStats
	var js string
	for stats(&js) {
		var s unitStats
		if err := json.Unmarshal([]byte(js), &s); err != nil {
			return nil, fmt.Errorf("decoding unit statistics: %w", err)
		}
		all = append(all, s)
	}
	slices.SortFunc(all, func(a, b unitStats) int { return cmp.Compare(a.Seq, b.Seq) })
	if len(all) != units {
		return nil, fmt.Errorf("%d of the plan's %d units reported their records", len(all), units)
	}
	for i, s := range all {
		if s.Seq != i {
			return nil, fmt.Errorf("unit %d reported twice or unit %d never", s.Seq, i)
		}
	}
	return all, nil
}

// sourceChecksum summarises the units' digests, in plan order: the sha256 of the
// concatenated digests. Two runs agree on it exactly when they read the same records.
func sourceChecksum(stats []unitStats) string {
	h := sha256.New()
	for _, s := range stats {
		fmt.Fprintf(h, "%d %s\n", s.Seq, s.Digest)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sourceDigests sets the sha256 of each source to that of its units' digests, in plan order,
// as sourceChecksum summarises all of them.
func sourceDigests(sources []shards.Source, unitSource []int, stats []unitStats) {
	hashes := make([]hash.Hash, len(sources))
	for i := range hashes {
		hashes[i] = sha256.New()
	}
	for _, s := range stats {
		if s.Seq < len(unitSource) && unitSource[s.Seq] < len(hashes) {
			fmt.Fprintf(hashes[unitSource[s.Seq]], "%d %s\n", s.Seq, s.Digest)
		}
	}
	for i, h := range hashes {
		sources[i].SHA256 = hex.EncodeToString(h.Sum(nil))
	}
}

// prepareOutputFn runs once, after every unit has been read and before any shard is
// written: it completes the configuration with the source checksum and readies the output
// directory with shards.Prepare, which refuses another dataset's directory unless
// Overwrite and removes what an earlier, interrupted run left. It sends the configuration
// to every shard through the GroupByKey (WriteParts cannot start a shard before it has
// it) and to Commit. Running it twice does no harm.
//
// The configuration reaches WriteParts inside the grouped data rather than as a side
// input: prism v2.77.0 busy-waits, using a whole core, while the bundles of a stage that
// consumes a GroupByKey and has a side input run.
type prepareOutputFn struct {
	Output    string
	Config    string // shards.Config as JSON, without SourceChecksum
	Overwrite bool
	Units     int
	// UnitSources is the index in Config.Sources of each unit's source (see sourceDigests).
	UnitSources []int
}

func (f *prepareOutputFn) ProcessElement(ctx context.Context, _ []byte, stats func(*string) bool, toShards func(int, refBatch), emit func(string)) error {
	all, err := readStats(stats, f.Units)
	if err != nil {
		return err
	}
	var cfg shards.Config
	if err := json.Unmarshal([]byte(f.Config), &cfg); err != nil {
		return fmt.Errorf("decoding the shards' configuration: %w", err)
	}
	cfg.SourceChecksum = sourceChecksum(all)
	sourceDigests(cfg.Sources, f.UnitSources, all)
	if err := shards.Prepare(ctx, f.Output, cfg, f.Overwrite); err != nil {
		return err
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	// The sources go to the manifest only (see shards.Config.Diff).
	footer := cfg
	footer.Sources = nil
	footerJS, err := json.Marshal(footer)
	if err != nil {
		return err
	}
	for shard := range cfg.Passes * cfg.Parts {
		toShards(shard, refBatch{Config: string(footerJS)})
	}
	emit(string(js))
	return nil
}

// commitFn runs once, after every shard is written: the metadata-only step. It writes the
// dead letters, fails the run (without a manifest) when they are more than MaxBadFraction
// of the records, and otherwise commits the dataset with shards.Commit, which checks every
// shard is in place and writes manifest.json last.
type commitFn struct {
	Output         string
	MaxBadFraction float64
}

func (f *commitFn) ProcessElement(ctx context.Context, _ []byte, configs, infos, dead, stats func(*string) bool) error {
	var js string
	if !configs(&js) {
		return fmt.Errorf("the shards' configuration (side input) is missing")
	}
	var cfg shards.Config
	if err := json.Unmarshal([]byte(js), &cfg); err != nil {
		return fmt.Errorf("decoding the shards' configuration: %w", err)
	}
	var shardInfos []shards.ShardInfo
	for infos(&js) {
		var info shards.ShardInfo
		if err := json.Unmarshal([]byte(js), &info); err != nil {
			return fmt.Errorf("decoding a shard's entry: %w", err)
		}
		shardInfos = append(shardInfos, info)
	}
	var letters []shards.DeadLetter
	for dead(&js) {
		var l shards.DeadLetter
		if err := json.Unmarshal([]byte(js), &l); err != nil {
			return fmt.Errorf("decoding a dead letter: %w", err)
		}
		letters = append(letters, l)
	}
	var records int64
	for stats(&js) {
		var s unitStats
		if err := json.Unmarshal([]byte(js), &s); err != nil {
			return fmt.Errorf("decoding unit statistics: %w", err)
		}
		records += s.Records + s.Bad
	}
	dl, err := shards.WriteDeadLetters(ctx, f.Output, letters)
	if err != nil {
		return err
	}
	if n := int64(len(letters)); n > 0 && float64(n) > f.MaxBadFraction*float64(records) {
		return fmt.Errorf("%d of %d records (%.3g%%) could not be used, more than --max-bad-fraction=%g allows: "+
			"they are listed with their reasons in %s; no manifest was written",
			n, records, 100*float64(n)/float64(records), f.MaxBadFraction, storage.Join(f.Output, shards.DeadLettersName))
	}
	if _, err := shards.Commit(ctx, f.Output, cfg, shardInfos, records, dl); err != nil {
		return err
	}
	return nil
}
