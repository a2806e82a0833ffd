package pipelines

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"slices"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/shards"
)

func init() {
	registerElement[shards.Config]()
	register.DoFn5x1[context.Context, []byte, func(*unitStats) bool, func(int, refBatch), func(shards.Config), error](&prepareOutputFn{})
	register.DoFn6x1[context.Context, []byte, func(*shards.Config) bool, func(*shards.ShardInfo) bool, func(*shards.DeadLetter) bool, func(*unitStats) bool, error](&commitFn{})
	register.Emitter1[shards.Config]()
	register.Iter1[unitStats]()
	register.Iter1[shards.Config]()
	register.Iter1[shards.ShardInfo]()
	register.Iter1[shards.DeadLetter]()
}

// readStats collects the unit statistics side input, in plan order, and checks that every
// unit reported exactly once.
func readStats(stats func(*unitStats) bool, units int) ([]unitStats, error) {
	var all []unitStats
	var s unitStats
	for stats(&s) {
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
	Config    shards.Config // without SourceChecksum
	Overwrite bool
	Units     int
	// UnitSources is the index in Config.Sources of each unit's source (see sourceDigests).
	UnitSources []int
}

func (f *prepareOutputFn) ProcessElement(ctx context.Context, _ []byte, stats func(*unitStats) bool, toShards func(int, refBatch), emit func(shards.Config)) error {
	all, err := readStats(stats, f.Units)
	if err != nil {
		return err
	}
	cfg := f.Config
	cfg.Sources = slices.Clone(cfg.Sources) // the DoFn's own copy stays as planned on a retry
	cfg.SourceChecksum = sourceChecksum(all)
	sourceDigests(cfg.Sources, f.UnitSources, all)
	if err := shards.Prepare(ctx, f.Output, cfg, f.Overwrite); err != nil {
		return err
	}
	// The sources go to the manifest only (see shards.Config.Diff).
	footer := cfg
	footer.Sources = nil
	for shard := range cfg.Passes * cfg.Parts {
		toShards(shard, refBatch{Config: &footer})
	}
	emit(cfg)
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

func (f *commitFn) ProcessElement(ctx context.Context, _ []byte, configs func(*shards.Config) bool,
	infos func(*shards.ShardInfo) bool, dead func(*shards.DeadLetter) bool, stats func(*unitStats) bool) error {
	var cfg shards.Config
	if !configs(&cfg) {
		return fmt.Errorf("the shards' configuration (side input) is missing")
	}
	var shardInfos []shards.ShardInfo
	var info shards.ShardInfo
	for infos(&info) {
		shardInfos = append(shardInfos, info)
	}
	var letters []shards.DeadLetter
	var l shards.DeadLetter
	for dead(&l) {
		letters = append(letters, l)
	}
	var records int64
	var s unitStats
	for stats(&s) {
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
