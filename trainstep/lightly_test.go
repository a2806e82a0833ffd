package trainstep

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/dcl-beam/dcl-beam/internal/registry"
)

// lightlyVersion is the lightly release the losses are compared with: the one `make
// deps-lightly` installs (trainstep/testdata/lightly-requirements.txt pins it by hash).
const lightlyVersion = "1.6.0"

// lightlyPython returns the python of the environment `make deps-lightly` makes:
// $DCL_LIGHTLY_PYTHON, else the repository's .cache/lightly/bin/python; "" where there is none.
func lightlyPython() string {
	p := os.Getenv("DCL_LIGHTLY_PYTHON")
	if p == "" {
		p = filepath.Join("..", ".cache", "lightly", "bin", "python")
	}
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// lightlyCase is one evaluation lightly_losses.py makes; lightlyResult its answer.
type lightlyCase struct {
	Loss  string      `json:"loss"`
	Tau   float64     `json:"tau"`
	Sigma float64     `json:"sigma"`
	DType string      `json:"dtype"`
	Z1    [][]float64 `json:"z1"`
	Z2    [][]float64 `json:"z2"`
}

type lightlyResult struct {
	Version string            `json:"version"`
	Loss    lightlyNumber     `json:"loss"`
	Grad1   [][]lightlyNumber `json:"grad1"`
	Grad2   [][]lightlyNumber `json:"grad2"`
}

// lightlyNumber is a float the script writes as a number, or as "inf", "-inf" or "nan".
type lightlyNumber float64

func (n *lightlyNumber) UnmarshalJSON(b []byte) error {
	var s string
	if json.Unmarshal(b, &s) == nil {
		v, err := strconv.ParseFloat(s, 64)
		*n = lightlyNumber(v)
		return err
	}
	var v float64
	err := json.Unmarshal(b, &v)
	*n = lightlyNumber(v)
	return err
}

// runLightly evaluates the cases in one run of lightly_losses.py.
func runLightly(t *testing.T, python string, cases []lightlyCase) []lightlyResult {
	t.Helper()
	in, err := json.Marshal(cases)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(python, filepath.Join("testdata", "lightly_losses.py"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("lightly_losses.py with %s: %v\n%s", python, err, stderr.String())
	}
	var res []lightlyResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("lightly_losses.py's output: %v", err)
	}
	if len(res) != len(cases) {
		t.Fatalf("lightly_losses.py answered %d cases of %d", len(res), len(cases))
	}
	for i := range res {
		if res[i].Version != lightlyVersion {
			t.Fatalf("lightly %s, want %s: make deps-lightly installs it", res[i].Version, lightlyVersion)
		}
	}
	return res
}

// graphLossAndGrad evaluates cfg's loss graph (what the training step builds, through
// LossGraph) and its gradients in dtype, on inputs already representable in it.
func graphLossAndGrad(t *testing.T, backend compute.Backend, cfg LossConfig, dtype dtypes.DType, z1, z2 [][]float64) (loss float64, g1, g2 []float64) {
	t.Helper()
	e, err := NewExec(backend, func(a, b *Node) []*Node {
		nodes := LossGraph(a, b, cfg)
		g := Gradient(nodes.Loss, a, b)
		return []*Node{ConvertDType(nodes.Loss, dtypes.Float64), ConvertDType(g[0], dtypes.Float64), ConvertDType(g[1], dtypes.Float64)}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Finalize()
	n, d := len(z1), len(z1[0])
	input := func(z [][]float64) *tensors.Tensor {
		flat := flatten(z, d)
		if dtype == dtypes.Float64 {
			return tensors.FromFlatDataAndDimensions(flat, n, d)
		}
		f32 := make([]float32, len(flat))
		for i, v := range flat {
			f32[i] = float32(v)
		}
		return tensors.FromFlatDataAndDimensions(f32, n, d)
	}
	out, err := e.Call(input(z1), input(z2))
	if err != nil {
		t.Fatal(err)
	}
	return tensors.ToScalar[float64](out[0]), tensors.MustCopyFlatData[float64](out[1]), tensors.MustCopyFlatData[float64](out[2])
}

// lightlyInputs are the batches the losses are compared on: random ones and ones chosen to
// break a careless implementation.
type lightlyInput struct {
	name   string
	tau    float64
	sigma  float64
	z1, z2 [][]float64
}

func lightlyInputs() []lightlyInput {
	r := rand.New(rand.NewPCG(42, 17))
	var in []lightlyInput
	add := func(name string, tau, sigma float64, z1, z2 [][]float64) {
		in = append(in, lightlyInput{name, tau, sigma, z1, z2})
	}
	// Random batches, at the paper's temperatures and at the projection's width.
	add("random/N8/D16/tau0.07", 0.07, 0.5, randomEmbeddings(r, 8, 16, 1), randomEmbeddings(r, 8, 16, 1))
	add("random/N32/D128/tau0.1", 0.1, 0.5, randomEmbeddings(r, 32, 128, 1), randomEmbeddings(r, 32, 128, 1))
	add("random/N5/D3/tau0.5/rows-of-unequal-norms", 0.5, 0.5, scaleRows(randomEmbeddings(r, 5, 3, 1), 1e-3, 1e3), scaleRows(randomEmbeddings(r, 5, 3, 1), 1e2, 1e-2))
	// Batch 2: each anchor has two negatives.
	add("batch2/D4/tau0.1", 0.1, 0.5, randomEmbeddings(r, 2, 4, 1), randomEmbeddings(r, 2, 4, 1))
	z1, z2 := alignedEmbeddings(r, 2, 8)
	add("batch2/aligned/tau0.07", 0.07, 0.5, z1, z2)
	// Tiny τ: logits of ±1000 overflow exp in float64 and float32 alike, and the aligned pairs
	// make DCL strongly negative.
	z1, z2 = alignedEmbeddings(r, 6, 8)
	add("tiny-tau/aligned/tau0.001", 0.001, 0.5, z1, z2)
	add("tiny-tau/random/tau0.002", 0.002, 0.5, randomEmbeddings(r, 6, 8, 1), randomEmbeddings(r, 6, 8, 1))
	// Huge τ: every logit is near 0 and the loss near log(2N-2) (DCL) or log(2N-1) (InfoNCE).
	add("huge-tau/tau1e4", 1e4, 0.5, randomEmbeddings(r, 6, 8, 1), randomEmbeddings(r, 6, 8, 1))
	// Near-duplicate rows: two images whose views differ by 1e-6, positives equal to 1e-7,
	// so negatives are as similar as positives (a mask that let the wrong entry through, or
	// a softmax that is not stabilised, shows here).
	base := randomEmbeddings(r, 5, 8, 1)
	z1, z2 = perturb(r, base, 1e-7), perturb(r, base, 1e-7)
	z1[3], z2[3] = perturb(r, base[:1], 1e-6)[0], perturb(r, base[:1], 1e-6)[0]
	add("near-duplicates/tau0.07", 0.07, 0.5, z1, z2)
	add("near-duplicates/tau0.01/sigma0.05", 0.01, 0.05, perturb(r, base, 1e-7), perturb(r, base, 1e-7))
	// A sharp DCLW weight: σ = 0.02 makes the softmax of the positives' similarities nearly
	// one-hot, so the weights reach 2 - N and 2.
	z1, z2 = alignedEmbeddings(r, 8, 4)
	add("sharp-weights/sigma0.02", 0.1, 0.02, z1, z2)
	return in
}

func scaleRows(z [][]float64, a, b float64) [][]float64 {
	for i := range z {
		s := a
		if i%2 == 1 {
			s = b
		}
		for j := range z[i] {
			z[i][j] *= s
		}
	}
	return z
}

func perturb(r *rand.Rand, z [][]float64, eps float64) [][]float64 {
	out := make([][]float64, len(z))
	for i := range z {
		out[i] = make([]float64, len(z[i]))
		for j := range z[i] {
			out[i][j] = z[i][j] + eps*r.NormFloat64()
		}
	}
	return out
}

func roundToFloat32(z [][]float64) [][]float64 {
	out := make([][]float64, len(z))
	for i := range z {
		out[i] = make([]float64, len(z[i]))
		for j, v := range z[i] {
			out[i][j] = float64(float32(v))
		}
	}
	return out
}

// maxAbsDiff is max |a-b| and max |b| over the entries.
func maxAbsDiff(a []float64, b [][]lightlyNumber) (diff, scale float64) {
	k := 0
	for _, row := range b {
		for _, v := range row {
			diff = max(diff, math.Abs(a[k]-float64(v)))
			scale = max(scale, math.Abs(float64(v)))
			k++
		}
	}
	return diff, scale
}

// TestLossMatchesLightly compares our InfoNCE, DCL and DCLW losses and their gradients with
// lightly's NTXentLoss, DCLLoss and DCLWLoss (lightly 1.6.0, its loss code run by Debian's
// PyTorch) on random and adversarial batches, in float64 and in float32.
//
// The definitions agree on what is compared, and where they could differ:
//   - Reduction: lightly returns the mean over the 2N anchors (DCLLoss: 0.5·(mean over view-1
//     anchors + mean over view-2 anchors); NTXentLoss: cross-entropy over the 2N rows), our
//     default (Mean); the paper's Σ (our Sum) has no lightly counterpart.
//   - Negatives: for anchor (k, i) lightly's DCLLoss takes sim_00 and sim_01 without their
//     diagonals, both views of every j ≠ i, 2N-2 of them, as ours (DESIGN.md). NTXentLoss
//     keeps the positive in the denominator (row i of logits_01 whole), as our InfoNCE.
//   - gather_distributed: lightly can gather negatives across processes; the comparison runs
//     one process (gather_distributed=False), the only form ours has.
//   - DCLW's weight: lightly's negative_mises_fisher_weights is w = 2 - N·softmax(<z1,z2>/σ)
//     over the N images, from the L2-normalised views, as ours, and it always detaches it
//     (torch.tensor copies it): compared with our default; our WeightGrad option has no
//     lightly counterpart (TestLossGradientMatchesFiniteDifferences checks it).
//   - Batch 1: lightly's DCL has no negatives and returns -inf (NTXentLoss returns 0); ours
//     refuses a batch of fewer than 2 view pairs with an error, as training does.
//
// In float64 ours is checked against lightly's float64 to 1e-9 relative (the loss) and 1e-9 of
// the largest gradient entry. In float32 ours is checked against lightly's float64 on the same
// float32 inputs, to 1e-6 relative times max(1, 1/τ): the logits are cosines times 1/τ, so
// float32's rounding of the cosines grows by 1/τ in the loss and its gradient whatever the
// implementation; where float32 cannot hold a value at all (InfoNCE's gradient on easy
// positives at τ = 0.001, of order exp(-500), is 0 in float32), within 4× lightly's own
// float32 error.
func TestLossMatchesLightly(t *testing.T) {
	python := lightlyPython()
	if python == "" {
		t.Skip("lightly " + lightlyVersion + " not installed (make deps-lightly makes .cache/lightly; DCL_LIGHTLY_PYTHON names another): the comparison with lightly's losses is skipped")
	}
	backend := newTestBackend(t)
	kinds := []struct {
		ours    LossKind
		lightly string
	}{{InfoNCE, "ntxent"}, {DCL, "dcl"}, {DCLW, "dclw"}}
	inputs := lightlyInputs()

	type job struct {
		in    lightlyInput
		kind  LossKind
		dtype dtypes.DType
		// ref is lightly in float64 on the same inputs; own is lightly in dtype.
		ref, own int
	}
	var cases []lightlyCase
	var jobs []job
	for _, in := range inputs {
		for _, k := range kinds {
			for _, dtype := range []dtypes.DType{dtypes.Float64, dtypes.Float32} {
				z1, z2 := in.z1, in.z2
				if dtype == dtypes.Float32 {
					z1, z2 = roundToFloat32(z1), roundToFloat32(z2)
				}
				j := job{in: in, kind: k.ours, dtype: dtype, ref: len(cases), own: len(cases)}
				j.in.z1, j.in.z2 = z1, z2
				cases = append(cases, lightlyCase{Loss: k.lightly, Tau: in.tau, Sigma: in.sigma, DType: "float64", Z1: z1, Z2: z2})
				if dtype == dtypes.Float32 {
					j.own = len(cases)
					cases = append(cases, lightlyCase{Loss: k.lightly, Tau: in.tau, Sigma: in.sigma, DType: "float32", Z1: z1, Z2: z2})
				}
				jobs = append(jobs, j)
			}
		}
	}
	// Batch 1, where lightly's DCL has no negatives.
	one := randomEmbeddings(rand.New(rand.NewPCG(1, 1)), 1, 4, 1)
	batch1 := len(cases)
	for _, k := range kinds {
		cases = append(cases, lightlyCase{Loss: k.lightly, Tau: 0.1, Sigma: 0.5, DType: "float64", Z1: one, Z2: one})
	}
	res := runLightly(t, python, cases)

	for _, j := range jobs {
		t.Run(fmt.Sprintf("%s/%s/%s", j.kind, j.in.name, j.dtype), func(t *testing.T) {
			cfg := LossConfig{Kind: j.kind, Temperature: j.in.tau, Params: registry.Values{ParamSigma: j.in.sigma}}
			loss, g1, g2 := graphLossAndGrad(t, backend, cfg, j.dtype, j.in.z1, j.in.z2)
			ref, own := res[j.ref], res[j.own]
			// tol is what our value may differ from lightly's float64 by: 1e-9 of scale in
			// float64; in float32 1e-6 of it times the logits' largest magnitude 1/τ (float32
			// rounds the cosines to a relative 6e-8, and the logits multiply that by 1/τ), or
			// 4× lightly's own float32 error where float32 cannot resolve the value at all.
			tol := func(scale, lightlyErr float64) float64 {
				if j.dtype == dtypes.Float64 {
					return 1e-9 * scale
				}
				return max(1e-6*scale*max(1, 1/j.in.tau), 4*lightlyErr)
			}
			want := float64(ref.Loss)
			if d, allowed := math.Abs(loss-want), tol(math.Abs(want), math.Abs(float64(own.Loss)-want)); !(d <= allowed) {
				t.Errorf("loss %.12g, lightly %.12g: differs by %.3g (relative %.3g), allowed %.3g", loss, want, d, d/math.Abs(want), allowed)
			}
			for v, g := range [][]float64{g1, g2} {
				rg, og := ref.Grad1, own.Grad1
				if v == 1 {
					rg, og = ref.Grad2, own.Grad2
				}
				d, scale := maxAbsDiff(g, rg)
				var ownErr float64
				if j.dtype == dtypes.Float32 {
					ownErr, _ = maxAbsDiff(flattenLightly(og), rg)
				}
				if allowed := tol(scale, ownErr); !(d <= allowed) {
					t.Errorf("gradient of z%d differs from lightly's by %.3g (largest entry %.3g, relative %.3g), allowed %.3g", v+1, d, scale, d/scale, allowed)
				}
			}
		})
	}

	t.Run("batch1", func(t *testing.T) {
		if l := float64(res[batch1].Loss); l != 0 {
			t.Errorf("lightly's NTXentLoss of one pair = %g, want 0 (the positive is the only logit)", l)
		}
		for i, k := range kinds[1:] {
			if l := float64(res[batch1+1+i].Loss); !math.IsInf(l, -1) {
				t.Errorf("lightly's %s of one pair = %g, want -inf (no negatives)", k.lightly, l)
			}
		}
		for _, k := range kinds {
			_, err := LossAndGrad(backend, one, one, LossConfig{Kind: k.ours, Temperature: 0.1})
			if err == nil || !strings.Contains(err.Error(), "at least 2 view pairs") {
				t.Errorf("%s of one pair: error %v, want one asking for at least 2 view pairs", k.ours, err)
			}
		}
	})
}

func flattenLightly(rows [][]lightlyNumber) []float64 {
	var out []float64
	for _, r := range rows {
		for _, v := range r {
			out = append(out, float64(v))
		}
	}
	return out
}
