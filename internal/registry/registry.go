// Package registry is the one shape the toolkit's variants are registered in (losses,
// training methods, models, augmentation presets, runners, datasets and their unit kinds,
// evaluations): a name, aliases, a value, and the parameters each variant declares (Param).
// Command-line flags, configuration keys, checkpoint JSON and help text are derived from
// those declarations, so a variant with a new parameter is one registration. A parameter's
// values are one number (Values), or of a Value of its own (a word, a path, a seed, a list,
// a pair: Settings).
package registry

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Registry holds the variants of one kind, by name, in registration order.
type Registry[T any] struct {
	what   string // the kind's name in messages: "loss", "training method"
	mu     sync.RWMutex
	names  []string
	byName map[string]T
	alias  map[string]string // alias → name
}

// New returns an empty registry; what names the kind in messages ("unknown loss …").
func New[T any](what string) *Registry[T] {
	return &Registry[T]{what: what, byName: map[string]T{}, alias: map[string]string{}}
}

// Register adds v under name and its aliases. It panics on an empty name or one (or an
// alias) already taken: programming errors, found when the binary starts.
func (r *Registry[T]) Register(name string, v T, aliases ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if name == "" {
		panic(fmt.Sprintf("registry: a %s needs a name", r.what))
	}
	for _, n := range append([]string{name}, aliases...) {
		if owner, taken := r.owner(n); taken {
			panic(fmt.Sprintf("registry: name %q of %s %q is taken by %q", n, r.what, name, owner))
		}
	}
	r.names = append(r.names, name)
	r.byName[name] = v
	for _, a := range aliases {
		r.alias[a] = name
	}
}

// Unregister removes name and its aliases: for tests that register a variant for their own
// duration (t.Cleanup).
func (r *Registry[T]) Unregister(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names = slices.DeleteFunc(r.names, func(n string) bool { return n == name })
	delete(r.byName, name)
	for a, n := range r.alias {
		if n == name {
			delete(r.alias, a)
		}
	}
}

func (r *Registry[T]) owner(n string) (string, bool) {
	if _, ok := r.byName[n]; ok {
		return n, true
	}
	owner, ok := r.alias[n]
	return owner, ok
}

// Lookup returns the variant registered under name (not an alias: configurations and
// checkpoints hold names).
func (r *Registry[T]) Lookup(name string) (T, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v, ok := r.byName[name]
	return v, ok
}

// Resolve returns the name and variant of a name or alias, or an error listing the names.
func (r *Registry[T]) Resolve(nameOrAlias string) (string, T, error) {
	r.mu.RLock()
	name, ok := r.owner(nameOrAlias)
	v := r.byName[name]
	r.mu.RUnlock()
	if !ok {
		var zero T
		return "", zero, r.Unknown(nameOrAlias)
	}
	return name, v, nil
}

// Unknown is the error for a name that is not registered: `unknown loss "x": want a, b or c`.
func (r *Registry[T]) Unknown(name string) error {
	return fmt.Errorf("unknown %s %q: want %s", r.what, name, r.List())
}

// Names returns the registered names, in registration order.
func (r *Registry[T]) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Clone(r.names)
}

// Values returns the registered variants, in registration order.
func (r *Registry[T]) Values() []T {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]T, len(r.names))
	for i, n := range r.names {
		out[i] = r.byName[n]
	}
	return out
}

// List is the registered names as a message lists them: "a, b or c".
func (r *Registry[T]) List() string { return List(r.Names()) }

// List joins names as a message lists choices: "a", "a or b", "a, b or c".
func List(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
