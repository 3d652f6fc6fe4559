package verify

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadManifestNotJNF(t *testing.T) {
	hfDir := t.TempDir()
	os.WriteFile(filepath.Join(hfDir, "model.safetensors"), []byte("x"), 0o644)
	empty := t.TempDir()
	file := filepath.Join(empty, "f")
	os.WriteFile(file, nil, 0o644)
	for _, c := range []struct{ dir, want string }{
		{hfDir, "is a Hugging Face checkpoint, not a JNF directory: convert it first (tarfa convert " + hfDir},
		{empty, "is not a JNF directory"},
		{file, "is a file, not a directory"},
		{filepath.Join(empty, "missing"), "no such file or directory"},
	} {
		_, _, err := LoadManifest(c.dir)
		var nj *NotJNFError
		if !errors.As(err, &nj) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("LoadManifest(%s) = %v; want a NotJNFError containing %q", c.dir, err, c.want)
		}
		if _, err := Check(context.Background(), c.dir, CheckOptions{}); !errors.As(err, &nj) {
			t.Errorf("Check(%s) = %v; want the NotJNFError as an error, not a problem", c.dir, err)
		}
	}
}
