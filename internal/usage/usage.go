// Package usage marks the errors that a wrong value given by the user causes (a flag, a
// config entry, a split a dataset does not have), wherever they are found, so that the
// command reports them as a wrong command line (exit 2) and not as a failed run (exit 1).
package usage

import (
	"errors"
	"fmt"
	"strings"
)

// Error is an error in what the user asked for.
type Error struct{ err error }

func (e *Error) Error() string { return e.err.Error() }

func (e *Error) Unwrap() error { return e.err }

// Errorf formats an Error as fmt.Errorf does (%w wraps).
func Errorf(format string, args ...any) error {
	return &Error{err: fmt.Errorf(format, args...)}
}

// Is reports whether err, or an error it wraps, is an Error.
func Is(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

// ValueError is a value out of its range, named as the flag that sets it is (a config key of
// the same meaning reads the same): "epochs -1: want at least 1". A command line reports it
// as the flag it was given by (FlagText).
type ValueError struct {
	Name   string
	Value  any
	Reason string
}

func (e *ValueError) Error() string { return fmt.Sprintf("%s %v: %s", e.Name, e.Value, e.Reason) }

// Value makes a ValueError; the reason is formatted as fmt.Sprintf does.
func Value(name string, value any, reason string, args ...any) error {
	return &ValueError{Name: name, Value: value, Reason: fmt.Sprintf(reason, args...)}
}

// FlagText returns err's text with every ValueError in it (wrapped, or joined with
// errors.Join) whose name isFlag says is a flag written as that flag: "--epochs=-1: want at
// least 1".
func FlagText(err error, isFlag func(name string) bool) string {
	msg := err.Error()
	var walk func(error)
	walk = func(e error) {
		switch u := e.(type) {
		case *ValueError:
			if isFlag(u.Name) {
				msg = strings.Replace(msg, u.Error(), fmt.Sprintf("--%s=%v: %s", u.Name, u.Value, u.Reason), 1)
			}
		case interface{ Unwrap() []error }:
			for _, x := range u.Unwrap() {
				walk(x)
			}
			return
		}
		if next := errors.Unwrap(e); next != nil {
			walk(next)
		}
	}
	walk(err)
	return msg
}
