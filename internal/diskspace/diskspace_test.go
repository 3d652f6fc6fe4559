package diskspace

import "testing"

func TestFree(t *testing.T) {
	free, known, err := Free(t.TempDir())
	if err != nil || !known || free == 0 {
		t.Errorf("Free: %d bytes, known %v, %v", free, known, err)
	}
	if _, _, err := Free("/nonexistent/dir"); err == nil {
		t.Error("a missing directory has free space")
	}
}
