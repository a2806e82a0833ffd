package testfiles

// KillHunt is what one run of cmd/dcl's kill test found (TestKilledRunsRerunToTheSameOutput
// with DCL_KILL_RESULTS set): the test writes it, `make docs` puts the sum of the kept ones
// (docs/reliability/kill-*.json) into docs/reliability.md, so that its figures
// are never typed.
type KillHunt struct {
	Seed   uint64 `json:"seed"`
	Rounds int    `json:"rounds"`
	// Jobs names what was killed, in order: a command and, where it matters, its mode.
	Jobs []string `json:"jobs"`
	// Runs counts the runs started to be killed; Killed of them were, the rest finished first.
	Runs   int `json:"runs"`
	Killed int `json:"killed"`
	// InReportPhase counts reproductions killed after their report phase began,
	// AfterFinalCheckpoint trainings killed between their last checkpoint and summary.json.
	InReportPhase        int `json:"in_report_phase"`
	AfterFinalCheckpoint int `json:"after_final_checkpoint"`
	// Differences counts re-runs whose outputs differed from the uninterrupted run's, and
	// RecordsLost the records missing from re-run preprocess outputs.
	Differences int   `json:"differences"`
	RecordsLost int64 `json:"records_lost"`
	// Machine and Command say where and how it ran.
	Machine string `json:"machine"`
	Command string `json:"command"`
}
