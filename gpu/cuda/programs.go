package cuda

import "sync"

// Program is one program an XLA backend compiled (RecordPrograms).
type Program struct {
	// Name is the computation's name (GoMLX's graph name).
	Name string
	// StableHLO is the program's text as given to the plugin.
	StableHLO string
	// Err is the compilation's error, if it failed.
	Err error
	// ArgumentBytes, OutputBytes and TempBytes are the compiled executable's memory for its
	// parameters, its results and its scratch; AliasBytes is the part of the results written
	// into parameters' memory (input-output aliasing: donated buffers updated in place).
	ArgumentBytes, OutputBytes, AliasBytes, TempBytes int64
}

// ProgramLog collects the programs a backend compiles; safe for concurrent use.
type ProgramLog struct {
	mu       sync.Mutex
	programs []Program
}

// Programs returns the programs compiled so far, oldest first.
func (l *ProgramLog) Programs() []Program {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Program(nil), l.programs...)
}
