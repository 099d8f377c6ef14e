package rules

import (
	"fmt"
	"time"
)

// Calendar windows: a day, a week (from Monday) or a month (from the 1st)
// in the platform's time zone. They are Durations of their own, below zero,
// so a Limit's Window is either a fixed length or one of them; nothing that
// takes a fixed length can mistake one for a length.
const (
	Day   Duration = -1
	Week  Duration = -2
	Month Duration = -3
)

// calendarNames are the calendar windows as a rules file writes them.
var calendarNames = map[Duration]string{Day: "day", Week: "week", Month: "month"}

// IsCalendar reports whether d is a calendar window (day, week, month).
func (d Duration) IsCalendar() bool { _, ok := calendarNames[d]; return ok }

// Nominal is a window's usual length: a fixed window's own, 24h for a day,
// 7 days for a week, 30 days for a month (for headers that want a number,
// never for counting: a calendar period's real length is Period's).
func (d Duration) Nominal() time.Duration {
	switch d {
	case Day:
		return 24 * time.Hour
	case Week:
		return 7 * 24 * time.Hour
	case Month:
		return 30 * 24 * time.Hour
	}
	return time.Duration(d)
}

// Period returns the calendar period of d that holds t, in loc: its first
// instant (local midnight) and the first instant of the next. A day lasts
// 23 or 25 hours across a daylight-saving change, a month 28 to 31 days.
// d must be a calendar window.
func (d Duration) Period(t time.Time, loc *time.Location) (start, end time.Time) {
	lt := t.In(loc)
	y, m, day := lt.Date()
	switch d {
	case Day:
		start = time.Date(y, m, day, 0, 0, 0, 0, loc)
		end = time.Date(y, m, day+1, 0, 0, 0, 0, loc)
	case Week:
		back := (int(lt.Weekday()) + 6) % 7 // days since Monday
		start = time.Date(y, m, day-back, 0, 0, 0, 0, loc)
		end = time.Date(y, m, day-back+7, 0, 0, 0, 0, loc)
	case Month:
		start = time.Date(y, m, 1, 0, 0, 0, 0, loc)
		end = time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	default:
		panic(fmt.Sprintf("rules: Period of %d, which is not a calendar window", d))
	}
	// Where local midnight does not exist (a zone that springs forward at
	// 00:00), time.Date normalizes to the first instant after the gap, which
	// is the period's start.
	return start, end
}

// LoadLocation reads an IANA time zone name (QUOTA_TIMEZONE).
func LoadLocation(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("time zone %q is not an IANA name this system knows (e.g. UTC, Asia/Shanghai, America/New_York)", name)
	}
	return loc, nil
}
