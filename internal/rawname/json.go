package rawname

import (
	"encoding/json"
	"reflect"
	"unicode/utf8"
)

// Marshal is json.Marshal of v with every string in it (struct fields, slice and array
// elements, map keys and values, through pointers) written as its Text; v is not changed.
// Unmarshal reads it back exactly. It is for values whose strings are names (a DoFn's
// fields, which Beam serialises as JSON): call it on a type without the caller's own
// MarshalJSON (type plain T; Marshal((*plain)(v))).
func Marshal(v any) ([]byte, error) {
	return json.Marshal(mapStrings(v, Text))
}

// Unmarshal is json.Unmarshal into v, then Raw of every string in it: the inverse of Marshal.
func Unmarshal(data []byte, v any) error {
	if err := json.Unmarshal(data, v); err != nil {
		return err
	}
	inPlace(reflect.ValueOf(v), Raw)
	return nil
}

// Valid returns v, or where v holds strings that are not UTF-8 a deep copy of it in which
// each of those is its Text; UTF-8 strings are kept as they are, since they may be text
// already (keys, class names). It is for JSON written for people and other tools (reports,
// summaries), which encoding/json would otherwise give U+FFFD for each byte of a path that
// is not UTF-8. Unlike Marshal it is not undone on reading: a UTF-8 string holding a literal
// \xHH reads like the Text of a name that is not UTF-8, so what is read back as a name is
// written as Text where it is made.
func Valid(v any) any {
	return mapStrings(v, validText)
}

func validText(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	return Text(s)
}

func mapStrings(v any, f func(string) string) any {
	if v == nil {
		return nil
	}
	return mapped(reflect.ValueOf(v), f).Interface()
}

// mapped returns a deep copy of v with f applied to every string that JSON would write.
// Values holding no string are shared, not copied: nothing here changes them.
func mapped(v reflect.Value, f func(string) string) reflect.Value {
	if !v.IsValid() || !holdsStrings(v.Type(), map[reflect.Type]bool{}) {
		return v
	}
	t := v.Type()
	switch t.Kind() {
	case reflect.String:
		return reflect.ValueOf(f(v.String())).Convert(t)
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		p := reflect.New(t.Elem())
		p.Elem().Set(mapped(v.Elem(), f))
		return p
	case reflect.Interface:
		if v.IsNil() {
			return v
		}
		out := reflect.New(t).Elem()
		out.Set(mapped(v.Elem(), f))
		return out
	case reflect.Struct:
		out := reflect.New(t).Elem()
		out.Set(v) // unexported fields as they are: JSON skips them
		for i := range t.NumField() {
			if t.Field(i).IsExported() {
				out.Field(i).Set(mapped(v.Field(i), f))
			}
		}
		return out
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeSlice(t, v.Len(), v.Len())
		for i := range v.Len() {
			out.Index(i).Set(mapped(v.Index(i), f))
		}
		return out
	case reflect.Array:
		out := reflect.New(t).Elem()
		for i := range v.Len() {
			out.Index(i).Set(mapped(v.Index(i), f))
		}
		return out
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		out := reflect.MakeMapWithSize(t, v.Len())
		for it := v.MapRange(); it.Next(); {
			out.SetMapIndex(mapped(it.Key(), f), mapped(it.Value(), f))
		}
		return out
	}
	return v
}

// inPlace applies f to every string JSON would have read into v (a pointer).
func inPlace(v reflect.Value, f func(string) string) {
	if !v.IsValid() || !holdsStrings(v.Type(), map[reflect.Type]bool{}) {
		return
	}
	switch v.Kind() {
	case reflect.String:
		if v.CanSet() {
			v.SetString(f(v.String()))
		}
	case reflect.Pointer:
		if !v.IsNil() {
			inPlace(v.Elem(), f)
		}
	case reflect.Interface:
		if !v.IsNil() && v.CanSet() {
			v.Set(mapped(v.Elem(), f))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				inPlace(v.Field(i), f)
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			inPlace(v.Index(i), f)
		}
	case reflect.Map:
		if v.IsNil() {
			return
		}
		out := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			out.SetMapIndex(mapped(it.Key(), f), mapped(it.Value(), f))
		}
		if v.CanSet() {
			v.Set(out)
		}
	}
}

// holdsStrings says whether a value of t can hold a string JSON writes. []byte is base64 in
// JSON, which keeps every byte; interfaces may hold anything.
func holdsStrings(t reflect.Type, seen map[reflect.Type]bool) bool {
	if seen[t] {
		return false // a recursive type: its strings are found at its first level
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.String, reflect.Interface:
		return true
	case reflect.Pointer, reflect.Array:
		return holdsStrings(t.Elem(), seen)
	case reflect.Slice:
		return t.Elem().Kind() != reflect.Uint8 && holdsStrings(t.Elem(), seen)
	case reflect.Map:
		return holdsStrings(t.Key(), seen) || holdsStrings(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if t.Field(i).IsExported() && holdsStrings(t.Field(i).Type, seen) {
				return true
			}
		}
	}
	return false
}
