// Package experiments ships the experiment configs that reproduce the paper's tables, as
// YAML files embedded in the binary: `dcl reproduce --config=NAME` accepts a file path or
// the name of one of these (without .yaml). Each config carries the paper's hyper-parameters
// and its published figures, shown beside ours in the report.
package experiments

import (
	"embed"
	"io/fs"
	"sort"
	"strings"
)

//go:embed *.yaml
var configs embed.FS

// Names lists the built-in configs, sorted.
func Names() []string {
	entries, _ := fs.ReadDir(configs, ".")
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}

// Open returns the built-in config called name (without .yaml).
func Open(name string) (fs.File, error) {
	return configs.Open(name + ".yaml")
}
