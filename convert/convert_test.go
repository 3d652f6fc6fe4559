package convert

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarfa-ai/tarfa/internal/outdir"
	"github.com/tarfa-ai/tarfa/jnf"
	"github.com/tarfa-ai/tarfa/verify"
)

const fixtures = "../validation/testdata/fixtures/"

func convert(t *testing.T, src string, opt Options) (string, *Result) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "jnf")
	opt.LastLayer = -1 + opt.LastLayer
	res, err := Convert(context.Background(), src, dst, opt)
	if err != nil {
		t.Fatal(err)
	}
	return dst, res
}

func all() Options { return Options{LastLayer: 0, Verify: true} } // LastLayer 0 → -1 after the helper's shift

func check(t *testing.T, dir string) *verify.Report {
	t.Helper()
	rep, err := verify.Check(context.Background(), dir, verify.CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestConvertFixturesAndVerify(t *testing.T) {
	for _, d := range []string{"qwen3moe-dev-a/checkpoint", "qwen35moe-dev-c/checkpoint", "qwen35moe-dev-c/checkpoint-official", "qwen35moe-dev-e-long/checkpoint"} {
		t.Run(d, func(t *testing.T) {
			dst, res := convert(t, fixtures+d, all())
			m := res.Manifest
			if !m.Complete || len(res.Written) != m.Layers+1 || res.Verified != res.Bytes || res.Bytes == 0 {
				t.Errorf("complete %v, written %d files, verified %d of %d bytes", m.Complete, len(res.Written), res.Verified, res.Bytes)
			}
			rep := check(t, dst)
			if !rep.OK() || rep.RecordsChecked != rep.Records {
				t.Errorf("fresh conversion does not verify: %+v", rep.Problems)
			}
			for _, f := range []string{"config.json", "global.jnf", "layer-00000.jnf", "manifest.json"} {
				if _, err := os.Stat(filepath.Join(dst, f)); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func TestLayoutsShareWeightsRootForExperts(t *testing.T) {
	_, a := convert(t, fixtures+"qwen35moe-dev-c/checkpoint", all())
	_, b := convert(t, fixtures+"qwen35moe-dev-c/checkpoint-official", all())
	if a.Manifest.Root == b.Manifest.Root {
		t.Error("different layouts gave the same full root")
	}
	// Expert content leaves are identical across layouts; tensors differ only where the dtype does (A_log, norm: F32 vs BF16).
	leaves := func(m *verify.Manifest) map[string]string {
		out := map[string]string{}
		for _, e := range m.Entries {
			out[e.Name] = string(e.ContentLeaf())
		}
		return out
	}
	la, lb := leaves(a.Manifest), leaves(b.Manifest)
	differ := 0
	for name, leaf := range la {
		if strings.HasPrefix(name, "model.") || name == "lm_head.weight" {
			if lb[name] != leaf {
				differ++
				if !strings.HasSuffix(name, "A_log") && !strings.HasSuffix(name, "linear_attn.norm.weight") {
					t.Errorf("%s differs between layouts", name)
				}
			}
		}
	}
	if differ == 0 {
		t.Error("expected the F32 tensors of the official layout to differ")
	}
}

func TestDeterministicAndResumable(t *testing.T) {
	src := fixtures + "qwen35moe-dev-c/checkpoint"
	a, ra := convert(t, src, all())
	b, rb := convert(t, src, Options{LastLayer: 0, Workers: 4})
	if ra.Manifest.Root != rb.Manifest.Root {
		t.Fatalf("roots differ: %s vs %s", ra.Manifest.Root, rb.Manifest.Root)
	}
	ents, _ := os.ReadDir(a)
	for _, e := range ents {
		x, _ := os.ReadFile(filepath.Join(a, e.Name()))
		y, _ := os.ReadFile(filepath.Join(b, e.Name()))
		if !bytes.Equal(x, y) {
			t.Errorf("%s differs between two conversions", e.Name())
		}
	}
	// Simulate a kill: a stale temp file (of a run whose write journal
	// recorded the name), one layer missing, one layer corrupted.
	os.WriteFile(filepath.Join(b, outdir.JournalName), []byte("layer-00002.jnf\n"), 0o644)
	os.WriteFile(filepath.Join(b, ".layer-00002.jnf.tmp-123"), []byte("partial"), 0o644)
	os.Remove(filepath.Join(b, "layer-00001.jnf"))
	flipByte(t, filepath.Join(b, "layer-00003.jnf"), -100)
	res, err := Convert(context.Background(), src, b, Options{LastLayer: -1})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(res.Written, ",") != "layer-00001.jnf,layer-00003.jnf" {
		t.Errorf("resume rewrote %v, want layers 1 and 3", res.Written)
	}
	if len(res.Resumed) != 3 {
		t.Errorf("resume kept %v", res.Resumed)
	}
	if res.Manifest.Root != ra.Manifest.Root {
		t.Error("resumed conversion has a different root")
	}
	// Nothing left to write: every file is re-verified and kept, no source shard is hashed again.
	res, err = Convert(context.Background(), src, b, Options{LastLayer: -1})
	if err != nil || len(res.Written) != 0 || len(res.Resumed) != 5 || res.ShardsHashed != 0 {
		t.Errorf("second resume: written %v, resumed %v, %d shards hashed, %v", res.Written, res.Resumed, res.ShardsHashed, err)
	}
	if _, err := os.Stat(filepath.Join(b, ".layer-00002.jnf.tmp-123")); !os.IsNotExist(err) {
		t.Error("stale temp file left behind")
	}
}

func TestLayerRangesInParts(t *testing.T) {
	src := fixtures + "qwen3moe-dev-a/checkpoint"
	full, rf := convert(t, src, all())
	_ = full
	dst := filepath.Join(t.TempDir(), "parts")
	r1, err := Convert(context.Background(), src, dst, Options{FirstLayer: 0, LastLayer: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r1.Manifest.Complete || len(r1.Manifest.LayersHeld) != 2 {
		t.Errorf("after part 1: complete %v layers %v", r1.Manifest.Complete, r1.Manifest.LayersHeld)
	}
	r2, err := Convert(context.Background(), src, dst, Options{FirstLayer: 2, LastLayer: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !r2.Manifest.Complete || r2.Manifest.Root != rf.Manifest.Root {
		t.Errorf("converting in parts gave complete=%v root %s, want %s", r2.Manifest.Complete, r2.Manifest.Root, rf.Manifest.Root)
	}
	if _, err := Convert(context.Background(), src, dst, Options{FirstLayer: 3, LastLayer: 9}); err == nil || !strings.Contains(err.Error(), "outside the model's layers 0-3") {
		t.Errorf("bad range: %v", err)
	}
	// Another model into the same directory is refused.
	if _, err := Convert(context.Background(), fixtures+"qwen35moe-dev-c/checkpoint", dst, Options{LastLayer: -1}); err == nil || !strings.Contains(err.Error(), "different config.json") {
		t.Errorf("mixing models: %v", err)
	}
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if off < 0 {
		off += int64(len(b))
	}
	b[off] ^= 0x01
	os.WriteFile(path, b, 0o644)
}

func firstExpert(t *testing.T, dir string, layer int) jnf.Record {
	f, err := jnf.OpenFile(filepath.Join(dir, jnf.FileName(layer)))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, r := range f.Table.Records {
		if r.Kind == jnf.KindExpert && r.Expert == 1 {
			return r
		}
	}
	t.Fatal("no expert 1")
	return jnf.Record{}
}

func TestCorruptionDetected(t *testing.T) {
	src := fixtures + "qwen3moe-dev-a/checkpoint"
	pristine, _ := convert(t, src, Options{LastLayer: 0})
	cases := []struct {
		name   string
		break_ func(t *testing.T, dir string)
		want   string
	}{
		{"bit in expert record", func(t *testing.T, d string) {
			r := firstExpert(t, d, 2)
			flipByte(t, filepath.Join(d, "layer-00002.jnf"), r.Offset+r.Length/2)
		}, "layer-00002.jnf: layer 2 expert 1 (model.layers.2.mlp.experts.1) at offset"},
		{"bit in padding", func(t *testing.T, d string) {
			f, _ := jnf.OpenFile(filepath.Join(d, "layer-00001.jnf"))
			r := f.Table.Records[0] // a norm weight: far shorter than 4096 bytes
			f.Close()
			flipByte(t, filepath.Join(d, "layer-00001.jnf"), r.Offset+r.Length+3)
		}, "non-zero byte in the padding after the record"},
		{"manifest digest edited", func(t *testing.T, d string) {
			p := filepath.Join(d, "manifest.json")
			b, _ := os.ReadFile(p)
			var m map[string]any
			json.Unmarshal(b, &m)
			e := m["entries"].([]any)[10].(map[string]any)
			s := e["sha256"].(string)
			e["sha256"] = "0" + s[1:]
			if s[0] == '0' {
				e["sha256"] = "1" + s[1:]
			}
			b, _ = json.Marshal(m)
			os.WriteFile(p, b, 0o644)
		}, "manifest root mismatch"},
		{"truncated file", func(t *testing.T, d string) {
			p := filepath.Join(d, "layer-00003.jnf")
			st, _ := os.Stat(p)
			os.Truncate(p, st.Size()-4096)
		}, "truncated or extended"},
		{"swapped files", func(t *testing.T, d string) {
			a, b := filepath.Join(d, "layer-00001.jnf"), filepath.Join(d, "layer-00002.jnf")
			os.Rename(a, a+".x")
			os.Rename(b, a)
			os.Rename(a+".x", b)
		}, "renamed or swapped file"},
		{"swapped records", func(t *testing.T, d string) {
			// Swap the bytes of experts 1 and 2 of layer 0 (same length).
			p := filepath.Join(d, "layer-00000.jnf")
			f, _ := jnf.OpenFile(p)
			var r1, r2 jnf.Record
			for _, r := range f.Table.Records {
				if r.Kind == jnf.KindExpert && r.Expert == 1 {
					r1 = r
				}
				if r.Kind == jnf.KindExpert && r.Expert == 2 {
					r2 = r
				}
			}
			f.Close()
			b, _ := os.ReadFile(p)
			x := append([]byte(nil), b[r1.Offset:r1.Offset+r1.Length]...)
			copy(b[r1.Offset:], b[r2.Offset:r2.Offset+r2.Length])
			copy(b[r2.Offset:], x)
			os.WriteFile(p, b, 0o644)
		}, "layer 0 expert 1 (model.layers.0.mlp.experts.1) at offset"},
		{"record table edited", func(t *testing.T, d string) {
			flipByte(t, filepath.Join(d, "layer-00000.jnf"), jnf.PreambleSize+20)
		}, "record table digest mismatch"},
		{"aux file edited", func(t *testing.T, d string) {
			p := filepath.Join(d, "generation_config.json")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, append(b, ' '), 0o644)
		}, "generation_config.json: manifest says sha256"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := filepath.Join(t.TempDir(), "m")
			copyDir(t, pristine, d)
			if rep := check(t, d); !rep.OK() {
				t.Fatalf("pristine copy fails: %v", rep.Problems)
			}
			tc.break_(t, d)
			rep := check(t, d)
			if rep.OK() {
				t.Fatal("corruption not detected")
			}
			var msgs []string
			for _, p := range rep.Problems {
				msgs = append(msgs, p.Error())
			}
			if !strings.Contains(strings.Join(msgs, "\n"), tc.want) {
				t.Errorf("problems:\n%s\nwant one containing %q", strings.Join(msgs, "\n"), tc.want)
			}
		})
	}
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	os.MkdirAll(dst, 0o755)
	ents, _ := os.ReadDir(src)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644)
	}
}

func TestCheckReportIndependentOfWorkers(t *testing.T) {
	dir, _ := convert(t, fixtures+"qwen35moe-dev-e-long/checkpoint", Options{LastLayer: 0})
	for _, l := range []int{1, 4, 6} {
		flipByte(t, filepath.Join(dir, jnf.FileName(l)), -5000)
	}
	var reports []string
	for _, w := range []int{1, 2, 5} {
		rep, err := verify.Check(context.Background(), dir, verify.CheckOptions{Workers: w})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(rep)
		reports = append(reports, string(b))
		if len(rep.Problems) != 3 || rep.RecordsChecked != rep.Records {
			t.Errorf("%d workers: %d problems, %d of %d records", w, len(rep.Problems), rep.RecordsChecked, rep.Records)
		}
	}
	if reports[0] != reports[1] || reports[0] != reports[2] {
		t.Errorf("reports differ with the worker count:\n%s\n%s", reports[0], reports[2])
	}
	rep, _ := verify.Check(context.Background(), dir, verify.CheckOptions{MaxProblems: 2})
	if len(rep.Problems) != 2 {
		t.Errorf("MaxProblems 2: %d problems", len(rep.Problems))
	}
	rep, _ = verify.Check(context.Background(), dir, verify.CheckOptions{Sample: 0.3, Seed: 9})
	if rep.RecordsChecked == 0 || rep.RecordsChecked >= rep.Records {
		t.Errorf("sample 0.3: %d of %d records", rep.RecordsChecked, rep.Records)
	}
}

// interrupt converts src into dst with one worker and cancels the conversion
// once stopAfter record bytes are done, like a kill part-way through a file.
func interrupt(t *testing.T, src, dst string, stopAfter int64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := Convert(ctx, src, dst, Options{LastLayer: -1, Workers: 1, Progress: func(done, total int64) {
		if done >= stopAfter {
			cancel()
		}
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted conversion: %v", err)
	}
}

// hashedBy is the bytes of the source shards a conversion hashes (each
// once, counted in Progress) by the time it has started the last of files.
func hashedBy(t *testing.T, dir string, files ...string) int64 {
	t.Helper()
	seen := map[string]bool{}
	var n int64
	for _, file := range files {
		f, err := jnf.OpenFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range f.Table.Sources {
			if !seen[s.File] {
				seen[s.File] = true
				n += s.Size
			}
		}
		f.Close()
	}
	return n
}

// fileRecords is the record table of file in a finished conversion.
func fileRecords(t *testing.T, dir, file string) []jnf.Record {
	t.Helper()
	f, err := jnf.OpenFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return f.Table.Records
}

func sumLengths(recs []jnf.Record) (n int64) {
	for _, r := range recs {
		n += r.Length
	}
	return n
}

func sameFiles(t *testing.T, want, got string) {
	t.Helper()
	ents, err := os.ReadDir(got)
	if err != nil {
		t.Fatal(err)
	}
	wantEnts, _ := os.ReadDir(want)
	if len(ents) != len(wantEnts) {
		t.Errorf("%d entries, want %d: %v", len(ents), len(wantEnts), ents)
	}
	for _, e := range wantEnts {
		x, _ := os.ReadFile(filepath.Join(want, e.Name()))
		y, err := os.ReadFile(filepath.Join(got, e.Name()))
		if err != nil || !bytes.Equal(x, y) {
			t.Errorf("%s differs from a clean conversion (%v)", e.Name(), err)
		}
	}
}

func TestResumeInsideAFile(t *testing.T) {
	src := fixtures + "qwen3moe-dev-a/checkpoint"
	clean, ref := convert(t, src, Options{LastLayer: 0, Workers: 1})
	layer1 := fileRecords(t, clean, "layer-00001.jnf")
	if len(layer1) < 6 {
		t.Fatalf("layer 1 has only %d records", len(layer1))
	}
	// Stop inside layer-00001.jnf, after about half its records.
	stop := hashedBy(t, clean, "global.jnf", "layer-00000.jnf", "layer-00001.jnf") +
		sumLengths(fileRecords(t, clean, "global.jnf")) + sumLengths(fileRecords(t, clean, "layer-00000.jnf")) +
		sumLengths(layer1[:len(layer1)/2])
	partial := func(dir string) string { return jnf.PartialName(filepath.Join(dir, "layer-00001.jnf")) }
	journalLines := func(dir string) int {
		b, err := os.ReadFile(journalName(filepath.Join(dir, "layer-00001.jnf")))
		if err != nil {
			t.Fatal(err)
		}
		return bytes.Count(b, []byte("\n"))
	}

	for _, c := range []struct {
		name string
		harm func(t *testing.T, dir string, journaled int)
		keep func(journaled int) int // records a resume must salvage
	}{
		{"as interrupted", func(*testing.T, string, int) {}, func(j int) int { return j }},
		{"flipped byte in a journaled record", func(t *testing.T, dir string, _ int) {
			flipByte(t, partial(dir), layer1[2].Offset+layer1[2].Length-1)
		}, func(int) int { return 2 }},
		{"torn journal tail", func(t *testing.T, dir string, _ int) {
			f, _ := os.OpenFile(journalName(filepath.Join(dir, "layer-00001.jnf")), os.O_WRONLY|os.O_APPEND, 0)
			f.WriteString(`{"record":99,"sha2`)
			f.Close()
		}, func(j int) int { return j }},
		{"journal of another plan", func(t *testing.T, dir string, _ int) {
			p := journalName(filepath.Join(dir, "layer-00001.jnf"))
			b, _ := os.ReadFile(p)
			i := bytes.Index(b, []byte(`"plan_sha256":"`)) + len(`"plan_sha256":"`)
			b[i] ^= 1
			os.WriteFile(p, b, 0o644)
		}, func(int) int { return 0 }},
		{"partial file truncated", func(t *testing.T, dir string, _ int) {
			os.Truncate(partial(dir), layer1[1].Offset+1)
		}, func(int) int { return 1 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "jnf")
			interrupt(t, src, dst, stop)
			if _, err := os.Stat(filepath.Join(dst, "layer-00001.jnf")); !os.IsNotExist(err) {
				t.Fatalf("interrupted file exists under its final name: %v", err)
			}
			journaled := journalLines(dst) - 1
			if journaled < 3 || journaled >= len(layer1) {
				t.Fatalf("%d of %d records journaled; the test wants an interruption in the middle", journaled, len(layer1))
			}
			c.harm(t, dst, journaled)
			var logBuf bytes.Buffer
			res, err := Convert(context.Background(), src, dst, Options{LastLayer: -1, Verify: true, Log: slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			if err != nil {
				t.Fatal(err)
			}
			want := c.keep(journaled)
			if res.SalvagedRecords != want || res.Salvaged != sumLengths(layer1[:want]) {
				t.Errorf("salvaged %d records (%d bytes), want %d (%d bytes)", res.SalvagedRecords, res.Salvaged, want, sumLengths(layer1[:want]))
			}
			if strings.Join(res.Resumed, ",") != "global.jnf,layer-00000.jnf" {
				t.Errorf("kept whole files %v", res.Resumed)
			}
			if res.Bytes+res.Salvaged+sumLengths(fileRecords(t, clean, "global.jnf"))+sumLengths(fileRecords(t, clean, "layer-00000.jnf")) != sumLengths(layerRecords(t, clean)) {
				t.Errorf("copied %d + salvaged %d bytes do not add up to the rest of the model", res.Bytes, res.Salvaged)
			}
			if res.Verified != res.Bytes+res.Salvaged {
				t.Errorf("--verify compared %d bytes, want every byte of the written files (%d)", res.Verified, res.Bytes+res.Salvaged)
			}
			if res.Manifest.Root != ref.Manifest.Root {
				t.Error("resumed conversion has a different root")
			}
			sameFiles(t, clean, dst) // also: no partial file or journal left behind
			if quiet := c.name == "as interrupted"; quiet != (logBuf.Len() == 0) {
				t.Errorf("warnings (want some: %v): %s", !quiet, logBuf.String())
			}
		})
	}
}

// layerRecords lists every record of a finished conversion.
func layerRecords(t *testing.T, dir string) []jnf.Record {
	t.Helper()
	var out []jnf.Record
	m, _, err := verify.LoadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range m.Entries {
		if e.Kind != jnf.KindFile {
			out = append(out, e.Record)
		}
	}
	return out
}

// A journaled record whose bytes match its journal but not the source (the
// source changed, or memory flipped a bit while copying): --verify refuses the
// file and discards the partial, so the next run starts that file afresh.
func TestResumeVerifyDiscardsPartialThatDiffersFromSource(t *testing.T) {
	src := fixtures + "qwen3moe-dev-a/checkpoint"
	clean, ref := convert(t, src, Options{LastLayer: 0, Workers: 1})
	layer1 := fileRecords(t, clean, "layer-00001.jnf")
	dst := filepath.Join(t.TempDir(), "jnf")
	interrupt(t, src, dst, hashedBy(t, clean, "global.jnf", "layer-00000.jnf", "layer-00001.jnf")+
		sumLengths(fileRecords(t, clean, "global.jnf"))+sumLengths(fileRecords(t, clean, "layer-00000.jnf"))+sumLengths(layer1[:len(layer1)/2]))
	path := filepath.Join(dst, "layer-00001.jnf")
	r := layer1[1]
	flipByte(t, jnf.PartialName(path), r.Offset)
	data, _ := os.ReadFile(jnf.PartialName(path))
	d := jnf.SumBytes(data[r.Offset : r.Offset+r.Length])
	j, _ := os.ReadFile(journalName(path))
	j = bytes.Replace(j, []byte(r.SHA256), []byte(d.SHA256.Hex()), 1)
	j = bytes.Replace(j, []byte(r.BLAKE3), []byte(d.BLAKE3.Hex()), 1)
	os.WriteFile(journalName(path), j, 0o644)

	// One worker: no other file is in flight (and suspended) when this one fails.
	_, err := Convert(context.Background(), src, dst, Options{LastLayer: -1, Workers: 1, Verify: true})
	if err == nil || !strings.Contains(err.Error(), "layer-00001.jnf: record "+r.Name+": byte at offset") {
		t.Fatalf("resume with a record differing from the source: %v", err)
	}
	for _, p := range []string{jnf.PartialName(path), journalName(path)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s kept after it was shown to differ from the source", p)
		}
	}
	res, err := Convert(context.Background(), src, dst, Options{LastLayer: -1, Verify: true})
	if err != nil || res.SalvagedRecords != 0 || res.Manifest.Root != ref.Manifest.Root {
		t.Fatalf("next run: %v, salvaged %d records", err, res.SalvagedRecords)
	}
	sameFiles(t, clean, dst)
}
