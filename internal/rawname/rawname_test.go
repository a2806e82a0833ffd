package rawname

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/dcl-beam/dcl-beam/internal/testing/mutate"
)

// A name's text is UTF-8, reads back as the name byte for byte, and is the name itself when
// that is UTF-8 without a literal \xHH; names that differ only in how an escape would show
// them (a Latin-1 é and the four characters \xe9) keep different texts.
func TestTextIsUTF8AndReadsBackExactly(t *testing.T) {
	for _, c := range []struct{ name, text string }{
		{"dog", "dog"},
		{"déjà vu", "déjà vu"},
		{"caf\xe9", `caf\xe9`},
		{`caf\xe9`, `caf\x5cxe9`},
		{`caf\x5cxe9`, `caf\x5cx5cxe9`},
		{`a\xg1 \x \\ \n\x4`, `a\xg1 \x \\ \n\x4`},
		{"\\\xff", `\\xff`},
		{"\xc3", `\xc3`},
		{"\xed\xa0\x80", `\xed\xa0\x80`}, // a surrogate's encoding is not UTF-8
		{"", ""},
	} {
		if got := Text(c.name); got != c.text {
			t.Errorf("Text(%q) = %q, want %q", c.name, got, c.text)
		}
		if got := Raw(c.text); got != c.name {
			t.Errorf("Raw(%q) = %q, want %q", c.text, got, c.name)
		}
	}
	if got := Raw(`caf\xE9`); got != "caf\xe9" {
		t.Errorf(`Raw(caf\xE9) = %q, want the byte E9`, got)
	}
	seeds := [][]byte{[]byte("caf\xe9/a\xff.png"), []byte(`caf\xe9/\x5c`), []byte("déjà\\x4"), []byte("train/n01440764/x.JPEG")}
	var last []byte
	mutate.Run(t, seeds, func(data []byte) error {
		name := string(data)
		text := Text(name)
		if !utf8.ValidString(text) {
			return fmt.Errorf("Text(%q) = %q is not UTF-8", name, text)
		}
		if back := Raw(text); back != name {
			return fmt.Errorf("Raw(Text(%q)) = %q", name, back)
		}
		if other := string(last); other != name && Text(other) == text {
			return fmt.Errorf("%q and %q share the text %q", other, name, text)
		}
		if utf8.ValidString(name) && !hasEscape(name) && text != name {
			return fmt.Errorf("the UTF-8 name %q became %q", name, text)
		}
		last = data
		return nil
	})
}

type inner struct {
	Path  string
	Files []string
	Raw   []byte
	N     int
	note  string
}

type outer struct {
	Output  string
	Units   []inner
	Meta    map[string]string
	Groups  [][]string
	Ptr     *inner
	Any     any
	Nothing []string
	kept    string
}

// Marshal and Unmarshal carry every string of a value through JSON byte for byte, where
// encoding/json alone turns the bytes that are not UTF-8 into U+FFFD; the value marshalled
// is not changed.
func TestMarshalKeepsEveryByte(t *testing.T) {
	v := outer{
		Output: "out/caf\xe9", Units: []inner{{Path: "in\xff", Files: []string{"a\xfe.png", `b\x41.png`}, Raw: []byte{0xff}, N: 3, note: "x"}},
		Meta: map[string]string{"input\xe9": "v\xe9"}, Groups: [][]string{{"g\xe9"}}, Ptr: &inner{Path: "p\xe9"}, Any: "i\xe9", kept: "k\xe9",
	}
	before := fmt.Sprintf("%#v %#v", v, *v.Ptr)
	data, err := Marshal(&v)
	if err != nil {
		t.Fatal(err)
	}
	if after := fmt.Sprintf("%#v %#v", v, *v.Ptr); after != before {
		t.Errorf("Marshal changed its value:\n%s\n%s", before, after)
	}
	if !utf8.Valid(data) {
		t.Errorf("Marshal wrote %q, not UTF-8", data)
	}
	var got outer
	if err := Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := v
	want.kept, want.Units = "", []inner{v.Units[0]}
	want.Units[0].note = ""
	if !reflect.DeepEqual(got, want) {
		t.Errorf("read back\n%#v\nwant\n%#v", got, want)
	}
	plain, _ := json.Marshal(v)
	var lossy outer
	if err := json.Unmarshal(plain, &lossy); err != nil || reflect.DeepEqual(lossy, want) {
		t.Errorf("encoding/json alone kept the names (%v): the test cannot tell", err)
	}
}

// Valid, for reports, writes each string that is not UTF-8 as its Text and keeps UTF-8
// strings (already text, perhaps with an escape in them) as they are.
func TestValidEscapesOnlyWhatIsNotUTF8(t *testing.T) {
	v := map[string]any{"output": "runs/r\xe9", "class": `caf\xe9`, "n": 3, "list": []string{"a\xff", "b"}}
	data, err := json.Marshal(Valid(v))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"class":"caf\\xe9","list":["a\\xff","b"],"n":3,"output":"runs/r\\xe9"}`
	if string(data) != want {
		t.Errorf("wrote %s, want %s", data, want)
	}
	if v["output"] != "runs/r\xe9" {
		t.Errorf("Valid changed its value: %q", v["output"])
	}
	if Valid(nil) != nil {
		t.Error("Valid(nil) is not nil")
	}
}
