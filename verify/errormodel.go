package verify

import (
	"context"
	"math"

	"github.com/dcl-beam/dcl-beam/trainstep"
)

// How far apart two correct implementations of an encoder may embed the same image: the
// tolerance that CUDA's embeddings are held to against the CPU's (dcl agree), derived from the
// checkpoint rather than guessed.
//
// # The derivation
//
// Both backends compute the same function in floating point; they differ only in rounding
// (the order of the sums, the algorithms, the precision of the operands). The error of each
// against exact arithmetic is modelled, and two independent errors add in quadrature.
//
// One layer. A convolution or dense layer computes sums y = Σ_{i=1..K} w_i x_i of K products
// (K = k·k·C_in for a k×k convolution, the input width for a dense layer). With rounding to
// nearest, each addition of a recursive sum adds a relative error δ_j, |δ_j| ≤ u, and the
// computed sum is y + Σ_j s_j δ_j to first order, s_j the j-th partial sum (Higham, Accuracy
// and Stability of Numerical Algorithms, §4.2). Rounding errors behave as independent, zero-
// mean variables of variance u²/3 (the model of Higham and Mary's probabilistic error
// analysis, SIAM J. Sci. Comput. 2019), and with products of zero mean and variance σ²,
// E[s_j²] = jσ², so E[(Σ_j s_j δ_j)²] = (u²/3)·σ²·K²/2 against E[y²] = Kσ²: the sum's rms
// relative error is u·sqrt(K/6). Blocked sums (GEMM kernels, Winograd's transformed
// products, cuDNN's and cuBLAS's tiles) add in shorter runs and do no worse. Operands rounded
// before they are multiplied (TF32 keeps 10 of float32's 23 mantissa bits: u_op = 2^-11) give
// each product an independent relative error of variance 2·u_op²/3, an rms relative error of
// u_op·sqrt(2/3) for the sum. The operations after the sum (batch norm's multiply and add,
// the residual add, the stored float32 value) round a few more times: 4 roundings, u/sqrt(3)
// rms each, are counted per layer.
//
// Batch norm. In inference, y_c = γ_c (x_c − μ_c)/sqrt(σ_c² + ε) + β_c. A relative error ε_x of
// x_c, whose rms over the data is sqrt(μ_c² + σ_c²), becomes ε_x·sqrt(μ_c² + σ_c²)/sqrt(σ_c² + ε)
// relative to the normalised value: the subtraction cancels what the mean holds. The gain of
// a layer is that factor's rms over its channels, from the checkpoint's running averages
// (the statistics inference uses). A sum without a batch norm after it has gain 1.
//
// Through the network. A relative perturbation of one layer's output reaches the features
// with a gain of about 1: ReLU, pooling and batch-normalised layers neither shrink nor grow a
// perturbation that is not aligned with the weights (rounding errors are not). Errors of
// different layers are independent, so the features' rms relative error is
//
//	E = sqrt( Σ_l gain_l² · (u²·K_l/6 + 2·u_op²/3 + 4·u²/3) )
//
// over the sum layers l up to the features asked for (the backbone's, or the projector's
// too), plus the global average pool (a sum of at most 64 positions).
//
// The tolerance. For backends a and b, the rms relative difference of their embeddings is
// sqrt(E_a² + E_b²). One row's difference ‖f_a − f_b‖/‖f_b‖ averages D components' errors
// (D ≥ 64), so rows spread little around the rms; what the model leaves out (the gain-of-one
// approximation, partial sums of products that do not have zero mean, Winograd's and FFT
// algorithms' transforms, which scale the sums' errors by small constants) is allowed for by
// ToleranceFactor: a row may differ by at most ToleranceFactor·sqrt(E_a² + E_b²). The CPU
// backend is checked against this model (against a reference that sums in float64:
// EncoderOptions.Float64), which is how the factor was chosen and how a change that breaks
// the model would show.

// Arithmetic is how a backend rounds an encoder's arithmetic.
type Arithmetic struct {
	Name string `json:"name"`
	// U is the unit roundoff of the sums and stored values.
	U float64 `json:"u"`
	// OperandU is the rounding of products' operands before they are multiplied (0: none).
	OperandU float64 `json:"operand_u,omitempty"`
}

