package registry

import (
	"errors"
	"flag"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/usage"
)

func TestRegisterLookupNamesAndList(t *testing.T) {
	r := New[int]("loss")
	r.Register("dcl", 1)
	r.Register("infonce", 2, "simclr", "nt-xent")
	r.Register("dclw", 3)
	if got := r.Names(); !slices.Equal(got, []string{"dcl", "infonce", "dclw"}) {
		t.Errorf("Names = %v, want registration order", got)
	}
	if got := r.Values(); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("Values = %v", got)
	}
	if v, ok := r.Lookup("infonce"); !ok || v != 2 {
		t.Errorf("Lookup(infonce) = %d, %v", v, ok)
	}
	if _, ok := r.Lookup("simclr"); ok {
		t.Error("Lookup found an alias: configurations hold names")
	}
	if name, v, err := r.Resolve("nt-xent"); err != nil || name != "infonce" || v != 2 {
		t.Errorf("Resolve(nt-xent) = %q, %d, %v", name, v, err)
	}
	if _, _, err := r.Resolve("triplet"); err == nil || err.Error() != `unknown loss "triplet": want dcl, infonce or dclw` {
		t.Errorf("Resolve(triplet) = %v", err)
	}
	for _, tc := range []struct {
		give []string
		want string
	}{{nil, ""}, {[]string{"a"}, "a"}, {[]string{"a", "b"}, "a or b"}, {[]string{"a", "b", "c"}, "a, b or c"}} {
		if got := List(tc.give); got != tc.want {
			t.Errorf("List(%q) = %q, want %q", tc.give, got, tc.want)
		}
	}
	r.Unregister("infonce")
	if _, _, err := r.Resolve("simclr"); err == nil || !slices.Equal(r.Names(), []string{"dcl", "dclw"}) {
		t.Errorf("after Unregister: names %v, alias resolves: %v", r.Names(), err == nil)
	}
}

func TestRegisterPanicsOnATakenName(t *testing.T) {
	for _, tc := range []struct {
		name    string
		aliases []string
	}{{"dcl", nil}, {"dclw", []string{"simclr"}}, {"simclr", nil}, {"", nil}} {
		r := New[int]("loss")
		r.Register("dcl", 1)
		r.Register("infonce", 2, "simclr")
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Register(%q, %q) did not panic", tc.name, tc.aliases)
				}
			}()
			r.Register(tc.name, 3, tc.aliases...)
		}()
	}
}

var (
	queue = Param{Name: "queue_size", Type: Int, Default: 8, Doc: "queue", Check: AtLeast(1)}
	ema   = Param{Name: "momentum_ema", Default: 0.9, Doc: "momentum", Check: InRange(0, 1)}
	sym   = Param{Name: "symmetric", Type: Bool, Doc: "both views"}
)

func TestResolveChecksGivenValuesAndFillsDefaults(t *testing.T) {
	declared := []Param{queue, ema, sym}
	got, err := Resolve("moco", declared, Values{"queue_size": 16}, true)
	if err != nil || !maps.Equal(got, Values{"queue_size": 16, "momentum_ema": 0.9, "symmetric": 0}) {
		t.Errorf("Resolve = %v, %v", got, err)
	}
	_, err = Resolve("moco", declared, Values{"momentum_ema": 1}, true)
	var value *usage.ValueError
	if !errors.As(err, &value) || value.Name != "momentum-ema" {
		t.Fatalf("momentum 1: %v, want a value error named by the flag", err)
	}
	if !strings.Contains(err.Error(), "momentum-ema 1: moco: must be in [0, 1)") {
		t.Errorf("err %v does not name the parameter, its value and the range", err)
	}
	if _, err := Resolve("moco", declared, Values{"queue_size": 2.5}, true); err == nil || !strings.Contains(err.Error(), "not a whole number") {
		t.Errorf("queue 2.5: %v", err)
	}
	if _, err := Resolve("simclr", nil, Values{"queue_size": 8}, true); err == nil || err.Error() != "simclr has no setting queue_size (it reads none)" {
		t.Errorf("strict: %v", err)
	}
	if got, err := Resolve("dcl", nil, Values{"sigma": 0.5}, false); err != nil || len(got) != 0 {
		t.Errorf("lenient: %v, %v", got, err)
	}
}

func TestAddFlagsSetsOnlyWhatTheCommandLineGives(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	other := queue
	other.Default, other.Doc = 32, "support set"
	values := AddFlags(fs, "method", []Variant{{"moco", []Param{queue, ema, sym}}, {"nnclr", []Param{other}}})
	if err := fs.Parse([]string{"--momentum-ema=0.5", "--symmetric", "--queue-size=0"}); err != nil {
		t.Fatal(err)
	}
	if got := values(); !maps.Equal(got, Values{"momentum_ema": 0.5, "symmetric": 1}) {
		t.Errorf("values = %v", got)
	}
	q := fs.Lookup("queue-size")
	if q == nil || q.DefValue != "0" || !strings.Contains(q.Usage, "moco: queue; nnclr: support set (0: the method's default: moco 8, nnclr 32)") {
		t.Errorf("queue-size flag %+v", q)
	}
	if e := fs.Lookup("momentum-ema"); e == nil || e.DefValue != "0.9" {
		t.Errorf("momentum-ema flag %+v", e)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	params := []Param{queue, ema, sym, {Name: "align_alpha", JSON: "alpha"}}
	buf, err := AppendJSON([]byte("{\"a\":1"), params, Values{"symmetric": 1, "queue_size": 16, "align_alpha": 2, "momentum_ema": 0}, true)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(buf)+"}", `{"a":1,"queue_size":16,"symmetric":true,"alpha":2}`; got != want {
		t.Errorf("AppendJSON = %s, want %s", got, want)
	}
	p, ok := ByJSONName(params, "Alpha")
	if !ok || p.Name != "align_alpha" {
		t.Errorf("ByJSONName(Alpha) = %+v, %v", p, ok)
	}
	if v, err := sym.DecodeJSON([]byte("true")); err != nil || v != 1 {
		t.Errorf("DecodeJSON(true) = %v, %v", v, err)
	}
	if _, err := queue.DecodeJSON([]byte("1.5")); err == nil {
		t.Error("queue 1.5 decoded")
	}
}
