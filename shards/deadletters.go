package shards

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/dcl-beam/dcl-beam/internal/rawname"
	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// DeadLettersName is the file, next to the manifest, that lists the records a run could not
// use.
const DeadLettersName = "dead-letters.jsonl"

// DeadLetter is one source record that produced no rows, and why.
type DeadLetter struct {
	Source   string `json:"source"`        // the input file (or archive) it came from
	Position int64  `json:"position"`      // its byte offset there (datasets.Position.Offset: a tar member's data; 0 for a whole file)
	Key      string `json:"key,omitempty"` // its example key, when it got that far
	Reason   string `json:"reason"`
}

// WriteDeadLetters writes letters, sorted by source and position so that a re-run gives the
// same bytes, as JSON lines to dir/dead-letters.jsonl (atomically), and returns the
// manifest's entry for them. With no letters it writes nothing.
func WriteDeadLetters(ctx context.Context, dir string, letters []DeadLetter) (DeadLetters, error) {
	if len(letters) == 0 {
		return DeadLetters{}, nil
	}
	sorted := slices.Clone(letters)
	slices.SortFunc(sorted, func(a, b DeadLetter) int {
		return cmp.Or(cmp.Compare(a.Source, b.Source), cmp.Compare(a.Position, b.Position), cmp.Compare(a.Key, b.Key))
	})
	var buf bytes.Buffer
	for _, l := range sorted {
		line, err := rawname.Marshal(l) // sources and reasons name files, whose names are bytes
		if err != nil {
			return DeadLetters{}, fmt.Errorf("encoding dead letter: %w", err)
		}
		buf.Write(line)
		buf.WriteByte('\n')
	}
	if err := storage.WriteFile(ctx, storage.Join(dir, DeadLettersName), buf.Bytes()); err != nil {
		return DeadLetters{}, err
	}
	return DeadLetters{Count: int64(len(sorted)), File: DeadLettersName}, nil
}

// ReadDeadLetters reads the dead letters a manifest names (none when it names no file).
func ReadDeadLetters(ctx context.Context, dir string, m *Manifest) ([]DeadLetter, error) {
	if m.DeadLetters.File == "" {
		return nil, nil
	}
	p := storage.Join(dir, m.DeadLetters.File)
	data, err := storage.ReadFile(ctx, p)
	if err != nil {
		return nil, err
	}
	var out []DeadLetter
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for line := 1; sc.Scan(); line++ {
		var l DeadLetter
		if err := rawname.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", p, line, err)
		}
		out = append(out, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", p, err)
	}
	if int64(len(out)) != m.DeadLetters.Count {
		return nil, fmt.Errorf("%s lists %d dead letters, the manifest says %d", p, len(out), m.DeadLetters.Count)
	}
	return out, nil
}
