package augment

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
)

// The documented derivation, written out independently of ViewSeed.
func TestViewSeedDerivation(t *testing.T) {
	tests := []struct {
		seed        uint64
		key         string
		epoch, view int
	}{
		{0, "", 0, 0},
		{42, "cifar10/train/data_batch_1.bin#123", 7, 1},
		{math.MaxUint64, "ünïcode/key", 1 << 30, 2},
	}
	for _, tt := range tests {
		var msg []byte
		msg = append(msg, "dcl-beam/augment/v1"...)
		msg = append(msg, 0)
		msg = binary.LittleEndian.AppendUint64(msg, tt.seed)
		msg = binary.LittleEndian.AppendUint64(msg, uint64(tt.epoch))
		msg = binary.LittleEndian.AppendUint64(msg, uint64(tt.view))
		msg = binary.LittleEndian.AppendUint64(msg, uint64(len(tt.key)))
		msg = append(msg, tt.key...)
		sum := sha256.Sum256(msg)
		s1, s2 := ViewSeed(tt.seed, tt.key, tt.epoch, tt.view)
		if s1 != binary.LittleEndian.Uint64(sum[:8]) || s2 != binary.LittleEndian.Uint64(sum[8:16]) {
			t.Errorf("ViewSeed%v = %x %x, want the documented SHA-256 words", tt, s1, s2)
		}
		// The stream is math/rand/v2's PCG on those words.
		r := NewRand(tt.seed, tt.key, tt.epoch, tt.view)
		p := rand.NewPCG(s1, s2)
		for range 5 {
			if got, want := r.Uint64(), p.Uint64(); got != want {
				t.Fatalf("Rand stream %x, PCG %x", got, want)
			}
		}
	}
	// Keys are length-prefixed, so ("ab", view) and ("a", …) cannot collide by concatenation.
	a1, _ := ViewSeed(1, "ab", 0, 0)
	b1, _ := ViewSeed(1, "a", 0, 0)
	if a1 == b1 {
		t.Error("different keys gave the same seed")
	}
}

// Golden draws: if any of these change, every view ever generated changes.
func TestRandGolden(t *testing.T) {
	r := NewRand(1, "golden", 2, 1)
	got := []uint64{r.Uint64(), math.Float64bits(r.Float64()), uint64(r.IntN(1000)), math.Float64bits(r.Uniform(0.08, 1))}
	want := []uint64{goldenRand[0], goldenRand[1], goldenRand[2], goldenRand[3]}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("draw %d = %#x, golden %#x", i, got[i], want[i])
		}
	}
}

var goldenRand = [4]uint64{0x5c4c87a256dc9802, 0x3fdc250125fbade8, 0x36b, 0x3fc197c502f76ae8}

func TestIntNUniform(t *testing.T) {
	r := NewRand(9, "intn", 0, 0)
	const n, draws = 7, 70000
	var counts [n]int
	for range draws {
		v := r.IntN(n)
		if v < 0 || v >= n {
			t.Fatalf("IntN(%d) = %d", n, v)
		}
		counts[v]++
	}
	for v, c := range counts {
		if math.Abs(float64(c)-draws/n) > 5*math.Sqrt(draws/n) {
			t.Errorf("IntN(%d) gave %d %d times of %d", n, v, c, draws)
		}
	}
	for range 1000 {
		if f := r.Float64(); f < 0 || f >= 1 {
			t.Fatalf("Float64 = %g", f)
		}
	}
}

// detExp and detLog agree with the math package to a few ulps, and their exact
// bits are pinned so that a change of algorithm shows.
func TestDetExpLog(t *testing.T) {
	ulps := func(a, b float64) int64 {
		d := int64(math.Float64bits(a)) - int64(math.Float64bits(b))
		if d < 0 {
			d = -d
		}
		return d
	}
	r := rand.New(rand.NewPCG(1, 1))
	for range 100000 {
		// math.Exp's amd64 assembly and the portable algorithm differ by up to 2 ulps.
		x := (r.Float64() - 0.5) * 8
		if u := ulps(detExp(x), math.Exp(x)); u > 2 {
			t.Fatalf("detExp(%g) = %g, math.Exp %g (%d ulps)", x, detExp(x), math.Exp(x), u)
		}
		x = (r.Float64() - 0.5) * 200
		if d := math.Abs(detExp(x)/math.Exp(x) - 1); d > 1e-15 {
			t.Fatalf("detExp(%g) = %g, math.Exp %g", x, detExp(x), math.Exp(x))
		}
		y := math.Exp((r.Float64() - 0.5) * 40)
		if u := ulps(detLog(y), math.Log(y)); u > 1 {
			t.Fatalf("detLog(%g) = %g, math.Log %g (%d ulps)", y, detLog(y), math.Log(y), u)
		}
	}
	for _, tt := range []struct {
		give, want float64
		f          func(float64) float64
	}{
		{0, 1, detExp}, {1, math.E, detExp}, {-0.5, 0.6065306597126334, detExp},
		{0.28768207245178085, 1.3333333333333333, detExp},
		{1, 0, detLog}, {4.0 / 3.0, 0.2876820724517809, detLog}, {0.75, -0.2876820724517809, detLog},
	} {
		if got := tt.f(tt.give); got != tt.want {
			t.Errorf("f(%v) = %v, want %v", tt.give, got, tt.want)
		}
	}
	if !math.IsInf(detLog(0), -1) || !math.IsNaN(detLog(-1)) || detExp(-1000) != 0 || !math.IsInf(detExp(1000), 1) {
		t.Error("special cases of detExp/detLog")
	}
}
