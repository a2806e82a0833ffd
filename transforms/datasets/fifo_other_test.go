//go:build !unix

package datasets

import "errors"

func mkfifo(string) error { return errors.New("named pipes are a Unix thing") }
