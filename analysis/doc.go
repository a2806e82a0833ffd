// Package analysis is the evaluation math as plain Go: weighted kNN, the linear probe, the
// paper's negative-positive coupling (NPC) statistics, t-SNE, and the reports (JSON, Markdown
// tables) made from them. It knows nothing of Beam (package pipelines spreads the same pieces
// over workers) and nothing of drawing (package analysis/figures draws the plots).
//
// # kNN
//
// KNN is the weighted kNN of MoCo's CIFAR monitor (DefaultKNNConfig: cosine similarity of
// L2-normalised features, k = 200, votes exp(sim/T) with T = 0.1), reporting top-1/top-5
// accuracy overall and per class. It is built from pieces a distributed job uses directly:
// Prepare readies a block of vectors for a metric (normalised for Cosine; a zero vector stays
// zero, so its cosine with anything is 0); a Search holds a block of queries and takes bank
// (training) blocks one at a time, in any order; TopKBlock is one such block's answer and
// MergeTopK merges partial answers exactly; Vote and RankClasses turn neighbours into a
// ranking; a Tally counts hits and merges across workers. Ties are deterministic: equal
// similarities rank the lower training index first, equal votes the lower class id.
//
// # Linear probe
//
// LinearProbe trains multinomial logistic regression on frozen features with
// DefaultLinearConfig (OpenSelfSup: SGD lr 30, momentum 0.9, wd 0, 100 epochs, ×0.1 at 60
// and 80, batch 256) or LARSLinearConfig (the paper's SimSiam-style variant), from a seed,
// reproducibly.
//
// # NPC statistics
//
// NPCMultipliers computes q = 1 - exp(s)/(exp(s)+U) for every anchor of a batch in float64 (it
// agrees with trainstep's loss); NPCStatistics samples seeded batches of each size and
// summarises q per batch size (NPCStats: mean, std, C_v, quantiles, histogram on [0, 1]).
//
// # Reports
//
// Results are written and read with internal/storage's SaveJSON/LoadJSON; Table renders
// Markdown.
//
// # t-SNE
//
// TSNE is exact t-SNE (perplexity calibration by bisection, early exaggeration, momentum
// and gains, as van der Maaten's reference implementation), deterministic for a seed and
// parallel over rows; ClassSample draws the per-class sample it lays out (and
// figures.ScatterChart draws it coloured by class: the paper's Fig. 4(c)). NeighbourAgreement scores a layout by
// how often a point's nearest neighbours in it share its label.
//
// Every matrix multiply goes through one function (sgemm in matmul.go), on gpu/kernels'
// packed GEMM.
package analysis
