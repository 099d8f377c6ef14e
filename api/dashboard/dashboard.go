// Package dashboard is quotad's developer dashboard: a static page
// embedded in the binary that calls the stats API with the key it is
// signed in with, and the SVG chart of an app's calls that the stats API
// draws for it (GET /v1/apps/{app_id}/series.svg, package api).
package dashboard

import (
	"embed"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/quota-platform/quota/analytics"
)

//go:embed index.html app.js style.css
var pageFiles embed.FS

// Routes serves the dashboard on e under /dashboard/.
func Routes(e *echo.Echo) {
	files := http.StripPrefix("/dashboard/", http.FileServer(http.FS(pageFiles)))
	serve := func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Cache-Control", "no-cache")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'")
		files.ServeHTTP(c.Response(), c.Request())
		return nil
	}
	e.GET("/dashboard", func(c echo.Context) error { return c.Redirect(http.StatusMovedPermanently, "/dashboard/") })
	e.GET("/dashboard/", serve)
	e.GET("/dashboard/*", serve)
}

// Chart geometry (SVG user units; the SVG scales to its container).
const (
	chartW, chartH                         = 960.0, 300.0
	padLeft, padRight, padTop, padBottom   = 64.0, 16.0, 28.0, 32.0
	plotW, plotH                           = chartW - padLeft - padRight, chartH - padTop - padBottom
	colorCalls, colorCallsFill, colorDeny  = "#2563eb", "#dbe7fd", "#dc2626"
	colorGrid, colorAxisText, colorNoCalls = "#e5e7eb", "#6b7280", "#9ca3af"
)

// Chart draws calls (blue area) and denied calls (red line) over time
// with a labelled y axis and time ticks suited to the span: an SVG of
// points pts at resolution res.
func Chart(pts []analytics.Point, res analytics.Resolution) []byte {
	var b strings.Builder
	var total, denied, peak int64
	for _, p := range pts {
		total += p.Calls
		denied += p.Denied
		peak = max(peak, p.Calls)
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %g %g" width="100%%" role="img" font-family="system-ui, -apple-system, Segoe UI, Roboto, sans-serif" font-size="12" data-calls="%d" data-denied="%d" data-points="%d" data-resolution="%s">`,
		chartW, chartH, total, denied, len(pts), res)
	fmt.Fprintf(&b, `<title>%s calls, %s denied, %d points of %s</title>`, groupDigits(total), groupDigits(denied), len(pts), res)
	step, top := niceScale(peak)
	// Grid lines and y labels.
	for v := int64(0); v <= top; v += step {
		y := padTop + plotH - float64(v)/float64(top)*plotH
		fmt.Fprintf(&b, `<line x1="%g" x2="%g" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="1"/>`, padLeft, padLeft+plotW, y, y, colorGrid)
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" text-anchor="end" dominant-baseline="middle" fill="%s">%s</text>`, padLeft-8, y, colorAxisText, compact(v))
	}
	// Legend.
	fmt.Fprintf(&b, `<rect x="%g" y="6" width="10" height="10" rx="2" fill="%s"/><text x="%g" y="15" fill="#374151">calls</text>`, padLeft, colorCalls, padLeft+14)
	fmt.Fprintf(&b, `<rect x="%g" y="6" width="10" height="10" rx="2" fill="%s"/><text x="%g" y="15" fill="#374151">denied</text>`, padLeft+60, colorDeny, padLeft+74)
	fmt.Fprintf(&b, `<text x="%g" y="15" text-anchor="end" fill="%s">one point = %s</text>`, padLeft+plotW, colorAxisText, resName(res))
	if len(pts) == 0 {
		b.WriteString(`</svg>`)
		return []byte(b.String())
	}
	t0 := pts[0].T
	t1 := pts[len(pts)-1].T + int64(res)
	xOf := func(t float64) float64 { return padLeft + (t-float64(t0))/float64(t1-t0)*plotW }
	yOf := func(v int64) float64 { return padTop + plotH - float64(v)/float64(top)*plotH }
	// Time ticks.
	for _, tk := range timeTicks(t0, t1) {
		x := xOf(float64(tk.t))
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%g" y2="%g" stroke="%s" stroke-width="1"/>`, x, x, padTop+plotH, padTop+plotH+5, colorAxisText)
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle" fill="%s">%s</text>`, x, padTop+plotH+20, colorAxisText, tk.label)
	}
	// Calls: filled area and line; denied: line. Each point at its middle.
	half := float64(res) / 2
	var line, deny strings.Builder
	for i, p := range pts {
		x := xOf(float64(p.T) + half)
		cmd := "L"
		if i == 0 {
			cmd = "M"
		}
		fmt.Fprintf(&line, "%s%.1f %.1f ", cmd, x, yOf(p.Calls))
		fmt.Fprintf(&deny, "%s%.1f %.1f ", cmd, x, yOf(p.Denied))
	}
	first, last := xOf(float64(pts[0].T)+half), xOf(float64(pts[len(pts)-1].T)+half)
	fmt.Fprintf(&b, `<path d="%sL%.1f %.1f L%.1f %.1f Z" fill="%s" stroke="none"/>`, line.String(), last, padTop+plotH, first, padTop+plotH, colorCallsFill)
	fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.6" stroke-linejoin="round"/>`, line.String(), colorCalls)
	if denied > 0 {
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.4" stroke-linejoin="round"/>`, deny.String(), colorDeny)
	}
	fmt.Fprintf(&b, `<line x1="%g" x2="%g" y1="%g" y2="%g" stroke="#9ca3af" stroke-width="1"/>`, padLeft, padLeft+plotW, padTop+plotH, padTop+plotH)
	if total == 0 {
		fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle" fill="%s" font-size="14">no calls in this period</text>`, padLeft+plotW/2, padTop+plotH/2, colorNoCalls)
	}
	b.WriteString(`</svg>`)
	return []byte(b.String())
}