// The arithmetics of the backends: float32 (the CPU backend; CUDA with TF32 off), TF32 (CUDA's
// matrix products and convolutions on tensor cores: float32 sums of products of operands
// rounded to a 10-bit mantissa), and the float64 reference (trainstep.EncoderOptions.Float64: the
// sums in float64, what follows them in float32).
var (
	Float32Arithmetic    = Arithmetic{Name: "float32", U: 0x1p-24}
	TF32Arithmetic       = Arithmetic{Name: "tf32", U: 0x1p-24, OperandU: 0x1p-11}
	Float64RefArithmetic = Arithmetic{Name: "float64-sums", U: 0x1p-24}
)

// EncoderArithmetic is the arithmetic an encoder computes in on CUDA (onCUDA) or the CPU
// with precision p: the encoder's variables and activations are float32 in every precision,
// and CUDA runs its convolutions and matrix products on TF32 tensor cores where p allows it
// (gpu.Options.TF32); the CPU always computes in float32.
func EncoderArithmetic(onCUDA bool, p trainstep.Precision) Arithmetic {
	if onCUDA && p.AllowsTF32() {
		return TF32Arithmetic
	}
	return Float32Arithmetic
}

// ToleranceFactor is how many times the modelled rms difference one row may differ by (see
// the derivation above).
const ToleranceFactor = 10

// poolPositions bounds the positions the global average pool sums (8×8 at most for the
// models at their training sizes: 4×4 for resnet18-cifar at 32 px, 7×7 for resnet50 at 224).
const poolPositions = 64

// LayerError is one sum layer of the error model.
type LayerError struct {
	Scope string  `json:"scope"`
	K     int     `json:"k"`    // products per output
	Gain  float64 `json:"gain"` // of the batch norm after it (1 without)
}

// ErrorModel is the rounding error model of an encoder's checkpoint.
type ErrorModel struct {
	Checkpoint string            `json:"checkpoint"`
	Feature    trainstep.Feature `json:"feature"`
	Layers     []LayerError      `json:"layers"`
}

// NewErrorModel builds the error model of the checkpoint at path (a file or a run folder)
// for the feature embedded: the backbone's layers, with the projector's for Projection.
func NewErrorModel(ctx context.Context, path string, feature trainstep.Feature) (*ErrorModel, error) {
	path, err := trainstep.ResolveCheckpoint(ctx, path)
	if err != nil {
		return nil, err
	}
	ckpt, err := trainstep.ReadCheckpoint(ctx, path)
	if err != nil {
		return nil, err
	}
	layers, err := ckpt.EncoderLayers(feature)
	if err != nil {
		return nil, err
	}
	m := &ErrorModel{Checkpoint: path, Feature: feature}
	for _, l := range layers {
		m.Layers = append(m.Layers, LayerError{Scope: l.Scope, K: l.FanIn(), Gain: batchNormGain(l.BatchNorm)})
	}
	return m, nil
}

// batchNormGain is the rms over channels of sqrt(μ² + σ²)/sqrt(σ² + ε) for a batch norm's
// running mean μ and variance σ²; 1 for a layer with no batch norm after it.
func batchNormGain(bn *trainstep.BatchNormStats) float64 {
	if bn == nil {
		return 1
	}
	var sum float64
	for i := range bn.Mean {
		m, s2 := float64(bn.Mean[i]), max(0, float64(bn.Variance[i]))
		g := math.Sqrt(m*m+s2) / math.Sqrt(s2+bn.Epsilon)
		sum += g * g
	}
	return math.Sqrt(sum / float64(len(bn.Mean)))
}

// RMS is the modelled rms relative error of the embeddings computed in arithmetic a.
func (m *ErrorModel) RMS(a Arithmetic) float64 {
	perLayer := func(k int) float64 {
		return a.U*a.U*float64(k)/6 + 2*a.OperandU*a.OperandU/3 + 4*a.U*a.U/3
	}
	if a.Name == Float64RefArithmetic.Name {
		// The sums in float64 (u = 2^-53: nothing at this scale); what follows them rounds
		// in float32.
		perLayer = func(int) float64 { return 4 * a.U * a.U / 3 }
	}
	var sum float64
	for _, l := range m.Layers {
		sum += l.Gain * l.Gain * perLayer(l.K)
	}
	sum += perLayer(poolPositions)
	return math.Sqrt(sum)
}

// Tolerance is the largest relative difference ‖f_a − f_b‖/‖f_b‖ one row of embeddings
// computed in arithmetics a and b may have.
func (m *ErrorModel) Tolerance(a, b Arithmetic) float64 {
	ea, eb := m.RMS(a), m.RMS(b)
	return ToleranceFactor * math.Sqrt(ea*ea+eb*eb)
}
