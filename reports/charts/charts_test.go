package charts

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const results = "../../validation/decodebench/results"

// TestCommittedCharts draws every committed bench decode result and
// compares each chart with the PNG committed next to it: a result changed
// without its charts (or a chart edited by hand) fails here.
func TestCommittedCharts(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(results, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no results in %s: %v", results, err)
	}
	for _, path := range files {
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		res, err := Parse(path, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		base := strings.TrimSuffix(path, ".json")
		cs, err := Draw(filepath.Base(base), res)
		if err != nil {
			t.Fatal(err)
		}
		if len(cs) < 3 {
			t.Errorf("%s: %d charts", path, len(cs))
		}
		for _, c := range cs {
			want, err := os.ReadFile(base + "-" + c.Name + ".png")
			if err != nil {
				t.Errorf("%s: %v (go run ./reports/cmd/charts %s)", path, err, path)
				continue
			}
			if !bytes.Equal(c.PNG, want) {
				t.Errorf("%s-%s.png is not what %s draws: run go run ./reports/cmd/charts %s", base, c.Name, path, path)
			}
		}
	}
}

// deviceResult is a result of a device backend with every figure the
// charts draw.
const deviceResult = `{"host":{"gomaxprocs":16},
 "raw":{"gbps":{"n":3,"median":1.3}},"hash_per_core":{"gbps":{"n":3,"median":2}},
 "decode":[
  {"name":"cuda 16 GiB auto, RAM 27%, cold","backend":{"backend":"cuda","vram_budget":17179869184,"placement":"auto"},"ram_fraction":0.27,"ram_budget":6000000000,"seconds_per_token":{"n":3,"median":0.3},
   "storage_bytes_per_token":{"n":3,"median":3e8},"hit_rate":{"n":3,"median":0.4},"bound_seconds_per_token":0.23,
   "predicted_hit_rate":{"n":3,"median":0.41},"stream_seconds_per_token":{"n":3,"median":0.25},"gap_seconds_per_token":{"n":3,"median":0.05},
   "h2d_seconds_per_token":{"n":3,"median":0.02},"kernel_seconds_per_token":{"n":3,"median":0.03},"hashed_bytes_per_token":{"n":3,"median":3e8},"hashers":16,
   "experts_on_device_per_token":{"n":3,"median":20},"experts_resident_per_token":{"n":3,"median":5},"experts_on_host_per_token":{"n":3,"median":12}},
  {"name":"cuda 16 GiB auto, RAM 27%, warm","backend":{"backend":"cuda"},"ram_fraction":0.27,"ram_budget":6000000000,"warm":true,"seconds_per_token":{"n":3,"median":0.2},
   "hit_rate":{"n":3,"median":0.6}},
  {"name":"cpu, RAM 27%, cold","backend":{"backend":"cpu"},"ram_fraction":0.27,"ram_budget":6000000000,"seconds_per_token":{"n":3,"median":0.33},
   "experts_on_device_per_token":{"n":3,"median":32}}]}`

// TestDrawDeterministic: the same result draws the same bytes, the device
// backend's split chart included, and another result draws other bytes.
func TestDrawDeterministic(t *testing.T) {
	draw := func(js string) []Chart {
		res, err := Parse("test.json", strings.NewReader(js))
		if err != nil {
			t.Fatal(err)
		}
		cs, err := Draw("test", res)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	a, b := draw(deviceResult), draw(deviceResult)
	if len(a) != 4 || a[3].Name != "split" {
		t.Fatalf("%d charts for a device backend, want 4 with split", len(a))
	}
	for i := range a {
		if !bytes.HasPrefix(a[i].PNG, []byte("\x89PNG\r\n\x1a\n")) || !bytes.Equal(a[i].PNG, b[i].PNG) {
			t.Errorf("%s: not a PNG, or not byte-identical across runs", a[i].Name)
		}
	}
	c := draw(strings.Replace(deviceResult, `"median":0.3}`, `"median":0.35}`, 1))
	if bytes.Equal(a[0].PNG, c[0].PNG) {
		t.Errorf("breakdown: another s/token drew the same chart")
	}
}

func TestParseRefuses(t *testing.T) {
	for _, c := range []struct{ js, want string }{
		{`{"decode":[]}`, "0 decode figures"},
		{`[1,2]`, "cannot unmarshal"},
		{`{"decode":[{"name":"x","seconds_per_token":{"n":1,"median":-1}}]}`, `decode[0] ("x") seconds_per_token.median is -1`},
		{`{"decode":[{"name":"x","seconds_per_token":{"n":1,"median":1},"hit_rate":{"median":1.5}}]}`, "hit rate 1.5"},
		{`{"decode":[{"name":"x","seconds_per_token":{"n":0,"median":1}}]}`, "no measured rounds"},
		{`{"raw":{"gbps":{"median":-2}},"decode":[{"name":"x","seconds_per_token":{"n":1,"median":1}}]}`, "raw.gbps.median is -2"},
		{`{"decode":[{"name":"x","seconds_per_token":{"n":1,"median":1},"hashers":-3}]}`, "hashers is -3"},
		{`{"decode":[{"name":"x","seconds_per_token":{"n":1,"median":1}}]` + strings.Repeat(" ", MaxResultBytes), "more than"},
	} {
		_, err := Parse("bad.json", strings.NewReader(c.js))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bad.json") {
			t.Errorf("%.60s: %v, want %q", c.js, err, c.want)
		}
	}
}
