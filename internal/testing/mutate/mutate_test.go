package mutate

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// recorder is a testing.TB whose Fatalf ends the Run it is given and keeps the message.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Logf(string, ...any)          {}
func (r *recorder) Fatal(args ...any)            { r.Fatalf("%s", fmt.Sprint(args...)) }
func (r *recorder) Fatalf(f string, args ...any) { r.failed = fmt.Sprintf(f, args...); panic(r) }

func run(t *testing.T, seeds [][]byte, check func([]byte) error) (failed string) {
	r := &recorder{TB: t}
	defer func() {
		if p := recover(); p != nil && p != r {
			panic(p)
		}
		failed = r.failed
	}()
	Run(r, seeds, check)
	return ""
}

// A parser that panics, or errs, on inputs a few mutations away from its seeds is caught
// within the budget, with the input and the seed that replays it; one that never fails is not.
func TestRunFindsWhatBreaksAParser(t *testing.T) {
	t.Setenv("DCL_MUTATE_BUDGET", "2s")
	seeds := [][]byte{[]byte("header:0000;body")}
	planted := func(data []byte) error {
		if i := bytes.IndexByte(data, ':'); i >= 0 && i+1 < len(data) && data[i+1] == 0xff {
			var s []int
			_ = s[len(data)] // the bug: an index out of range
		}
		return nil
	}
	if got := run(t, seeds, planted); !strings.Contains(got, "panic: runtime error: index out of range") || !strings.Contains(got, "DCL_MUTATE_SEED=") {
		t.Errorf("a panic two mutations away: %q", got)
	}
	wrong := func(data []byte) error {
		if len(data) < 8 {
			return errors.New("accepted a short input")
		}
		return nil
	}
	if got := run(t, seeds, wrong); !strings.Contains(got, "accepted a short input") {
		t.Errorf("an error a cut away: %q", got)
	}
	t.Setenv("DCL_MUTATE_BUDGET", "50ms")
	if got := run(t, seeds, func([]byte) error { return nil }); got != "" {
		t.Errorf("a parser that never fails: %q", got)
	}
}
