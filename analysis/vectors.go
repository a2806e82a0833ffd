package analysis

import (
	"fmt"
	"math"
	"strings"
)

// Vectors is a block of vectors of one dimension, stored row after row in one slice so that a
// block is one operand of a matrix multiply.
type Vectors struct {
	Dim  int
	Data []float32 // len(Data) == Len()*Dim
}

// Len returns the number of vectors.
func (v Vectors) Len() int {
	if v.Dim == 0 {
		return 0
	}
	return len(v.Data) / v.Dim
}

// Row returns vector i, sharing memory with v.
func (v Vectors) Row(i int) []float32 { return v.Data[i*v.Dim : (i+1)*v.Dim : (i+1)*v.Dim] }

// Slice returns vectors [from, to), sharing memory with v.
func (v Vectors) Slice(from, to int) Vectors {
	return Vectors{Dim: v.Dim, Data: v.Data[from*v.Dim : to*v.Dim : to*v.Dim]}
}

// VectorsFromRows copies rows into one block. Rows of different lengths are an error naming
// source and the first row that differs, as is a non-finite value.
func VectorsFromRows(rows [][]float32, source string) (Vectors, error) {
	if len(rows) == 0 {
		return Vectors{}, nil
	}
	dim := len(rows[0])
	if dim == 0 {
		return Vectors{}, fmt.Errorf("%s: row 0: empty vector", source)
	}
	v := Vectors{Dim: dim, Data: make([]float32, 0, len(rows)*dim)}
	for i, r := range rows {
		if len(r) != dim {
			return Vectors{}, fmt.Errorf("%s: row %d: vector has %d values, row 0 has %d (mixed lengths)", source, i, len(r), dim)
		}
		v.Data = append(v.Data, r...)
	}
	return v, v.Validate(source)
}

// Validate checks that the data holds whole vectors of finite values; errors name source and
// the row.
func (v Vectors) Validate(source string) error {
	if v.Dim <= 0 {
		if len(v.Data) == 0 {
			return nil
		}
		return fmt.Errorf("%s: %d values with vector dimension %d", source, len(v.Data), v.Dim)
	}
	if len(v.Data)%v.Dim != 0 {
		return fmt.Errorf("%s: %d values are not whole vectors of dimension %d", source, len(v.Data), v.Dim)
	}
	for i, x := range v.Data {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("%s: row %d: non-finite value %v at position %d", source, i/v.Dim, x, i%v.Dim)
		}
	}
	return nil
}

// Metric is how kNN measures similarity; larger is nearer.
type Metric int

const (
	// Cosine is the dot product of L2-normalised vectors (the weighted kNN's of InstDisc and MoCo). The
	// cosine similarity of a zero vector with anything is defined as 0: a zero vector is left
	// at zero rather than divided by its zero norm.
	Cosine Metric = iota
	// Dot is the raw dot product.
	Dot
	// Euclidean is the negated squared Euclidean distance, -|q-b|², so nearer is larger.
	Euclidean
)

var metricNames = [...]string{Cosine: "cosine", Dot: "dot", Euclidean: "euclidean"}

func (m Metric) String() string {
	if m < 0 || int(m) >= len(metricNames) {
		return fmt.Sprintf("Metric(%d)", int(m))
	}
	return metricNames[m]
}

// ParseMetric reads a metric as the --metric flag spells it.
func ParseMetric(s string) (Metric, error) {
	for m, name := range metricNames {
		if strings.EqualFold(s, name) {
			return Metric(m), nil
		}
	}
	return 0, fmt.Errorf("metric %q: want one of %s", s, strings.Join(metricNames[:], ", "))
}

// MarshalText writes the metric's name, so it reads well in JSON.
func (m Metric) MarshalText() ([]byte, error) {
	if m < 0 || int(m) >= len(metricNames) {
		return nil, fmt.Errorf("unknown metric %d", int(m))
	}
	return []byte(m.String()), nil
}

// UnmarshalText parses a metric's name.
func (m *Metric) UnmarshalText(b []byte) error {
	v, err := ParseMetric(string(b))
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// Prepared is a block of vectors made ready for one metric: a copy, L2-normalised for Cosine,
// with squared norms for Euclidean. Prepare a bank block once and search it with many query
// blocks.
type Prepared struct {
	Metric  Metric
	Vectors Vectors
	SqNorms []float32 // Euclidean only: |v_i|²
}

// Prepare copies v and readies it for metric m.
func Prepare(v Vectors, m Metric) Prepared {
	p := Prepared{Metric: m, Vectors: Vectors{Dim: v.Dim, Data: make([]float32, len(v.Data))}}
	copy(p.Vectors.Data, v.Data)
	n := v.Len()
	switch m {
	case Cosine:
		for i := range n {
			normalize(p.Vectors.Row(i))
		}
	case Euclidean:
		p.SqNorms = make([]float32, n)
		for i := range n {
			p.SqNorms[i] = float32(sqNorm(p.Vectors.Row(i)))
		}
	}
	return p
}

// Len returns the number of vectors.
func (p Prepared) Len() int { return p.Vectors.Len() }

// Slice returns prepared vectors [from, to), sharing memory with p.
func (p Prepared) Slice(from, to int) Prepared {
	s := Prepared{Metric: p.Metric, Vectors: p.Vectors.Slice(from, to)}
	if p.SqNorms != nil {
		s.SqNorms = p.SqNorms[from:to:to]
	}
	return s
}

// sqNorm accumulates in float64 so that the norm of a long vector does not depend on
// float32 rounding.
func sqNorm(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return s
}

// normalize scales x to unit L2 norm in place; a zero vector stays zero (its cosine with
// anything is then 0).
func normalize(x []float32) {
	n := math.Sqrt(sqNorm(x))
	if n == 0 {
		return
	}
	inv := 1 / n
	for i, v := range x {
		x[i] = float32(float64(v) * inv)
	}
}
