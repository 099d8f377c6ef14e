package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// checkBounds applies the validate tags of v's fields (and of the structs v
// embeds), a comma-separated list of:
//
//	min=X, max=X  inclusive bounds (a duration for a time.Duration)
//	gt=X          exclusive lower bound
//	orzero        0 is also accepted ("off")
//	oneof=a b c   one of these words (for a non-string field, e.g. the
//	              log level, the text as given in raw, lower-cased)
//
// A float must also be finite. The error is one line naming the variable
// and the value.
func checkBounds(v reflect.Value, raw map[string]string) error {
	t := v.Type()
	for i := range t.NumField() {
		f, fv := t.Field(i), v.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			if err := checkBounds(fv, raw); err != nil {
				return err
			}
			continue
		}
		rule, ok := f.Tag.Lookup("validate")
		if !ok {
			continue
		}
		name := f.Tag.Get("env")
		want := checkRule(fv, rule, raw[name])
		if want == "" {
			continue
		}
		if help := f.Tag.Get("help"); help != "" {
			want += " (" + help + ")"
		}
		switch {
		case fv.Kind() == reflect.String:
			return fmt.Errorf("%s %q: %s", name, fv.String(), want)
		case raw[name] != "":
			return fmt.Errorf("%s %s: %s", name, raw[name], want) // as given: 90s, not 1m30s
		}
		return fmt.Errorf("%s %v: %s", name, fv.Interface(), want)
	}
	return nil
}

// checkRule returns "" when v keeps rule, else what it should be.
func checkRule(v reflect.Value, rule, raw string) string {
	if words, ok := strings.CutPrefix(rule, "oneof="); ok {
		text := fmt.Sprint(v.Interface())
		if v.Kind() != reflect.String {
			text = strings.ToLower(text)
			if raw != "" {
				text = strings.ToLower(raw)
			}
		}
		if opts := strings.Fields(words); !slices.Contains(opts, text) {
			if len(opts) == 1 {
				return "want " + opts[0]
			}
			return "want " + strings.Join(opts[:len(opts)-1], ", ") + " or " + opts[len(opts)-1]
		}
		return ""
	}
	x, isDur := number(v)
	var lo, hi, gt string
	orZero := false
	for _, part := range strings.Split(rule, ",") {
		key, bound, _ := strings.Cut(part, "=")
		switch key {
		case "min":
			lo = bound
		case "max":
			hi = bound
		case "gt":
			gt = bound
		case "orzero":
			orZero = true
		default:
			panic("config: unknown validate rule " + part) // a constant tag: TestDefaults catches it
		}
	}
	if orZero && x == 0 {
		return ""
	}
	ok := !math.IsNaN(x) && !math.IsInf(x, 0) &&
		(lo == "" || x >= bound(lo, isDur)) && (gt == "" || x > bound(gt, isDur)) && (hi == "" || x <= bound(hi, isDur))
	if ok {
		return ""
	}
	var want string
	switch {
	case lo != "" && hi != "":
		want = "between " + lo + " and " + hi
	case gt != "" && hi != "":
		want = "above " + gt + " and at most " + hi
	case gt != "":
		want = "above " + gt
	case lo != "":
		want = "at least " + lo
	default:
		want = "at most " + hi
	}
	if orZero {
		return "want 0 (off) or " + want
	}
	return "want " + want
}

// number is v as a float64 (a duration in nanoseconds), and whether it is
// a duration.
func number(v reflect.Value) (float64, bool) {
	switch {
	case v.Type() == reflect.TypeFor[time.Duration]():
		return float64(v.Int()), true
	case v.CanInt():
		return float64(v.Int()), false
	case v.CanFloat():
		return v.Float(), false
	}
	panic("config: a bound on a field of type " + v.Type().String())
}

func bound(s string, isDur bool) float64 {
	if isDur {
		d, err := time.ParseDuration(s)
		if err != nil {
			panic("config: bound " + s + ": " + err.Error())
		}
		return float64(d)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		panic("config: bound " + s + ": " + err.Error())
	}
	return f
}
