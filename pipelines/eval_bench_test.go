package pipelines

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis"
)

// BenchmarkKNNBeamOverhead compares the kNN pipeline on prism with the same evaluation as a
// plain loop (read both files, analysis.KNN), on embedding files of 5,000 test and 50,000
// training 128-d vectors (tiny under -short). The difference is Beam's cost: job
// submission, the encoded blocks, the shuffle and the extra reads of the bank.
func BenchmarkKNNBeamOverhead(b *testing.B) {
	nTest, nTrain, dim := 5000, 50000, 128
	if testing.Short() {
		nTest, nTrain, dim = 200, 1000, 16
	}
	dir := b.TempDir()
	trainDir, testFile := filepath.Join(dir, "train"), filepath.Join(dir, "test.parquet")
	writeEmbeddings(b, trainDir, clustered(21, "train", nTrain, dim, 10), 4, nil)
	writeEmbeddings(b, testFile, clustered(22, "test", nTest, dim, 10), 1, nil)
	ctx := context.Background()
	var loopRes, beamRes *analysis.KNNResult
	b.Run(fmt.Sprintf("loop/%dx%dx%d", nTest, nTrain, dim), func(b *testing.B) {
		for b.Loop() {
			train, _, err := LoadEmbeddings(ctx, trainDir)
			if err != nil {
				b.Fatal(err)
			}
			test, _, err := LoadEmbeddings(ctx, testFile)
			if err != nil {
				b.Fatal(err)
			}
			if loopRes, err = analysis.KNN(train, test, analysis.KNNConfig{NumClasses: 10}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, groups := range []int{1, 4} {
		b.Run(fmt.Sprintf("beam-prism/%dx%dx%d/bankgroups=%d", nTest, nTrain, dim, groups), func(b *testing.B) {
			for b.Loop() {
				job, err := PlanKNN(ctx, KNNOptions{Train: trainDir, Test: testFile, NumClasses: 10, BankGroups: groups})
				if err != nil {
					b.Fatal(err)
				}
				if beamRes, err = RunKNN(ctx, job); err != nil {
					b.Fatal(err)
				}
			}
		})
		if loopRes != nil && beamRes != nil && (loopRes.Top1 != beamRes.Top1 || loopRes.Top5 != beamRes.Top5) {
			b.Errorf("the pipeline's accuracy %.2f/%.2f differs from the loop's %.2f/%.2f", beamRes.Top1, beamRes.Top5, loopRes.Top1, loopRes.Top5)
		}
	}
}
