// Package mutate is the project's own fuzzing inside go test: Run feeds a check inputs made
// by mutating seed inputs, for a bounded time, so that every `go test` (make test included)
// tries new malformed inputs on the parsers of untrusted data without the native fuzzer's
// instrumented builds. The native Fuzz targets stay for long hunts (go test -fuzz).
//
// The mutations are seeded from the clock; a failure names its seed and input, and
// DCL_MUTATE_SEED=N replays the run that found it. DCL_MUTATE_BUDGET (a duration) sets the
// time a Run spends, by default 1 s (200 ms with -short).
package mutate

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// Budget is the time a Run spends mutating.
func Budget() time.Duration {
	if s := os.Getenv("DCL_MUTATE_BUDGET"); s != "" {
		if d, err := time.ParseDuration(s); err == nil {
			return d
		}
	}
	if testing.Short() {
		return 200 * time.Millisecond
	}
	return time.Second
}

// Run calls check on every seed, then on mutations of them until Budget has passed, and
// fails t on the first input check returns an error for or panics on, naming the input and
// the seed that replays the run. It returns the number of inputs tried.
func Run(t testing.TB, seeds [][]byte, check func(data []byte) error) int {
	t.Helper()
	if len(seeds) == 0 {
		t.Fatal("mutate.Run: no seeds")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DCL_MUTATE_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("DCL_MUTATE_SEED=%q: %v", s, err)
		}
	}
	rng := rand.New(rand.NewPCG(seed, 0x6d757461746521))
	deadline := time.Now().Add(Budget())
	tried := 0
	for i := 0; i < len(seeds) || time.Now().Before(deadline); i++ {
		var data []byte
		if i < len(seeds) {
			data = append([]byte(nil), seeds[i]...)
		} else {
			data = Mutate(rng, seeds[rng.IntN(len(seeds))], seeds)
		}
		tried++
		if err := try(check, data); err != nil {
			shown := data
			if len(shown) > 2048 {
				shown = shown[:2048]
			}
			t.Fatalf("input %d (%d bytes; DCL_MUTATE_SEED=%d replays it): %v\ninput: %q", i, len(data), seed, err, shown)
		}
	}
	t.Logf("%d inputs tried in %v (DCL_MUTATE_SEED=%d)", tried, Budget(), seed)
	return tried
}

// try runs check, turning a panic into an error.
func try(check func([]byte) error, data []byte) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return check(data)
}

// interesting are byte values and whole numbers that parsers meet at their edges.
var (
	interestingBytes = []byte{0, 1, 0x7f, 0x80, 0xff, '"', '\\', '\n', '.', '/', ':', '{', '}', '[', ']', '-'}
	interestingInts  = []uint64{0, 1, 0x7f, 0x80, 0xff, 0x7fff, 0x8000, 0xffff, 0x7fffffff, 0x80000000, 0xffffffff, 1<<63 - 1, 1 << 63, 1<<64 - 1}
)

// Mutate returns a copy of data with one to four random changes: a bit flipped, a byte set
// (at random or to an edge value), bytes inserted, deleted or repeated, the end cut, a
// whole number at an edge written over 2, 4 or 8 bytes, or a piece of another input spliced in.
func Mutate(rng *rand.Rand, data []byte, others [][]byte) []byte {
	out := append([]byte(nil), data...)
	for range 1 + rng.IntN(4) {
		if len(out) == 0 {
			out = append(out, byte(rng.UintN(256)))
			continue
		}
		at := rng.IntN(len(out))
		switch rng.IntN(9) {
		case 0:
			out[at] ^= 1 << rng.UintN(8)
		case 1:
			out[at] = byte(rng.UintN(256))
		case 2:
			out[at] = interestingBytes[rng.IntN(len(interestingBytes))]
		case 3:
			n := 1 + rng.IntN(8)
			ins := make([]byte, n)
			for i := range ins {
				ins[i] = byte(rng.UintN(256))
			}
			out = append(out[:at], append(ins, out[at:]...)...)
		case 4:
			end := min(len(out), at+1+rng.IntN(16))
			out = append(out[:at], out[end:]...)
		case 5:
			end := min(len(out), at+1+rng.IntN(16))
			piece := append([]byte(nil), out[at:end]...)
			out = append(out[:end], append(piece, out[end:]...)...)
		case 6:
			out = out[:at]
		case 7:
			var b [8]byte
			v := interestingInts[rng.IntN(len(interestingInts))]
			if rng.IntN(2) == 0 {
				binary.LittleEndian.PutUint64(b[:], v)
			} else {
				binary.BigEndian.PutUint64(b[:], v)
			}
			w := []int{2, 4, 8}[rng.IntN(3)]
			copy(out[at:], b[8-w:])
		case 8:
			other := others[rng.IntN(len(others))]
			if len(other) == 0 {
				continue
			}
			from := rng.IntN(len(other))
			piece := other[from:min(len(other), from+1+rng.IntN(64))]
			out = append(out[:at], append(append([]byte(nil), piece...), out[at:]...)...)
		}
	}
	return out
}
