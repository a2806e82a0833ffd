package main

import (
	"testing"
	"time"
)

// TestSpark runs every job of the Flink tests (runnerFixture: preprocess as stored passes,
// online views and evaluation shards, embed, knn, linear, npc) on Beam's Spark job server,
// Spark in local[2] inside the job server's JVM, with PROCESS workers started by Beam's boot
// loader, and compares every output with prism's. make test-spark runs it (make deps-spark
// fetches the jars).
func TestSpark(t *testing.T) {
	s := needJobServer(t, "spark", "Spark")
	f := newRunnerFixture(t, s.name, 40)
	_, endpoint := s.startJobServer(t, 0, nil, "local[2]")
	flags := s.runnerFlags(endpoint)
	dir := t.TempDir()
	for _, j := range f.jobs {
		t.Run(j.name, func(t *testing.T) { f.compare(t, j, dir, flags, 5*time.Minute) })
	}
	s.checkWorkers(t)
}
