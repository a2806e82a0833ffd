package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
)

// WriteJSON writes v as indented JSON followed by a newline.
func WriteJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// SaveJSON writes v as indented JSON to path (local, gs:// or memfs://), atomically: the file
// appears under its name only when complete.
func SaveJSON(ctx context.Context, path string, v any) error {
	if err := Create(ctx, path, func(w io.Writer) error { return WriteJSON(w, v) }); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// LoadJSON reads path (written by SaveJSON or by hand) into v; unknown fields are an error,
// so a misspelt key is not silently ignored.
func LoadJSON(ctx context.Context, path string, v any) error {
	b, err := ReadFile(ctx, path)
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	return nil
}
