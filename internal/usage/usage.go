// Package usage marks the errors that a wrong value given by the user causes (a flag, a
// config entry, a split a dataset does not have), wherever they are found, so that the
// command reports them as a wrong command line (exit 2) and not as a failed run (exit 1).
package usage

import (
	"errors"
	"fmt"
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
