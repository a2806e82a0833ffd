package storage

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/dcl-beam/dcl-beam/internal/rawname"
)

// WriteJSON writes v as indented JSON followed by a newline. A string in v that is not UTF-8
// (a path given on the command line, a file's name) is written as its rawname.Text, not
// with encoding/json's U+FFFD for each byte that is not.
func WriteJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(rawname.Valid(v), "", "  ")
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
	if err := DecodeJSON(b, v); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	return nil
}

// DecodeJSON decodes one JSON value from data into v, strictly: an unknown field, a key
// given twice in one object (encoding/json keeps the last silently) and anything but white
// space after the value are errors.
func DecodeJSON(data []byte, v any) error {
	if err := checkDuplicateKeys(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("data after the JSON value at byte %d", dec.InputOffset())
	}
	return nil
}

// checkDuplicateKeys walks data's tokens and reports the first key repeated in an object.
// Syntax errors are left to the decoder, which reports them with their position.
func checkDuplicateKeys(data []byte) error {
	type frame struct {
		keys      map[string]bool // nil for an array
		expectKey bool
	}
	var stack []*frame
	valueDone := func() {
		if len(stack) > 0 && stack[len(stack)-1].keys != nil {
			stack[len(stack)-1].expectKey = true
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		if n := len(stack); n > 0 && stack[n-1].keys != nil && stack[n-1].expectKey {
			f := stack[n-1]
			key, isKey := tok.(string)
			if !isKey { // the object's closing brace
				stack = stack[:n-1]
				valueDone()
				continue
			}
			if f.keys[key] {
				return fmt.Errorf("key %q given twice in one object (at byte %d)", key, dec.InputOffset())
			}
			f.keys[key], f.expectKey = true, false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{keys: map[string]bool{}, expectKey: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim(']'), json.Delim('}'):
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
			valueDone()
		default:
			valueDone()
		}
	}
}
