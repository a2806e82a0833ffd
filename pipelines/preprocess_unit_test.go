package pipelines

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/typex"

	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/transforms"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// The preprocess pipeline's elements go through their coders (registerElement's, which
// runners pass on as bytes) and come back equal, with empty slices and maps still empty rather than nil: the
// shard entries and dead letters reach manifest.json and dead-letters.jsonl, whose bytes
// must not change.
func TestPreprocessElementsRoundTripThroughTheirCoders(t *testing.T) {
	cfg := shards.Config{Dataset: "cifar10", Split: "train", Preset: "simclr-cifar", Augment: json.RawMessage(`{"size":32}`),
		Seed: 1, Passes: 2, Parts: 3, Views: 2, Encoding: shards.Raw, Height: 32, Width: 32, Channels: 3,
		Sources: []shards.Source{{Name: "data_batch_1.bin", SHA256: "ab"}}, Classes: []string{"airplane"}}
	var batch refBatch
	for _, r := range []ref{
		{},
		{Order: 1<<64 - 1, Unit: 12, Index: 49999, CRC: 0xdeadbeef},
		{Order: 42, Unit: 3, Index: -1, CRC: 7, Ref: "1099511627776 110000 n01440764_10026.JPEG"},
	} {
		batch.add(r)
	}
	for _, give := range []any{
		batch,
		refBatch{Config: &cfg},
		cfg,
		unitTask{Seq: 3, Unit: datasets.Unit{Kind: datasets.KindFiles, Path: "in", Records: 2, Exact: true,
			Files: []string{"a.jpg", "b.jpg"}, Labels: []int{0, datasets.NoLabel}, Limits: datasets.Limits{MaxPixels: 9}}},
		unitStats{Seq: 2, Records: 10, Bad: 1, Digest: "cd"},
		shards.ShardInfo{Path: "pass-000/part-00000-of-00001.parquet", Rows: 0, Labels: map[int32]int64{}, RowGroups: []int64{}},
		shards.ShardInfo{Path: "p", Rows: 3, Labels: map[int32]int64{0: 2, -1: 1}, RowGroups: []int64{3}},
		shards.DeadLetter{Source: "x.tar", Position: 1536, Key: "train/x", Reason: "bad header"},
	} {
		rt := reflect.TypeOf(give)
		// A custom coder prints as TYPE[TYPE], a row coder as R[…].
		if c := beam.NewCoder(typex.New(rt)); !strings.HasPrefix(c.String(), rt.String()+"[") {
			t.Errorf("%v is coded by %v, want registerElement's opaque coder", rt, c)
		}
		var buf bytes.Buffer
		if err := beam.NewElementEncoder(rt).Encode(give, &buf); err != nil {
			t.Fatalf("encoding %+v: %v", give, err)
		}
		got, err := beam.NewElementDecoder(rt).Decode(&buf)
		if err != nil {
			t.Fatalf("decoding %+v: %v", give, err)
		}
		if !reflect.DeepEqual(got, give) {
			t.Errorf("decode(encode(%+v)) = %+v", give, got)
		}
	}
	bad := batch
	bad.CRC = bad.CRC[:1]
	if _, err := bad.appendRefs(nil); err == nil {
		t.Error("a batch whose columns differ in length gave references")
	}
	if refs, err := batch.appendRefs(nil); err != nil || len(refs) != 3 || refs[2].Ref == "" || refs[1].Order != 1<<64-1 {
		t.Errorf("the batch's references: %+v, %v", refs, err)
	}
}

func TestToChannels(t *testing.T) {
	rgb := transforms.Image{Pix: []uint8{255, 0, 0, 0, 255, 0, 0, 0, 255, 10, 20, 30}, H: 2, W: 2, C: 3}
	grey := toChannels(rgb, 1)
	// Pillow's L: (19595 R + 38470 G + 7471 B + 2^15) >> 16.
	if want := []uint8{76, 150, 29, 18}; fmt.Sprint(grey.Pix) != fmt.Sprint(want) || grey.C != 1 {
		t.Errorf("RGB to grey: %v, want %v", grey.Pix, want)
	}
	back := toChannels(grey, 3)
	if want := []uint8{76, 76, 76, 150, 150, 150, 29, 29, 29, 18, 18, 18}; fmt.Sprint(back.Pix) != fmt.Sprint(want) {
		t.Errorf("grey to RGB: %v, want %v", back.Pix, want)
	}
	if same := toChannels(rgb, 3); &same.Pix[0] != &rgb.Pix[0] {
		t.Error("an image that already has the channels was copied")
	}
}

