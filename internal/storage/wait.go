package storage

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// DefaultWait is how long an operation on remote storage may go without progress before it
// fails: long enough for the client's retries to ride out a restarting server, short enough
// that an unreachable endpoint is reported within a minute instead of never.
const DefaultWait = 30 * time.Second

// WaitEnv names the environment variable that raises (or lowers) the wait for slow links, as
// a Go duration ("2m"). The commands' --storage-timeout flag overrides it.
const WaitEnv = "DCL_STORAGE_TIMEOUT"

// waitBound holds the wait in nanoseconds. Beam workers never parse the launcher's flags, so
// they take it from the environment at start-up.
var waitBound atomic.Int64

func init() {
	d, err := WaitFromEnv()
	if err != nil {
		d = DefaultWait // the commands report a malformed value; a worker keeps the default
	}
	waitBound.Store(int64(d))
}

// WaitFromEnv returns the wait WaitEnv sets, or DefaultWait when it is unset.
func WaitFromEnv() (time.Duration, error) {
	s := os.Getenv(WaitEnv)
	if s == "" {
		return DefaultWait, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive duration such as 30s or 2m", WaitEnv, s)
	}
	return d, nil
}

// SetWait sets how long an operation on remote storage may wait without progress.
func SetWait(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("storage wait %v: want a positive duration", d)
	}
	waitBound.Store(int64(d))
	return nil
}

// Wait returns how long an operation on remote storage may wait without progress.
func Wait() time.Duration { return time.Duration(waitBound.Load()) }
