package pipelines

import (
	"testing"

	_ "github.com/apache/beam/sdks/v2/go/pkg/beam/io/filesystem/local"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
)

// TestMain runs the package's pipelines on prism, in process (ptest's default runner). It is
// the one TestMain of package pipelines: every job's tests share it.
func TestMain(m *testing.M) {
	ptest.Main(m)
}
