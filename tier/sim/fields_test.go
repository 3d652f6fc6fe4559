package sim

import (
	"reflect"
	"testing"
)

// fill sets field i of the struct v points to to base+i (every field must
// be an int, int64 or float64: a new kind of field needs its sum taught).
func fill(t *testing.T, v any, base float64) {
	t.Helper()
	rv := reflect.ValueOf(v).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		switch f.Kind() {
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(base) + int64(i))
		case reflect.Float64:
			f.SetFloat(base + float64(i))
		default:
			t.Fatalf("%s.%s is a %s: teach this test and the type's add its sum", rv.Type().Name(), rv.Type().Field(i).Name, f.Kind())
		}
	}
}

// number is field i of struct v as a float64.
func number(v reflect.Value, i int) float64 {
	if f := v.Field(i); f.Kind() == reflect.Float64 {
		return f.Float()
	}
	return float64(v.Field(i).Int())
}

// The field-by-field sums cover every field: a field added to the struct
// and forgotten in add (the bug backend.Counters.Sub had) fails here.
func TestAddCoversEveryField(t *testing.T) {
	t.Run("Stages.add", func(t *testing.T) {
		var s, o Stages
		fill(t, &s, 100)
		fill(t, &o, 10)
		s.add(o)
		v := reflect.ValueOf(s)
		for i := range v.NumField() {
			if got, want := number(v, i), 110+2*float64(i); got != want {
				t.Errorf("Stages.add: %s = %v, want %v", v.Type().Field(i).Name, got, want)
			}
		}
	})
	t.Run("Stages.scale", func(t *testing.T) {
		var s Stages
		fill(t, &s, 100)
		s.scale(0.5)
		v := reflect.ValueOf(s)
		for i := range v.NumField() {
			if got, want := number(v, i), (100+float64(i))/2; got != want {
				t.Errorf("Stages.scale: %s = %v, want %v", v.Type().Field(i).Name, got, want)
			}
		}
	})
	t.Run("Counters.add", func(t *testing.T) {
		var c, o Counters
		fill(t, &c, 100)
		fill(t, &o, 10)
		c.add(o)
		v := reflect.ValueOf(c)
		for i := range v.NumField() {
			if got, want := number(v, i), 110+2*float64(i); got != want {
				t.Errorf("Counters.add: %s = %v, want %v", v.Type().Field(i).Name, got, want)
			}
		}
	})
}
