package attest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/tarfa-ai/tarfa/convert"
)

func convertFixture(t *testing.T, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "m")
	if _, err := convert.Convert(context.Background(), "../validation/testdata/fixtures/"+name, dst, convert.Options{LastLayer: -1}); err != nil {
		t.Fatal(err)
	}
	return dst
}
