package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// The scale on paper: what data-parallel training on one machine of 8 GPUs would take for the
// paper's ImageNet-1K recipes, computed from the measured rate of one GPU, ImageNet's size,
// and the sizes of the model's tensors (read from the model itself), with the collectives'
// cost from the ring formulas. Nothing here was run on 8 GPUs.

// scaleGPUs is the machine on paper: one host, its GPUs on NVLink.
const scaleGPUs = 8

// measuredRate is one GPU's images/s (both views count) for a model, image size, batch and
// precision, with where it was measured.
type measuredRate struct {
	precision   trainstep.Precision
	imagesPerS  float64
	batch, size int
	source      string
}

// resnet50Rates are the resnet50 rows of the first CUDA run (the project's own GPU check on
// one H200: its notes are in the shared notes, gpu-h200-findings.md). An H100 SXM has the
// H200's compute (132 SMs, the same tensor cores and clocks) and less and slower memory (80 GB
// at 3.35 TB/s against 141 GB at 4.8 TB/s), so these rates bound an H100's from above.
var resnet50Rates = []measuredRate{
	{trainstep.BFloat16, 3595, 64, 224, "dcl gpu-check on one H200, 2026-11-26"},
	{trainstep.TF32, 2382, 64, 224, "dcl gpu-check on one H200, 2026-11-26"},
}

// The forward pass of ResNet-50 at 224 px: 4.09 GMAC (torchvision's model card, which counts
// multiply-adds), so a training view (forward, and a backward of twice its work) is
// 3·2·4.09 GFLOP.
const (
	resnet50ForwardGMAC = 4.09
	trainingPassFactor  = 3
)

// The interconnect: NVLink 4 on an H100 SXM, 900 GB/s per GPU both directions together
// (NVIDIA's H100 datasheet), so 450 GB/s each way, the bandwidth a ring collective's
// steady state moves at.
const nvlinkBytesPerS = 450e9

// Between hosts: InfiniBand NDR, 400 Gb/s per GPU (a DGX H100's eight ConnectX-7 ports, one
// per GPU, NVIDIA's DGX H100 user guide), the slowest link of a ring across hosts.
const (
	interHostBytesPerS = 50e9
	scaleHosts         = 2
)

// paperRecipe is one ImageNet-1K pretraining recipe of the paper (ResNet-50, 224 px views).
type paperRecipe struct {
	what          string
	batch, epochs int
}

var paperRecipes = []paperRecipe{
	{"SimCLR with DCL, the few-epoch ablation", 256, 100},
	{"SimCLR with DCL or DCLW, the main ImageNet-1K results", 256, 200},
	{"NNCLR with DCL, the comparison with other methods", 512, 400},
	{"DCL at large batch, the batch-size table", 1024, 400},
}

// modelSizes are what the collectives move, read from the model's variables: the parameters
// (the gradient's all-reduce), batch norm's layers and channels (SyncBN's all-reduces), and
// the projection's width (the negatives' all-gather).
type modelSizes struct {
	params, bnLayers, bnChannels, projectionDim int
}

