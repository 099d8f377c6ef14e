package rules

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a window length written as "1s", "5m", "1h", "24h" or "7d",
// or a calendar window: "day", "week", "month" (calendar.go).
type Duration time.Duration

// ParseDuration accepts Go duration syntax plus a "d" (24h) suffix, and the
// calendar windows' names.
func ParseDuration(s string) (Duration, error) {
	for d, name := range calendarNames {
		if s == name {
			return d, nil
		}
	}
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil || days < 0 || days > 100000 {
			return 0, fmt.Errorf("invalid duration %q", s)
		}
		return Duration(time.Duration(days) * 24 * time.Hour), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q", s)
	}
	return Duration(d), nil
}

// String writes the duration in the largest whole unit: "1h", "90s", "2d".
func (d Duration) String() string { return string(d.Append(nil)) }

// Append appends d as String writes it: the check path writes each
// limit's window into its answer without a string of its own.
func (d Duration) Append(b []byte) []byte {
	if name, ok := calendarNames[d]; ok {
		return append(b, name...)
	}
	td := time.Duration(d)
	switch {
	case td == 0:
		return append(b, "0s"...)
	case td%(24*time.Hour) == 0 && td >= 48*time.Hour:
		return append(strconv.AppendInt(b, int64(td/(24*time.Hour)), 10), 'd')
	case td%time.Hour == 0:
		return append(strconv.AppendInt(b, int64(td/time.Hour), 10), 'h')
	case td%time.Minute == 0:
		return append(strconv.AppendInt(b, int64(td/time.Minute), 10), 'm')
	case td%time.Second == 0:
		return append(strconv.AppendInt(b, int64(td/time.Second), 10), 's')
	}
	return append(b, td.String()...)
}

// UnmarshalYAML reads a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return fmt.Errorf("line %d: window must be a duration like \"1h\" or day, week, month", n.Line)
	}
	v, err := ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = v
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("window must be a duration string like \"1h\"")
	}
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = v
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }
