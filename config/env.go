package config

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"
)

// parse fills s from raw (variable name to trimmed, non-empty value) and
// each field's envDefault, and turns the first error into one line naming
// the variable and its value.
func parse(s *Settings, raw map[string]string) error {
	err := env.ParseWithOptions(s, env.Options{Environment: raw, FuncMap: parsers()})
	if err == nil {
		return nil
	}
	var agg env.AggregateError
	if errors.As(err, &agg) && len(agg.Errors) > 0 {
		err = agg.Errors[0]
	}
	var pe env.ParseError
	if !errors.As(err, &pe) {
		return fmt.Errorf("config: %v", err) // a tag the library refuses: TestDefaults catches it
	}
	name := envNames()[pe.Name]
	if strings.HasPrefix(pe.Err.Error(), name) {
		return pe.Err // the parser named it (QUOTA_AUTH_HEADERS)
	}
	want := pe.Err.Error()
	if w, ok := wants()[pe.Type]; ok {
		want = w
	}
	return fmt.Errorf("%s %q: %s", name, raw[name], want)
}

// parsers read the values of each type as quotad always has; their errors
// are replaced by wants.
func parsers() map[reflect.Type]env.ParserFunc {
	return map[reflect.Type]env.ParserFunc{
		reflect.TypeFor[int]():           func(v string) (any, error) { return strconv.Atoi(v) },
		reflect.TypeFor[float64]():       func(v string) (any, error) { return strconv.ParseFloat(v, 64) },
		reflect.TypeFor[time.Duration](): func(v string) (any, error) { return time.ParseDuration(v) },
		reflect.TypeFor[bool]():          parseOnOff,
		reflect.TypeFor[[]string]():      func(v string) (any, error) { return parseList(v), nil },
		reflect.TypeFor[[]AuthHeader]():  func(v string) (any, error) { return ParseAuthHeaders(v) },
		reflect.TypeFor[HeaderStyle]():   func(v string) (any, error) { return HeaderStyle(strings.ToLower(v)), nil },
	}
}

// wants say what a value that does not parse should have been.
func wants() map[reflect.Type]string {
	return map[reflect.Type]string{
		reflect.TypeFor[int]():           "want an integer",
		reflect.TypeFor[float64]():       "want a number",
		reflect.TypeFor[time.Duration](): "want a duration like 250ms",
		reflect.TypeFor[bool]():          "want on or off",
		reflect.TypeFor[slog.Level]():    "want debug, info, warn or error",
	}
}

func parseOnOff(v string) (any, error) {
	switch strings.ToLower(v) {
	case "on", "true", "1":
		return true, nil
	case "off", "false", "0":
		return false, nil
	}
	return nil, errors.New("want on or off")
}

// parseList splits a comma-separated list, trimming each item and dropping
// empty ones.
func parseList(v string) []string {
	var out []string
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// readEnv reads every variable Settings declares, trimmed; unset and empty
// ones are left out (their defaults apply).
func readEnv(getenv func(string) string) map[string]string {
	raw := map[string]string{}
	for _, name := range envNames() {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			raw[name] = v
		}
	}
	return raw
}

// envNames maps each field of Settings (and of the structs it embeds) that
// is read from the environment to its variable.
func envNames() map[string]string {
	names := map[string]string{}
	eachSetting(reflect.TypeFor[Settings](), func(f reflect.StructField, name string) { names[f.Name] = name })
	return names
}

// eachSetting calls fn with each field of t, and of the structs it
// embeds, that has a variable.
func eachSetting(t reflect.Type, fn func(f reflect.StructField, name string)) {
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			eachSetting(f.Type, fn)
			continue
		}
		if name := f.Tag.Get("env"); name != "" && name != "-" {
			fn(f, name)
		}
	}
}