func TestDeadLetterOfKeepsWhereTheRecordWas(t *testing.T) {
	tests := []struct {
		give datasets.BadRecord
		want shards.DeadLetter
	}{
		{datasets.BadRecord{Source: "d/data_batch_1.bin", Position: datasets.Position{Offset: 3073}, Key: "train/000001", Reason: "label 12 outside 0..9"},
			shards.DeadLetter{Source: "d/data_batch_1.bin", Position: 3073, Key: "train/000001", Reason: "label 12 outside 0..9"}},
		{datasets.BadRecord{Source: "n01.tar", Position: datasets.Position{Offset: 1536, Member: "n01/x.JPEG"}, Key: "train/n01/x.JPEG", Reason: "bad header"},
			shards.DeadLetter{Source: "n01.tar", Position: 1536, Key: "train/n01/x.JPEG", Reason: "member n01/x.JPEG (data at byte 1536): bad header"}},
		{datasets.BadRecord{Source: "cat/1.jpg", Position: datasets.Position{File: true}, Key: "train/cat/1.jpg", Reason: "empty file"},
			shards.DeadLetter{Source: "cat/1.jpg", Key: "train/cat/1.jpg", Reason: "empty file"}},
	}
	for _, tt := range tests {
		if got := deadLetterOf(tt.give); got != tt.want {
			t.Errorf("deadLetterOf(%+v) = %+v, want %+v", tt.give, got, tt.want)
		}
	}
}

func TestRootCauseDropsTheRunnersWrapping(t *testing.T) {
	err := errors.New("job job-001 failed:\nbundle inst003 stage-003 failed:process bundle failed …\n\tcaused by:\n" +
		"DoFn[UID:4, PID:e4, Name: pipelines.commitFn] failed:\n2 of 12 records could not be used\n")
	if got := rootCause(err); got != "2 of 12 records could not be used" {
		t.Errorf("rootCause = %q", got)
	}
	if got := rootCause(errors.New("plain")); got != "plain" {
		t.Errorf("rootCause of a plain error = %q", got)
	}
}

func TestDefaults(t *testing.T) {
	for _, tt := range []struct {
		dataset  string
		size, ch int
		enc      shards.Encoding
	}{
		{datasets.CIFAR10, 32, 3, shards.Raw}, {datasets.CIFAR100, 32, 3, shards.Raw}, {datasets.STL10, 96, 3, shards.Raw},
		{datasets.ImageNet, 224, 3, shards.JPEG}, {datasets.ImageNet100, 224, 3, shards.JPEG},
		{datasets.Folder, 224, 3, shards.JPEG}, {datasets.IDX, 28, 1, shards.Raw}, {datasets.FashionMNIST, 28, 1, shards.Raw},
	} {
		d, err := datasets.Lookup(tt.dataset)
		if err != nil {
			t.Fatal(err)
		}
		if d.ViewSize != tt.size || d.Channels != tt.ch || DefaultEncoding(d.ViewSize) != tt.enc {
			t.Errorf("%s: size %d, channels %d, encoding %s; want %d, %d, %s",
				tt.dataset, d.ViewSize, d.Channels, DefaultEncoding(d.ViewSize), tt.size, tt.ch, tt.enc)
		}
	}
	for _, tt := range []struct {
		records int64
		size, c int
		enc     shards.Encoding
		views   int
		want    int
	}{
		{50000, 32, 3, shards.Raw, 2, 2},       // CIFAR: 307 MB a pass
		{60000, 28, 1, shards.Raw, 2, 1},       // Fashion-MNIST: 98 MB
		{105000, 96, 3, shards.Raw, 2, 22},     // STL-10 train+unlabeled: 5.8 GB
		{1281167, 224, 3, shards.JPEG, 2, 288}, // ImageNet: about 30 KB a view, 77 GB
		{50000, 224, 3, shards.JPEG, 1, 6},     // ImageNet val, evaluation
		{3, 224, 3, shards.Raw, 2, 1},          // tiny
		{0, 32, 3, shards.Raw, 2, 1},           // at least one
	} {
		cfg := shards.Config{Height: tt.size, Width: tt.size, Channels: tt.c, Encoding: tt.enc, Views: tt.views}
		if got := DefaultParts(tt.records, cfg); got != tt.want {
			t.Errorf("DefaultParts(%d records of %d px %s) = %d, want %d", tt.records, tt.size, tt.enc, got, tt.want)
		}
	}
}

func TestLimitPlanCutsUnitsInOrder(t *testing.T) {
	p := datasets.Plan{Dataset: "imagenet", Split: "val", Exact: true, Records: 7, Units: []datasets.Unit{
		{Kind: datasets.KindFiles, Records: 4, Exact: true, Files: []string{"a", "b", "c", "d"}, Labels: []int{1, 2, 3, 4}},
		{Kind: datasets.KindFiles, Records: 3, Exact: true, Files: []string{"e", "f", "g"}, Labels: []int{5, 6, 7}},
	}}
	got, err := limitPlan(p, 5)
	if err != nil {
		t.Fatal(err)
	}
	if got.Records != 5 || len(got.Units) != 2 || got.Units[1].Records != 1 || fmt.Sprint(got.Units[1].Files, got.Units[1].Labels) != "[e] [5]" {
		t.Errorf("limit 5: %+v", got)
	}
	if len(p.Units[1].Files) != 3 {
		t.Error("limitPlan changed its argument's units")
	}
	if got, _ := limitPlan(p, 100); got.Records != 7 {
		t.Errorf("a limit above the split's size changed it: %d records", got.Records)
	}
	p.Exact = false
	if _, err := limitPlan(p, 5); err == nil {
		t.Error("a plan of estimated counts was limited")
	}
}