func resName(r analytics.Resolution) string {
	switch r {
	case analytics.Res1m:
		return "1 minute"
	case analytics.Res5m:
		return "5 minutes"
	case analytics.Res1h:
		return "1 hour"
	case analytics.Res1w:
		return "1 week"
	}
	return r.String()
}

// niceScale picks a grid step of 1, 2 or 5 × 10^k and the axis top (4 or
// 5 steps) above peak.
func niceScale(peak int64) (step, top int64) {
	if peak <= 0 {
		return 1, 4
	}
	raw := float64(peak) / 4
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = int64(math.Ceil(m * mag))
			break
		}
	}
	step = max(step, 1)
	top = (peak + step - 1) / step * step
	return step, max(top, step)
}

// compact writes an axis value: 950, 12,500, 1.2M.
func compact(v int64) string {
	switch {
	case v >= 10_000_000:
		return strconv.FormatFloat(float64(v)/1e6, 'f', 0, 64) + "M"
	case v >= 1_000_000:
		return strconv.FormatFloat(float64(v)/1e6, 'f', 1, 64) + "M"
	}
	return groupDigits(v)
}

// groupDigits writes n with thousands separators: 1234567 → 1,234,567.
func groupDigits(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

type tick struct {
	t     int64
	label string
}

// timeTicks chooses 4–9 ticks over [t0, t1) (UTC), aligned on round times.
func timeTicks(t0, t1 int64) []tick {
	span := t1 - t0
	const h, d = 3600, 86400
	type choice struct {
		step   int64
		months int
		layout string
	}
	choices := []choice{
		{600, 0, "15:04"}, {1800, 0, "15:04"}, {h, 0, "15:04"}, {2 * h, 0, "15:04"}, {3 * h, 0, "15:04"},
		{6 * h, 0, "Jan 2 15:04"}, {12 * h, 0, "Jan 2 15:04"}, {d, 0, "Mon Jan 2"}, {2 * d, 0, "Jan 2"},
		{7 * d, 0, "Jan 2"}, {14 * d, 0, "Jan 2"}, {0, 1, "Jan 2006"}, {0, 2, "Jan 2006"}, {0, 3, "Jan 2006"},
		{0, 6, "Jan 2006"}, {0, 12, "2006"},
	}
	for _, ch := range choices {
		var ticks []tick
		if ch.months == 0 {
			if span/ch.step > 8 {
				continue
			}
			off := int64(0)
			if ch.step == 7*d || ch.step == 14*d {
				off = 4 * d // Mondays
			}
			first := (t0-off+ch.step-1)/ch.step*ch.step + off
			for t := first; t < t1; t += ch.step {
				ticks = append(ticks, tick{t, time.Unix(t, 0).UTC().Format(ch.layout)})
			}
		} else {
			if span/(int64(ch.months)*30*d) > 8 {
				continue
			}
			start := time.Unix(t0, 0).UTC()
			m := time.Date(start.Year(), start.Month(), 1, 0, 0, 0, 0, time.UTC)
			if m.Unix() < t0 {
				m = m.AddDate(0, 1, 0)
			}
			for ; m.Unix() < t1; m = m.AddDate(0, 1, 0) {
				if (int(m.Month())-1)%ch.months == 0 {
					ticks = append(ticks, tick{m.Unix(), m.Format(ch.layout)})
				}
			}
		}
		return ticks
	}
	return nil
}
