package verify_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/convert"
	"github.com/tarfa-ai/tarfa/jnf"
	. "github.com/tarfa-ai/tarfa/verify"
)

const fixture = "../validation/testdata/fixtures/qwen3moe-dev-a/checkpoint"

func converted(t *testing.T, lastLayer int) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "m")
	if _, err := convert.Convert(context.Background(), fixture, dir, convert.Options{LastLayer: lastLayer}); err != nil {
		t.Fatal(err)
	}
	return dir
}

// rewriteTable edits the record table of a JNF file as a forger would: the
// records are laid out again, their bytes moved with them, and the preamble
// digest recomputed, so the file is well-formed.
func rewriteTable(t *testing.T, path string, edit func(*jnf.Table)) {
	t.Helper()
	f, err := jnf.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{}
	for i := range f.Table.Records {
		rb, err := f.ReadRecord(i, nil)
		if err != nil {
			t.Fatal(err)
		}
		data[f.Table.Records[i].Name] = rb.Data
	}
	tb := f.Table
	f.Close()
	edit(&tb)
	if _, _, err := jnf.PlanTable(&tb); err != nil {
		t.Fatal(err)
	}
	enc, err := jnf.EncodeTable(&tb)
	if err != nil {
		t.Fatal(err)
	}
	size := jnf.Layout(tb.Records, len(enc))
	out := make([]byte, size)
	copy(out, jnf.Preamble(enc))
	copy(out[jnf.PreambleSize:], enc)
	for _, r := range tb.Records {
		copy(out[r.Offset:], data[r.Name])
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// forgeManifest edits manifest.json and recomputes both roots, as a forger
// without the signing key would: the manifest is consistent with itself.
func forgeManifest(t *testing.T, dir string, edit func(*Manifest)) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	edit(&m)
	root, weights := m.ComputeRoots()
	m.Root, m.WeightsRoot = hex.EncodeToString(root[:]), hex.EncodeToString(weights[:])
	if err := m.Write(dir); err != nil {
		t.Fatal(err)
	}
}

// rebuildManifest writes the manifest the files imply (a forger who edited
// the files and then "fixed" the manifest).
func rebuildManifest(t *testing.T, dir string) {
	t.Helper()
	m, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Write(dir); err != nil {
		t.Fatal(err)
	}
}

func check(t *testing.T, dir string) *Report {
	t.Helper()
	rep, err := Check(context.Background(), dir, CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func wantProblem(t *testing.T, rep *Report, kind Kind, parts ...string) {
	t.Helper()
	for _, p := range rep.Problems {
		ok := p.Kind == kind
		for _, s := range parts {
			ok = ok && strings.Contains(p.Error(), s)
		}
		if ok {
			if !errors.Is(p, jnf.ErrVerification) {
				t.Errorf("problem %v does not match jnf.ErrVerification", p)
			}
			return
		}
	}
	t.Errorf("no problem of kind %s mentions all of %q; got:\n%+v", kind, parts, rep.Problems)
}

func TestCheckCleanConversion(t *testing.T) {
	rep := check(t, converted(t, -1))
	if !rep.OK() || !rep.Complete || rep.RecordsChecked != rep.Records || rep.Records == 0 {
		t.Fatalf("clean conversion: %+v", rep)
	}
}

// TestCheckBLAKE3OnlyMismatch: a record whose bytes still match its SHA-256
// but not its BLAKE3 (the table and manifest edited consistently) is found.
func TestCheckBLAKE3OnlyMismatch(t *testing.T) {
	dir := converted(t, -1)
	name := "model.layers.1.mlp.experts.2"
	other := strings.Repeat("ab", 32)
	rewriteTable(t, filepath.Join(dir, "layer-00001.jnf"), func(tb *jnf.Table) {
		for i := range tb.Records {
			if tb.Records[i].Name == name {
				tb.Records[i].BLAKE3 = other
			}
		}
	})
	rebuildManifest(t, dir)
	wantProblem(t, check(t, dir), KindDigest, "layer 1 expert 2", "blake3 mismatch", "want "+other)
}

// TestCheckPadding: a non-zero byte between the record table and the first
// record, and after a record, is found.
func TestCheckPadding(t *testing.T) {
	dir := converted(t, -1)
	p := filepath.Join(dir, "layer-00002.jnf")
	f, err := jnf.OpenFile(p)
	if err != nil {
		t.Fatal(err)
	}
	tableEnd := int64(jnf.PreambleSize + len(f.TableBytes))
	r0 := f.Table.Records[0]
	f.Close()
	b, _ := os.ReadFile(p)
	b[tableEnd+1] = 7
	b[r0.Offset+r0.Length] = 9
	os.WriteFile(p, b, 0o644)
	rep := check(t, dir)
	wantProblem(t, rep, KindPadding, "layer-00002.jnf", "padding after the record table")
	wantProblem(t, rep, KindPadding, r0.Name, "padding after the record")
}

// TestCheckExtraFiles: *.jnf files the manifest does not list are refused,
// whatever their name.
func TestCheckExtraFiles(t *testing.T) {
	full := converted(t, -1)
	part := converted(t, 1) // global and layers 0–1 of 4
	if err := os.WriteFile(filepath.Join(part, "layer-00003.jnf"), mustRead(t, filepath.Join(full, "layer-00003.jnf")), 0o644); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, check(t, part), KindExtra, "layer-00003.jnf", "in the files but not in the manifest")
	if _, err := OpenDir(context.Background(), part); !errors.Is(err, jnf.ErrVerification) || !strings.Contains(err.Error(), "in the files but not in the manifest") {
		t.Errorf("OpenDir with an extra layer file: %v", err)
	}
	for name, why := range map[string]string{"layer-00099.jnf": "the model has 4 layers", "extra.jnf": "not a JNF file name"} {
		dir := converted(t, -1)
		os.WriteFile(filepath.Join(dir, name), mustRead(t, filepath.Join(dir, "layer-00001.jnf")), 0o644)
		wantProblem(t, check(t, dir), KindExtra, name, why)
		if _, err := OpenDir(context.Background(), dir); !errors.Is(err, jnf.ErrVerification) || !strings.Contains(err.Error(), why) {
			t.Errorf("OpenDir with %s: %v", name, err)
		}
	}
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheckCanonicalOrder: records out of canonical order are refused in a
// table (rewritten consistently) and in a manifest (roots recomputed).
func TestCheckCanonicalOrder(t *testing.T) {
	dir := converted(t, -1)
	rewriteTable(t, filepath.Join(dir, "layer-00000.jnf"), func(tb *jnf.Table) {
		tb.Records[0], tb.Records[1] = tb.Records[1], tb.Records[0]
	})
	wantProblem(t, check(t, dir), KindFormat, "layer-00000.jnf", "out of order")

	dir = converted(t, -1)
	forgeManifest(t, dir, func(m *Manifest) {
		// The last two experts swapped, each at the other's offset: packed,
		// but out of canonical order.
		a, b := &m.Entries[len(m.Entries)-2], &m.Entries[len(m.Entries)-1]
		*a, *b = *b, *a
		a.Offset, b.Offset = b.Offset, a.Offset
	})
	wantProblem(t, check(t, dir), KindManifest, "manifest.json", "out of order")
}

// TestCheckManifestFieldsAreCovered: the manifest's own fields, forged
// consistently (roots recomputed), are refused: by ParseManifest where the
// entries imply them, by comparison with the files otherwise.
func TestCheckManifestFieldsAreCovered(t *testing.T) {
	part := converted(t, 1)
	forgeManifest(t, part, func(m *Manifest) { m.Complete = true })
	wantProblem(t, check(t, part), KindManifest, "manifest.json", "complete = true, the entries say false")

	for _, c := range []struct {
		name string
		edit func(*Manifest)
		want string
	}{
		{"arch", func(m *Manifest) { m.Arch = "llama (evil)" }, `arch="llama (evil)"`},
		{"layers", func(m *Manifest) { m.Layers, m.Complete = 99, false }, "layers=99"},
		{"source digest", func(m *Manifest) { m.Sources[0].SHA256 = strings.Repeat("0", 64) }, "source=" + m0(t).Sources[0].File + " "},
		{"ignored", func(m *Manifest) { m.Ignored = append(m.Ignored, jnf.Ignored{Name: "x", Reason: "y", Bytes: 1}) }, `ignored="x" 1 "y"`},
		{"layout", func(m *Manifest) { m.Layout = jnf.LayoutFused }, `layout="fused"`},
	} {
		dir := converted(t, -1)
		forgeManifest(t, dir, c.edit)
		if _, _, err := LoadManifest(dir); err != nil {
			t.Errorf("%s: the forged manifest does not even load: %v", c.name, err)
			continue
		}
		wantProblem(t, check(t, dir), KindManifest, "manifest.json", "own fields differ from what the files say", c.want)
	}

	// Derived fields that do not match the entries, roots recomputed.
	for _, c := range []struct {
		name string
		edit func(*Manifest)
		want string
	}{
		{"layers_present", func(m *Manifest) { m.LayersHeld = []int{0, 1, 2} }, "layers_present"},
		{"config_sha256", func(m *Manifest) { m.ConfigSHA256 = strings.Repeat("1", 64) }, "config_sha256"},
		{"unused source", func(m *Manifest) {
			m.Sources = append(m.Sources, jnf.SourceFile{File: "zz.safetensors", Size: 1, SHA256: strings.Repeat("2", 64)})
		}, "no entry draws bytes"},
	} {
		dir := converted(t, -1)
		forgeManifest(t, dir, c.edit)
		_, _, err := LoadManifest(dir)
		if !errors.Is(err, jnf.ErrVerification) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

func m0(t *testing.T) *Manifest {
	t.Helper()
	m, _, err := LoadManifest(converted(t, -1))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestCheckTableFieldsAreCovered: table fields outside the records
// (sources, layout, ignored) edited consistently are found.
func TestCheckTableFieldsAreCovered(t *testing.T) {
	for name, edit := range map[string]func(*jnf.Table){
		"source digest": func(tb *jnf.Table) { tb.Sources[0].SHA256 = strings.Repeat("3", 64) },
		"layout":        func(tb *jnf.Table) { tb.Layout = jnf.LayoutFused },
		"ignored":       func(tb *jnf.Table) { tb.Ignored = append(tb.Ignored, jnf.Ignored{Name: "x", Reason: "y", Bytes: 1}) },
	} {
		dir := converted(t, -1)
		rewriteTable(t, filepath.Join(dir, "global.jnf"), edit)
		rep := check(t, dir)
		if rep.OK() {
			t.Errorf("%s edited in global.jnf: verify found nothing", name)
		}
	}
}

// TestConfigCheckedBeforeParse: a config.json edited to absurd sizes is
// refused by its digest, in bounded time and memory, before it is parsed;
// with the manifest forged to match, the bounds refuse it.
func TestConfigCheckedBeforeParse(t *testing.T) {
	for _, n := range []string{"1000000000", "1000000000000", "4611686018427387904"} {
		dir := converted(t, -1)
		p := filepath.Join(dir, "config.json")
		b := mustRead(t, p)
		var cfg map[string]any
		json.Unmarshal(b, &cfg)
		nb := strings.Replace(string(b), `"num_hidden_layers": 4`, `"num_hidden_layers": `+n, 1)
		if nb == string(b) {
			t.Fatalf("fixture config has no \"num_hidden_layers\": 4: %s", b)
		}
		os.WriteFile(p, []byte(nb), 0o644)
		wantProblem(t, check(t, dir), KindDigest, "config.json changed")
		var cc *ConfigChangedError
		if _, err := OpenDir(context.Background(), dir); !errors.As(err, &cc) {
			t.Errorf("OpenDir: %v", err)
		}
		forgeManifest(t, dir, func(m *Manifest) {
			for i := range m.Entries {
				if m.Entries[i].Name == "config.json" {
					d := jnf.SumBytes([]byte(nb))
					m.Entries[i].SHA256, m.Entries[i].BLAKE3, m.Entries[i].Length = d.SHA256.Hex(), d.BLAKE3.Hex(), int64(len(nb))
					m.ConfigSHA256 = d.SHA256.Hex()
				}
			}
		})
		_, err := OpenDir(context.Background(), dir)
		if err == nil || !strings.Contains(err.Error(), "num_hidden_layers") || !errors.Is(err, jnf.ErrVerification) {
			t.Errorf("num_hidden_layers %s with a matching manifest: %v", n, err)
		}
		wantProblem(t, check(t, dir), KindFormat, "num_hidden_layers")
	}
}

// TestWeightsRootCheckedOnLoad: weights_root is derived from the content
// leaves and re-derived by every reader; an edited value is refused even
// with the root recomputed.
func TestWeightsRootCheckedOnLoad(t *testing.T) {
	dir := converted(t, -1)
	b := mustRead(t, filepath.Join(dir, ManifestFile))
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	root, _ := m.ComputeRoots()
	m.Root, m.WeightsRoot = hex.EncodeToString(root[:]), strings.Repeat("5", 64)
	if err := m.Write(dir); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadManifest(dir); err == nil || !strings.Contains(err.Error(), "weights_root mismatch") || !errors.Is(err, jnf.ErrVerification) {
		t.Errorf("edited weights_root: %v", err)
	}
}

// TestCheckStopsWhenCancelled: Check returns the context's error, not a
// report, when it is cancelled.
func TestCheckStopsWhenCancelled(t *testing.T) {
	dir := converted(t, -1)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Check(ctx, dir, CheckOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Check: %v", err)
	}
}

func TestMissingConfigIsAVerificationFailure(t *testing.T) {
	dir := converted(t, -1)
	os.Remove(filepath.Join(dir, "config.json"))
	if _, err := OpenDir(context.Background(), dir); !errors.Is(err, jnf.ErrVerification) || !strings.Contains(err.Error(), "the manifest lists it") {
		t.Errorf("config.json removed: %v", err)
	}
}
