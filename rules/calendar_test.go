package rules_test

import (
	"testing"
	"time"

	"github.com/quota-platform/quota/rules"
)

func TestPeriod_CalendarWindowsStartAtLocalMidnight(t *testing.T) {
	t.Parallel()
	zone := func(name string) *time.Location {
		loc, err := rules.LoadLocation(name)
		if err != nil {
			t.Fatal(err)
		}
		return loc
	}
	ny, berlin, shanghai := zone("America/New_York"), zone("Europe/Berlin"), zone("Asia/Shanghai")
	cases := []struct {
		name       string
		w          rules.Duration
		at         time.Time
		loc        *time.Location
		start, end time.Time
		length     time.Duration
	}{
		{"New York spring forward: a 23-hour day", rules.Day, time.Date(2026, 3, 8, 12, 0, 0, 0, ny), ny,
			time.Date(2026, 3, 8, 5, 0, 0, 0, time.UTC), time.Date(2026, 3, 9, 4, 0, 0, 0, time.UTC), 23 * time.Hour},
		{"New York fall back: a 25-hour day", rules.Day, time.Date(2026, 11, 1, 23, 59, 0, 0, ny), ny,
			time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC), time.Date(2026, 11, 2, 5, 0, 0, 0, time.UTC), 25 * time.Hour},
		{"Berlin spring forward: a 23-hour day", rules.Day, time.Date(2026, 3, 29, 1, 30, 0, 0, berlin), berlin,
			time.Date(2026, 3, 28, 23, 0, 0, 0, time.UTC), time.Date(2026, 3, 29, 22, 0, 0, 0, time.UTC), 23 * time.Hour},
		{"Berlin fall back: a 25-hour day", rules.Day, time.Date(2026, 10, 25, 2, 30, 0, 0, berlin), berlin,
			time.Date(2026, 10, 24, 22, 0, 0, 0, time.UTC), time.Date(2026, 10, 25, 23, 0, 0, 0, time.UTC), 25 * time.Hour},
		{"Shanghai's day starts at 16:00 UTC the day before", rules.Day, time.Date(2026, 11, 29, 17, 0, 0, 0, time.UTC), shanghai,
			time.Date(2026, 11, 29, 16, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 16, 0, 0, 0, time.UTC), 24 * time.Hour},
		{"UTC day", rules.Day, time.Date(2026, 11, 29, 17, 0, 0, 0, time.UTC), time.UTC,
			time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), 24 * time.Hour},
		{"31 January's month ends on 1 February", rules.Month, time.Date(2026, 1, 31, 23, 59, 59, 0, time.UTC), time.UTC,
			time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), 31 * 24 * time.Hour},
		{"February of a leap year: 29 days", rules.Month, time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC), time.UTC,
			time.Date(2028, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2028, 3, 1, 0, 0, 0, 0, time.UTC), 29 * 24 * time.Hour},
		{"February of a common year: 28 days", rules.Month, time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), time.UTC,
			time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), 28 * 24 * time.Hour},
		{"a New York month with the fall-back hour", rules.Month, time.Date(2026, 11, 15, 0, 0, 0, 0, ny), ny,
			time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC), time.Date(2026, 12, 1, 5, 0, 0, 0, time.UTC), 30*24*time.Hour + time.Hour},
		{"a week from Monday, asked on a Sunday", rules.Week, time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC), time.UTC,
			time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
		{"a week from Monday, asked on the Monday", rules.Week, time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), time.UTC,
			time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
		{"a week over a year's end", rules.Week, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), time.UTC,
			time.Date(2026, 12, 28, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 4, 0, 0, 0, 0, time.UTC), 7 * 24 * time.Hour},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			start, end := c.w.Period(c.at, c.loc)
			if !start.Equal(c.start) || !end.Equal(c.end) {
				t.Fatalf("period [%s, %s), want [%s, %s)", start.UTC(), end.UTC(), c.start, c.end)
			}
			if got := end.Sub(start); got != c.length {
				t.Fatalf("length %s, want %s", got, c.length)
			}
			if c.at.Before(start) || !c.at.Before(end) {
				t.Fatalf("%s is not inside its own period", c.at)
			}
		})
	}
}

func TestLoadLocation_RefusesUnknownZones(t *testing.T) {
	t.Parallel()
	if _, err := rules.LoadLocation("Mars/Olympus_Mons"); err == nil {
		t.Fatal("an unknown zone was accepted")
	}
	if loc, err := rules.LoadLocation(""); err != nil || loc != time.UTC {
		t.Fatalf("empty zone: %v, %v; want UTC", loc, err)
	}
}
