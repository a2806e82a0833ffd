package analysis

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/dcl-beam/dcl-beam/gpu/kernels"
	"github.com/dcl-beam/dcl-beam/internal/cputime"
)

// knnBenchSizes is the kNN job: 10,000 queries against 50,000 training embeddings of
// 512 dimensions (tiny under -short).
func knnBenchSizes() (nq, nb, dim int) {
	if testing.Short() {
		return 300, 2000, 64
	}
	return 10000, 50000, 512
}

func randomVectors(r *rand.Rand, n, dim int) Vectors {
	v := Vectors{Dim: dim, Data: make([]float32, n*dim)}
	for i := range v.Data {
		v.Data[i] = float32(r.NormFloat64())
	}
	return v
}

func benchKNNData(numClasses int) (train, test LabeledVectors) {
	nq, nb, dim := knnBenchSizes()
	r := rand.New(rand.NewPCG(1, 1))
	train = LabeledVectors{Source: "train", Vectors: randomVectors(r, nb, dim), Labels: make([]int32, nb)}
	test = LabeledVectors{Source: "test", Vectors: randomVectors(r, nq, dim), Labels: make([]int32, nq)}
	for i := range train.Labels {
		train.Labels[i] = int32(r.IntN(numClasses))
	}
	for i := range test.Labels {
		test.Labels[i] = int32(r.IntN(numClasses))
	}
	return train, test
}

// reportRates reports GFLOP/s of wall time and, where CPU time is measured, GFLOP per
// CPU-second (cpu-GFLOP/s): what one fully used core achieves, however busy the machine.
func reportRates(b *testing.B, flops float64, cpuStart float64) {
	b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
	if cpu := cputime.Process().Seconds() - cpuStart; cpuStart > 0 && cpu > 0 {
		b.ReportMetric(flops*float64(b.N)/cpu/1e9, "cpu-GFLOP/s")
	}
}

// BenchmarkKNN is the whole kNN evaluation (k = 200, cosine, votes, accuracy) with the
// queries in blocks on every core and the bank streamed past each block. GFLOP/s counts the
// similarity matrix's 2·queries·bank·dim operations.
func BenchmarkKNN(b *testing.B) {
	train, test := benchKNNData(100)
	nq, nb, dim := knnBenchSizes()
	for _, qb := range []int{256, 1024} {
		b.Run(fmt.Sprintf("%dx%dx%d/queryblock=%d", nq, nb, dim, qb), func(b *testing.B) {
			cpu := cputime.Process().Seconds()
			for b.Loop() {
				if _, err := KNN(train, test, KNNConfig{NumClasses: 100, QueryBlock: qb}); err != nil {
					b.Fatal(err)
				}
			}
			reportRates(b, 2*float64(nq)*float64(nb)*float64(dim), cpu)
		})
	}
}

// BenchmarkKNNOneMatMul is the same job's similarity matrix as one matrix multiply on every
// core (queries × bank, 2 GB at full size): the yardstick BenchmarkKNN is compared with.
// "with-topk" adds the per-row top-k selection and the vote on the finished matrix.
func BenchmarkKNNOneMatMul(b *testing.B) {
	train, test := benchKNNData(100)
	nq, nb, dim := knnBenchSizes()
	q, bank := Prepare(test.Vectors, Cosine), Prepare(train.Vectors, Cosine)
	sims := make([]float32, nq*nb)
	pool := kernels.DefaultPool()
	b.Run(fmt.Sprintf("%dx%dx%d/matmul", nq, nb, dim), func(b *testing.B) {
		cpu := cputime.Process().Seconds()
		for b.Loop() {
			sgemm(pool, false, true, nq, nb, dim, 1, q.Vectors.Data, dim, bank.Vectors.Data, dim, 0, sims, nb)
		}
		reportRates(b, 2*float64(nq)*float64(nb)*float64(dim), cpu)
	})
	b.Run(fmt.Sprintf("%dx%dx%d/matmul-with-topk", nq, nb, dim), func(b *testing.B) {
		cpu := cputime.Process().Seconds()
		for b.Loop() {
			sgemm(pool, false, true, nq, nb, dim, 1, q.Vectors.Data, dim, bank.Vectors.Data, dim, 0, sims, nb)
			pool.ParallelRange(nq, 64, func(lo, hi int) {
				t := NewTally(100)
				for i := lo; i < hi; i++ {
					c := candidates{buf: make([]Neighbor, 0, 400)}
					c.offer(200, sims[i*nb:(i+1)*nb], train.Labels, 0)
					scores, _ := Vote(c.best(200), 100, 0.1)
					_ = t.Add(test.Labels[i], RankClasses(scores, 5))
				}
			})
		}
		reportRates(b, 2*float64(nq)*float64(nb)*float64(dim), cpu)
	})
}

// BenchmarkFashionMNISTRawPixelKNN is the known figure: kNN on raw pixels (scaled to [0, 1]),
// all 10,000 test images against all 60,000 training images (first 2,000 × 10,000 under
// -short). It reports top-1 and top-5 accuracy in percent.
func BenchmarkFashionMNISTRawPixelKNN(b *testing.B) {
	train, test := fashion(b)
	if testing.Short() {
		train, test = subset(train, 10000), subset(test, 2000)
	}
	for _, c := range []struct {
		name string
		cfg  KNNConfig
	}{
		{"cosine-k200-T0.1", KNNConfig{K: 200, Temperature: 0.1, Metric: Cosine}},
		{"euclidean-k1", KNNConfig{K: 1, Temperature: 0.1, Metric: Euclidean}},
		{"euclidean-k5-uniform", KNNConfig{K: 5, Temperature: 1e6, Metric: Euclidean}},
	} {
		b.Run(c.name, func(b *testing.B) {
			c.cfg.NumClasses = 10
			var res *KNNResult
			for b.Loop() {
				var err error
				if res, err = KNN(train, test, c.cfg); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(res.Top1, "top1%")
			b.ReportMetric(res.Top5, "top5%")
		})
	}
}

// BenchmarkLinearProbe times one epoch of the probe's SGD on 50,000 512-d features, 10
// classes, batch 256 (tiny under -short).
func BenchmarkLinearProbe(b *testing.B) {
	n, dim := 50000, 512
	if testing.Short() {
		n, dim = 2000, 64
	}
	r := rand.New(rand.NewPCG(2, 2))
	train := LabeledVectors{Source: "train", Vectors: randomVectors(r, n, dim), Labels: make([]int32, n)}
	for i := range train.Labels {
		train.Labels[i] = int32(r.IntN(10))
	}
	cfg := DefaultLinearConfig()
	cfg.Epochs, cfg.NumClasses = 1, 10
	for b.Loop() {
		if _, _, err := TrainLinear(train, cfg); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "examples/s")
}

// BenchmarkNPCStatistics times the NPC statistics of 10,000 128-d view pairs at the paper's
// batch sizes (tiny under -short).
func BenchmarkNPCStatistics(b *testing.B) {
	n, dim, sizes := 10000, 128, DefaultNPCBatchSizes()
	if testing.Short() {
		n, dim, sizes = 256, 16, []int{32, 64}
	}
	r := rand.New(rand.NewPCG(3, 3))
	z1, z2 := randomVectors(r, n, dim), randomVectors(r, n, dim)
	for b.Loop() {
		if _, err := NPCStatistics(z1, z2, "pairs", NPCConfig{BatchSizes: sizes, Temperature: 0.1}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(n*len(sizes))*float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
}
