package cuda

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Library is one shared library the plugin needs (directly or through another library), and
// where the dynamic loader would find it.
type Library struct {
	// Name is the DT_NEEDED entry (a soname such as libcublas.so.13).
	Name string `json:"name"`
	// NeededBy is the file that asks for it.
	NeededBy string `json:"needed_by"`
	// Path is where it resolves, or where it exists off the loader path (Reachable false).
	Path string `json:"path,omitempty"`
	// Via says how the loader finds it: RPATH, RUNPATH, LD_LIBRARY_PATH, ld.so.conf, system.
	Via string `json:"via,omitempty"`
	// Reachable is whether dlopen would find it with today's environment.
	Reachable bool `json:"reachable"`
}

// depWalk resolves the plugin's needed libraries, breadth first, the way glibc's loader does
// (simplified: RPATH of the asking object when it has no RUNPATH, LD_LIBRARY_PATH, RUNPATH,
// ld.so.conf, system folders). A library the loader cannot find is looked for in the pip
// nvidia/*/lib folders, and its own needs are followed from there, since that is where the
// fix (LD_LIBRARY_PATH, or preloading it) will take it from.
type depWalk struct {
	env      Env
	ldPath   []string
	confDirs []string
	pipDirs  []string
}

// maxLibraries bounds the walk: the CUDA plugin and the NVIDIA libraries need a few dozen.
const maxLibraries = 400

func (e Env) walkDeps(plugin string, pipDirs []string) ([]Library, error) {
	w := depWalk{env: e, pipDirs: pipDirs}
	for _, d := range filepath.SplitList(e.getenv("LD_LIBRARY_PATH")) {
		if d != "" {
			w.ldPath = append(w.ldPath, d)
		}
	}
	if e.LdSoConf != "" {
		w.confDirs = readLdSoConf(e.LdSoConf, 0)
	}
	type item struct{ path string }
	queue := []item{{plugin}}
	seen := map[string]bool{}
	var out []Library
	for len(queue) > 0 && len(out) < maxLibraries {
		it := queue[0]
		queue = queue[1:]
		needed, rpath, runpath, err := readDynamic(it.path)
		if err != nil {
			if it.path == plugin {
				return nil, err
			}
			continue // a library we cannot parse is the loader's business, not ours
		}
		for _, name := range needed {
			if seen[name] {
				continue
			}
			seen[name] = true
			lib := w.resolve(name, it.path, rpath, runpath)
			out = append(out, lib)
			// System libraries (libc, libstdc++, …) need nothing the check could fix.
			if lib.Path != "" && lib.Via != "system" && lib.Via != "ld.so.conf" {
				queue = append(queue, item{lib.Path})
			}
		}
	}
	return out, nil
}

func (w depWalk) resolve(name, from string, rpath, runpath []string) Library {
	lib := Library{Name: name, NeededBy: from}
	origin := filepath.Dir(from)
	expand := func(dirs []string) []string {
		var out []string
		for _, d := range dirs {
			d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", origin), "$ORIGIN", origin)
			out = append(out, d)
		}
		return out
	}
	var order []struct {
		via  string
		dirs []string
	}
	if len(runpath) == 0 {
		order = append(order, struct {
			via  string
			dirs []string
		}{"RPATH", expand(rpath)})
	}
	order = append(order, []struct {
		via  string
		dirs []string
	}{{"LD_LIBRARY_PATH", w.ldPath}, {"RUNPATH", expand(runpath)}, {"ld.so.conf", w.confDirs}, {"system", w.env.SystemLibDirs}}...)
	for _, o := range order {
		for _, d := range o.dirs {
			if p := filepath.Join(d, name); isFile(p) {
				lib.Path, lib.Via, lib.Reachable = p, o.via, true
				return lib
			}
		}
	}
	for _, d := range w.pipDirs {
		if p := filepath.Join(d, name); isFile(p) {
			lib.Path = p
			return lib
		}
	}
	return lib
}

// readDynamic returns an ELF file's DT_NEEDED, DT_RPATH and DT_RUNPATH entries.
func readDynamic(path string) (needed, rpath, runpath []string, err error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading %s as a shared library: %w", path, err)
	}
	defer f.Close()
	needed, err = f.DynString(elf.DT_NEEDED)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("reading the needed libraries of %s: %w", path, err)
	}
	split := func(tag elf.DynTag) []string {
		vals, _ := f.DynString(tag)
		var out []string
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				if d != "" {
					out = append(out, d)
				}
			}
		}
		return out
	}
	return needed, split(elf.DT_RPATH), split(elf.DT_RUNPATH), nil
}

// readLdSoConf returns the folders listed in an ld.so.conf file and the files it includes.
func readLdSoConf(path string, depth int) []string {
	f, err := os.Open(path)
	if err != nil || depth > 4 {
		return nil
	}
	defer f.Close()
	var dirs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		switch {
		case line == "":
		case strings.HasPrefix(line, "include"):
			pat := strings.TrimSpace(strings.TrimPrefix(line, "include"))
			if !filepath.IsAbs(pat) {
				pat = filepath.Join(filepath.Dir(path), pat)
			}
			files, _ := filepath.Glob(pat)
			slices.Sort(files)
			for _, inc := range files {
				dirs = append(dirs, readLdSoConf(inc, depth+1)...)
			}
		default:
			dirs = append(dirs, line)
		}
	}
	return dirs
}

// pipNvidiaDirs lists the lib folders of the pip NVIDIA packages (nvidia/cublas/lib, …, or
// CUDA 13's single nvidia/cu13/lib): first next to the plugin's own site-packages, then under
// every Python root.
func (e Env) pipNvidiaDirs(plugin string) []string {
	var pats []string
	if sp := sitePackagesOf(plugin); sp != "" {
		pats = append(pats, filepath.Join(sp, "nvidia/*/lib"))
	}
	pats = append(pats, e.sitePackagePatterns("nvidia/*/lib")...)
	var dirs []string
	for _, p := range pats {
		m, _ := filepath.Glob(p)
		slices.Sort(m)
		for _, d := range m {
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// sitePackagesOf returns the site-packages folder a JAX plugin lives in (the parent of
// jax_plugins), or "".
func sitePackagesOf(plugin string) string {
	for d := filepath.Dir(plugin); d != "/" && d != "."; d = filepath.Dir(d) {
		if filepath.Base(d) == "jax_plugins" {
			return filepath.Dir(d)
		}
	}
	return ""
}

// cudaDataDir returns the folder XLA wants as --xla_gpu_cuda_data_dir (the one holding
// nvvm/libdevice/libdevice.10.bc, which XLA needs to compile its kernels): CUDA 13's pip
// nvidia/cu13 or CUDA 12's nvidia/cuda_nvcc next to the plugin, "" when there is none.
func cudaDataDir(plugin string) string {
	sp := sitePackagesOf(plugin)
	if sp == "" {
		return ""
	}
	cands, _ := filepath.Glob(filepath.Join(sp, "nvidia/*/nvvm/libdevice/libdevice.10.bc"))
	slices.Sort(cands)
	for _, c := range cands {
		return filepath.Dir(filepath.Dir(filepath.Dir(c)))
	}
	return ""
}
