package reproduce

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Any config bytes give a config or an error, never a panic; a config Parse accepts
// validates, and names its runs uniquely.
func FuzzParseConfig(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("..", "experiments", "*.yaml"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no built-in configs to seed from: %v", err)
	}
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("name: x\nname: y\n"))                                      // a key given twice
	f.Add([]byte("a: &a [1, 2]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b, *b]\n")) // aliases
	f.Add([]byte("train:\n  runs: [{loss: dcl}, {loss: dcl}]\n"))
	f.Add([]byte{0xff, 0xfe, '\t', ':'})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(bytes.NewReader(data), "fuzz.yaml")
		if err != nil {
			return
		}
		if err := c.validate(); err != nil {
			t.Errorf("Parse accepted a config that validate refuses: %v", err)
		}
		seen := map[string]bool{}
		for _, n := range c.runNames() {
			if seen[n] {
				t.Errorf("Parse accepted two runs named %q", n)
			}
			seen[n] = true
		}
	})
}
