package trainstep

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// EncoderLayer is one convolution or dense layer of a checkpoint's encoder, in the order the
// checkpoint stores them, with the batch norm that follows it.
type EncoderLayer struct {
	Scope string
	// Dims are the weights' dimensions: [k, k, in, out] for a convolution, [in, out] for a
	// dense layer.
	Dims []int
	// BatchNorm is the running statistics of the batch norm after the layer; nil where none
	// follows it or its statistics are not float32.
	BatchNorm *BatchNormStats
}

// FanIn is the number of products each output of the layer sums: every dimension but the
// last.
func (l EncoderLayer) FanIn() int {
	k := 1
	for _, d := range l.Dims[:len(l.Dims)-1] {
		k *= d
	}
	return k
}

// BatchNormStats are a batch norm's running mean and variance, the statistics inference
// normalises with, and the ε added to the variance.
type BatchNormStats struct {
	Mean, Variance []float32
	Epsilon        float64
}

// EncoderLayers lists the convolution and dense layers of the checkpoint's model up to the
// feature asked for: the backbone's, with the projector's for Projection.
func (c *Checkpoint) EncoderLayers(feature Feature) ([]EncoderLayer, error) {
	byScope := map[string]map[string]VariableEntry{}
	for _, v := range c.Header.Variables {
		if byScope[v.Scope] == nil {
			byScope[v.Scope] = map[string]VariableEntry{}
		}
		byScope[v.Scope][v.Name] = v
	}
	var out []EncoderLayer
	for _, v := range c.Header.Variables {
		// The model's weights (not the optimiser's copies, under their own scope).
		if v.Name != weightsName || !strings.HasPrefix(v.Scope, "/"+modelScope+"/") {
			continue
		}
		if strings.HasPrefix(v.Scope, "/"+modelScope+"/"+projectorScope) && feature != Projection {
			continue
		}
		if len(v.Dims) < 2 {
			return nil, fmt.Errorf("checkpoint %s: weights %s have dimensions %v", c.Path, v.Scope, v.Dims)
		}
		l := EncoderLayer{Scope: v.Scope, Dims: v.Dims}
		if bn, ok := byScope[batchNormScopeOf(v.Scope)]; ok {
			stats, err := c.batchNormStats(bn)
			if err != nil {
				return nil, fmt.Errorf("checkpoint %s: %w", c.Path, err)
			}
			l.BatchNorm = stats
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("checkpoint %s: no convolution or dense weights under %q", c.Path, modelScope)
	}
	return out, nil
}

// batchNormScopeOf is the scope of the batch norm that follows the sum layer in scope: the
// layers name them in pairs (conv/bn, conv1/bn1, shortcut_conv/shortcut_bn, fc1/bn1).
func batchNormScopeOf(scope string) string {
	i := strings.LastIndex(scope, "/")
	last := scope[i+1:]
	last = strings.Replace(strings.Replace(last, "conv", "bn", 1), "fc", "bn", 1)
	return scope[:i+1] + last
}

// batchNormStats reads a batch norm's running statistics from its variables; nil when they
// are missing or not float32.
func (c *Checkpoint) batchNormStats(vars map[string]VariableEntry) (*BatchNormStats, error) {
	mean, ok1 := vars[bnMeanName]
	variance, ok2 := vars[bnVarianceName]
	if !ok1 || !ok2 || mean.DType != "Float32" && mean.DType != "float32" {
		return nil, nil
	}
	mu, err := c.float32Values(mean)
	if err != nil {
		return nil, err
	}
	v, err := c.float32Values(variance)
	if err != nil {
		return nil, err
	}
	if len(mu) != len(v) || len(mu) == 0 {
		return nil, fmt.Errorf("batch norm %s: %d means and %d variances", mean.Scope, len(mu), len(v))
	}
	return &BatchNormStats{Mean: mu, Variance: v, Epsilon: bnEpsilon}, nil
}

func (c *Checkpoint) float32Values(e VariableEntry) ([]float32, error) {
	raw := c.raw(e)
	if len(raw)%4 != 0 {
		return nil, fmt.Errorf("variable %s/%s: %d bytes are not float32 values", e.Scope, e.Name, len(raw))
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, nil
}
