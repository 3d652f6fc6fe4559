package backend

import (
	"reflect"
	"testing"
)

// TestCountersSub: Sub subtracts every field of Counters, so a field added
// later and left out of Sub fails here (the four Device* fields once were).
func TestCountersSub(t *testing.T) {
	var c, o Counters
	cv, ov := reflect.ValueOf(&c).Elem(), reflect.ValueOf(&o).Elem()
	for i := range cv.NumField() {
		switch cv.Field(i).Kind() {
		case reflect.Int64:
			cv.Field(i).SetInt(int64(100 + 3*i))
			ov.Field(i).SetInt(int64(i))
		case reflect.Float64:
			cv.Field(i).SetFloat(float64(100 + 3*i))
			ov.Field(i).SetFloat(float64(i))
		case reflect.Map: // KernelTimes: TestKernelTimesSub
		default:
			t.Fatalf("Counters.%s is a %s: teach this test (and Sub) its difference", cv.Type().Field(i).Name, cv.Field(i).Kind())
		}
	}
	d := reflect.ValueOf(c.Sub(o))
	for i := range d.NumField() {
		if d.Field(i).Kind() == reflect.Map {
			continue
		}
		want := float64(100 + 2*i)
		var got float64
		if f := d.Field(i); f.Kind() == reflect.Int64 {
			got = float64(f.Int())
		} else {
			got = f.Float()
		}
		if got != want {
			t.Errorf("Sub: %s = %v, want %v", d.Type().Field(i).Name, got, want)
		}
	}
}

// TestKernelTimesSub: KernelTimes subtract by name; a name with no launches
// in between is left out, and a name new since o is kept whole.
func TestKernelTimesSub(t *testing.T) {
	o := Counters{KernelTimes: map[string]KernelTime{"matmul": {3, 0.5}, "rmsnorm": {2, 0.25}}}
	c := Counters{KernelTimes: map[string]KernelTime{"matmul": {7, 1.5}, "rmsnorm": {2, 0.25}, "silu_mul": {4, 0.125}}}
	got := c.Sub(o).KernelTimes
	want := map[string]KernelTime{"matmul": {4, 1}, "silu_mul": {4, 0.125}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Sub: %v, want %v", got, want)
	}
	if d := o.Sub(o).KernelTimes; d != nil {
		t.Errorf("o − o: %v, want nil", d)
	}
}
