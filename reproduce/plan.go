package reproduce

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/dcl-beam/dcl-beam/internal/progress"
)

// WritePlan prints a plan (Plan's stages) as a table: what a run would do with each stage,
// why, and about how much it would write where that is estimated (the datasets: the stored
// views of every pass, or base shards), with the total; and where a run would stop, refused,
// the refusal with its reason.
func WritePlan(w io.Writer, stages []StageRecord) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	run := 0
	var total int64
	var refused *StageRecord
	for i, s := range stages {
		action := "run"
		switch {
		case s.Refused:
			action, refused = "REFUSE", &stages[i]
		case s.Skipped:
			action = "skip"
		default:
			run++
		}
		writes := ""
		if s.Writes > 0 {
			writes = "writes ≈ " + progress.Bytes(s.Writes)
			total += s.Writes
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", action, s.Name, writes, s.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if total > 0 {
		if _, err := fmt.Fprintf(w, "The datasets it would write take about %s.\n", progress.Bytes(total)); err != nil {
			return err
		}
	}
	if refused != nil {
		_, err := fmt.Fprintf(w, "A run would stop at %s, refused; %d stages before it would run. Nothing was run or written.\n", refused.Name, run)
		return err
	}
	_, err := fmt.Fprintf(w, "%d of %d stages would run; nothing was run or written.\n", run, len(stages))
	return err
}
