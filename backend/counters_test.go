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
		default:
			t.Fatalf("Counters.%s is a %s: teach this test (and Sub) its difference", cv.Type().Field(i).Name, cv.Field(i).Kind())
		}
	}
	d := reflect.ValueOf(c.Sub(o))
	for i := range d.NumField() {
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
