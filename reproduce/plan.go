package reproduce

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WritePlan prints a plan (Plan's stages) as a table: what a run would do with each stage,
// why, and about how much it would write where that is estimated (the datasets: the stored
// views of every pass, or base shards), with the total.
func WritePlan(w io.Writer, stages []StageRecord) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	run := 0
	var total int64
	for _, s := range stages {
		action := "run"
		if s.Skipped {
			action = "skip"
		} else {
			run++
		}
		writes := ""
		if s.Writes > 0 {
			writes = "writes ≈ " + humanBytes(s.Writes)
			total += s.Writes
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", action, s.Name, writes, s.Reason)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if total > 0 {
		if _, err := fmt.Fprintf(w, "The datasets it would write take about %s.\n", humanBytes(total)); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "%d of %d stages would run; nothing was run or written.\n", run, len(stages))
	return err
}

// humanBytes writes n bytes with a binary prefix: 1.5 GiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
