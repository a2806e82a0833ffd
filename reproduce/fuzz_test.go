package reproduce

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/mutate"
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
	minimalWith := func(old, new string) []byte { return []byte(strings.Replace(minimal, old, new, 1)) }
	f.Add(minimalWith("batch_size: 32}", "batch_size: 32, lr: .inf}"))
	f.Add(minimalWith("temperature: 0.1}\n", "temperature: .nan}\n"))
	f.Add(minimalWith("passes: 2", "passes: 2.5"))
	f.Add(minimalWith("seed: 3", "seed: 3.0"))
	f.Add(append([]byte(minimal), "---\nname: other\n"...))
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := checkParsedConfig(data); err != nil {
			t.Error(err)
		}
	})
}

// Every test run parses a second's worth of mutations of the built-in configs.
func TestMutatedConfigs(t *testing.T) {
	mutate.Run(t, configSeeds(t), checkParsedConfig)
}

// configSeeds are the built-in configs, the minimal test config and a few edge cases.
func configSeeds(t testing.TB) [][]byte {
	files, err := filepath.Glob(filepath.Join("..", "experiments", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no built-in configs to seed from: %v", err)
	}
	var seeds [][]byte
	for _, p := range files {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		seeds = append(seeds, data)
	}
	return append(seeds, []byte(minimal), []byte("a: &a [1, 2]\nb: &b [*a, *a, *a]\nc: [*b, *b, *b, *b]\n"))
}

// checkParsedConfig parses data as a config: an error is fine, a panic is not, and a config
// Parse accepts validates, holds only finite numbers and names its runs uniquely.
func checkParsedConfig(data []byte) error {
	c, err := Parse(bytes.NewReader(data), "fuzz.yaml")
	if err != nil {
		return nil
	}
	if err := c.validate(); err != nil {
		return fmt.Errorf("Parse accepted a config that validate refuses: %v", err)
	}
	// What a parsed config is used for must not panic: its fingerprint is JSON, which
	// holds no NaN or infinity.
	_ = c.Fingerprint()
	if err := finiteFloats(reflect.ValueOf(c), "config"); err != nil {
		return fmt.Errorf("Parse accepted %v", err)
	}
	seen := map[string]bool{}
	for _, n := range c.runNames() {
		if seen[n] {
			return fmt.Errorf("Parse accepted two runs named %q", n)
		}
		seen[n] = true
	}
	return nil
}

// finiteFloats reports the first float reachable from v that is NaN or infinite.
func finiteFloats(v reflect.Value, path string) error {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return finiteFloats(v.Elem(), path)
		}
	case reflect.Float32, reflect.Float64:
		if f := v.Float(); math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Errorf("%s = %v", path, f)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				if err := finiteFloats(v.Field(i), path+"."+v.Type().Field(i).Name); err != nil {
					return err
				}
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if err := finiteFloats(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			if err := finiteFloats(v.MapIndex(k), fmt.Sprintf("%s[%v]", path, k)); err != nil {
				return err
			}
		}
	}
	return nil
}
