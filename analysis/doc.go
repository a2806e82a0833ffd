// Package analysis is the evaluation math as plain Go: weighted kNN, the linear probe, the
// paper's negative-positive coupling (NPC) statistics, and the reports (JSON, Markdown tables
// beside the paper's numbers) and PNG plots made from them.
package analysis
