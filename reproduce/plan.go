package reproduce

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WritePlan prints a plan (Plan's stages) as a table: what a run would do with each stage,
// and why.
func WritePlan(w io.Writer, stages []StageRecord) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	run := 0
	for _, s := range stages {
		action := "run"
		if s.Skipped {
			action = "skip"
		} else {
			run++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", action, s.Name, s.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d of %d stages would run; nothing was run or written.\n", run, len(stages))
	return err
}
