package reproduce

import (
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The reference of config keys lists every key of a config's structure with what it is, and
// has no text of a key that is not there; a run's keys, each evaluation's, departures' and
// gates' come from their declarations.
func TestConfigReferenceCoversEveryKey(t *testing.T) {
	var paths []string
	for _, k := range fixedKeys(reflect.TypeFor[Config](), "") {
		paths = append(paths, k.path)
		if configKeyDocs[k.path] == "" {
			t.Errorf("config key %s has no text in configKeyDocs", k.path)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(configKeyDocs)) {
		if !slices.Contains(paths, k) {
			t.Errorf("configKeyDocs names %s, which is no key of a config", k)
		}
	}
	ref := ConfigReference()
	for _, want := range []string{"| `dataset.inputs` | map of text |", "| `train.paper.*.knn_top1` | number |", "| `weight_decay` | `0.0005` |",
		"| `sigma` |", "| `queue_size` |", "**`evaluate.linear`**", "| `epochs` | `100` |", "| `reduction` |", "| `knn_top1` |", "| `seeds` | |"} {
		if !strings.Contains(ref, want) {
			t.Errorf("the reference lacks %q", want)
		}
	}
}