func resnet50Sizes(ctx context.Context) (modelSizes, error) {
	be, err := gpu.New(ctx, gpu.Options{Kind: gpu.CPU, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return modelSizes{}, err
	}
	defer be.Finalize()
	s, err := trainstep.NewStep(be, trainstep.BenchStepConfig(trainstep.ResNet50, 3), 224, 224)
	if err != nil {
		return modelSizes{}, err
	}
	defer s.Finalize()
	m := modelSizes{params: s.NumParameters(), projectionDim: s.Model().Config().ProjectionDim}
	for v := range s.Store().IterVariables() {
		if strings.HasPrefix(v.Path(), "/model/") && strings.HasSuffix(v.Path(), "/scale") {
			m.bnLayers++
			m.bnChannels += v.Shape().Size()
		}
	}
	return m, nil
}

// ringAllGather is the seconds of a ring all-gather (or reduce-scatter) of total bytes over n
// devices at bandwidth bytes/s each way: each device receives (n−1)/n of them, latency left
// out; an all-reduce is twice it.
func ringAllGather(total float64, n int, bandwidth float64) float64 {
	return float64(n-1) / float64(n) * total / bandwidth
}

// scaleSection is the scale-on-paper section of docs/gpu.md.
func scaleSection(ctx context.Context, _ *generator, _ section) (string, []error, error) {
	imagenet, err := datasets.Lookup(datasets.ImageNet)
	if err != nil {
		return "", nil, err
	}
	images := imagenet.Published["train"]
	sizes, err := resnet50Sizes(ctx)
	if err != nil {
		return "", nil, err
	}
	return scaleMarkdown(images, sizes), nil, nil
}

func scaleMarkdown(images int64, m modelSizes) string {
	var b strings.Builder
	viewsPerEpoch := 2 * float64(images)
	gflopPerView := trainingPassFactor * 2 * resnet50ForwardGMAC
	fmt.Fprintf(&b, "Inputs: ImageNet-1K's %s training images, two views each an epoch (the dataset registry); "+
		"ResNet-50 at 224 px, %.2f GMAC a forward pass (torchvision's count), so %.1f GFLOP a training view (forward and a backward of twice its work); "+
		"one GPU's measured images/s:", thousands(images), resnet50ForwardGMAC, gflopPerView)
	for _, r := range resnet50Rates {
		fmt.Fprintf(&b, " %s %s at batch %d (%.0f effective TFLOP/s),", thousands(int64(r.imagesPerS)), r.precision, r.batch, r.imagesPerS*gflopPerView/1e3)
	}
	fmt.Fprintf(&b, " from %s; an H100 SXM computes as an H200 and has slower memory, so these bound it from above. "+
		"Time = epochs × %s views ÷ (%d × one GPU's images/s): perfect scaling, which the collectives below cost little of.\n\n",
		resnet50Rates[0].source, thousands(int64(viewsPerEpoch)), scaleGPUs)

	b.WriteString("| recipe | batch (pairs) | per GPU | epochs |")
	for _, r := range resnet50Rates {
		fmt.Fprintf(&b, " hours on %d GPUs, %s |", scaleGPUs, r.precision)
	}
	b.WriteString(" hours on 1 GPU, " + string(resnet50Rates[0].precision) + " |\n|---|---|---|---|")
	for range resnet50Rates {
		b.WriteString("---|")
	}
	b.WriteString("---|\n")
	for _, p := range paperRecipes {
		fmt.Fprintf(&b, "| %s | %d | %d | %d |", p.what, p.batch, p.batch/scaleGPUs, p.epochs)
		for _, r := range resnet50Rates {
			fmt.Fprintf(&b, " %.1f |", float64(p.epochs)*viewsPerEpoch/(scaleGPUs*r.imagesPerS)/3600)
		}
		fmt.Fprintf(&b, " %.0f |\n", float64(p.epochs)*viewsPerEpoch/resnet50Rates[0].imagesPerS/3600)
	}

	gradBytes := 4 * float64(m.params)
	fmt.Fprintf(&b, "\nWhat the collectives move each step on %d GPUs, by the ring formulas (a device receives (N−1)/N of an "+
		"all-gather's S bytes: t = (N−1)/N · S/β; an all-reduce is a reduce-scatter and an all-gather, twice that), at β = %.0f GB/s "+
		"each way (NVLink 4, an H100 SXM's 900 GB/s both ways, NVIDIA's datasheet), latency left out. The sizes are the model's own: "+
		"%s parameters (the float32 gradient's all-reduce, %.1f MB), %d batch-norm layers of %s channels in all (SyncBN all-reduces "+
		"a mean and a mean of squares per channel forward, two sums backward), a %d-wide float32 projection per view (the negatives' "+
		"all-gather, 2B rows, and its backward, a reduce-scatter of the same size). XLA's partitioner chooses the program's "+
		"collectives; these are the ones a hand-written DDP step makes, the floor of what any data-parallel step must move.\n\n",
		scaleGPUs, nvlinkBytesPerS/1e9, thousands(int64(m.params)), gradBytes/1e6, m.bnLayers, thousands(int64(m.bnChannels)), m.projectionDim)
	b.WriteString("| batch (pairs) | step, bf16 | projections gathered | all-gather + backward | gradient all-reduce | SyncBN all-reduces | collectives ÷ step |\n|---|---|---|---|---|---|---|\n")
	for _, batch := range []int{256, 512, 1024} {
		step := 2 * float64(batch) / (scaleGPUs * resnet50Rates[0].imagesPerS)
		gathered := 2 * float64(batch) * float64(m.projectionDim) * 4
		gather := 2 * ringAllGather(gathered, scaleGPUs, nvlinkBytesPerS)
		grad := 2 * ringAllGather(gradBytes, scaleGPUs, nvlinkBytesPerS)
		bn := 2 * 2 * ringAllGather(2*4*float64(m.bnChannels), scaleGPUs, nvlinkBytesPerS)
		fmt.Fprintf(&b, "| %d | %.1f ms | %.0f KiB | %.2f µs | %.0f µs | %.1f µs | %.1f%% |\n",
			batch, step*1e3, gathered/1024, gather*1e6, grad*1e6, bn*1e6, 100*(gather+grad+bn)/step)
	}
	fmt.Fprintf(&b, "\nThe bytes are not the cost at these sizes: each collective is a latency of (N−1) ring steps of a few "+
		"microseconds each on NVLink, and SyncBN makes %d all-reduces a step (one forward and one backward per layer), "+
		"so latency, not bandwidth, is what several GPUs add; XLA overlaps the gradient's all-reduce with the backward pass "+
		"where it can. On %d hosts of %d GPUs, a ring across them runs at the inter-host link's β = %.0f GB/s per GPU "+
		"(InfiniBand NDR, 400 Gb/s per GPU, as a DGX H100 has): the gradient's all-reduce then takes %.1f ms, %.0f%% of a batch-256 step on %d GPUs.\n",
		2*m.bnLayers, scaleHosts, scaleGPUs, interHostBytesPerS/1e9,
		2*ringAllGather(gradBytes, scaleHosts*scaleGPUs, interHostBytesPerS)*1e3,
		100*2*ringAllGather(gradBytes, scaleHosts*scaleGPUs, interHostBytesPerS)/(2*256/(scaleHosts*scaleGPUs*resnet50Rates[0].imagesPerS)), scaleHosts*scaleGPUs)
	return b.String()
}
