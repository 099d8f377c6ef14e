package api_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/quota-platform/quota/internal/testsupport/testenv"
)

// chromiumPath finds headless Chromium, installing the Debian package with
// internal/testsupport/testenv/ensure-tool.sh when it is missing; "" when it cannot be had.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, b := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(b); err == nil {
			return p
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "bash", "../internal/testsupport/testenv/ensure-tool.sh", "chromium").CombinedOutput()
	if err != nil {
		t.Logf("internal/testsupport/testenv/ensure-tool.sh chromium: %v: %s", err, out)
		return ""
	}
	lines := strings.Fields(strings.TrimSpace(string(out)))
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}

// requireChromium returns Chromium's path, installing it when missing; a
// Chromium that cannot be had fails the test (testenv.Unavailable).
func requireChromium(t *testing.T) string {
	t.Helper()
	browser := chromiumPath(t)
	if browser == "" {
		testenv.Unavailable(t, "chromium is not installed and could not be installed (apt-get install chromium): dashboard browser test")
	}
	return browser
}

func groupDigits(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// The dashboard in a real headless Chromium against quotad with seeded
// usage: it signs in with an app key, shows today's figures as the stats
// API gives them (thousands separated), the interface table and the chart;
// screenshots go to test-output/.
func TestDashboardInChromium(t *testing.T) {
	t.Parallel()
	browser := requireChromium(t)
	now := time.Now().UTC()
	h := newStatsHarnessAt(t, now)
	key := h.mint("shop")
	h.mint("blog")

	// Seed: 30 days of hourly traffic, then the last 24 h minute by minute
	// with a daily wave, over three interfaces and 1,500 users.
	ifaces := []string{"users.get", "orders.list", "payments.create"}
	rnd := rand.New(rand.NewPCG(1, 2))
	rec := func(at time.Time, n int, denyEvery int) {
		h.clk.Set(at)
		for i := 0; i < n; i++ {
			h.rec.Recorder.Record("shop", ifaces[rnd.IntN(7)%3], fmt.Sprintf("user-%d", rnd.IntN(1500)), rnd.IntN(denyEvery) != 0)
		}
	}
	wave := func(at time.Time) float64 { // busy afternoons (UTC), quiet nights
		return 1 + 0.7*math.Sin(float64(at.Hour()*60+at.Minute()-9*60)/1440*2*math.Pi)
	}
	for at := now.Add(-30 * 24 * time.Hour); at.Before(now.Add(-24 * time.Hour)); at = at.Add(time.Hour) {
		rec(at, int(300*wave(at)*(0.8+0.4*rnd.Float64())), 25)
	}
	for at := now.Add(-24 * time.Hour); at.Before(now); at = at.Add(time.Minute) {
		rec(at, int(15*wave(at)*(0.6+0.8*rnd.Float64())), 9)
	}
	h.rec.Recorder.Record("blog", "posts.list", "reader", true)
	h.clk.Set(now)
	ctx := context.Background()
	if err := h.rec.Flusher.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.rec.Rollup.Run(ctx); err != nil {
		t.Fatal(err)
	}
	// A few calls after the flush: the page must show them too (from memory).
	for i := 0; i < 5; i++ {
		h.rec.Recorder.Record("shop", "users.get", "late-user", false)
	}
	want := h.get("/v1/apps/shop/stats", key)
	if want.status != 200 || num(want, "calls") == 0 {
		t.Fatalf("stats: %s", want.raw)
	}

	outDir := filepath.Join("..", "test-output")
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browser),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1100),
	}
	actx, cancelA := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelB()

	// The first Run starts the browser and must not carry a timeout.
	if err := chromedp.Do(bctx, chromedp.Navigate(h.srv.URL+"/dashboard/")); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	tctx, cancelT := context.WithTimeout(bctx, 60*time.Second)
	defer cancelT()
	err := chromedp.Do(tctx,
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), key),
		chromedp.Click(chromedp.CSS(`#signin-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-loaded="1"]`)),
		chromedp.WaitVisible(chromedp.CSS("#chart svg")),
	)
	if err != nil {
		if shot, serr := chromedp.Run(bctx, chromedp.FullScreenshot(100)); serr == nil {
			_ = os.WriteFile(filepath.Join(outDir, "dashboard-failed.png"), shot, 0o644)
		}
		t.Fatalf("chromium: sign in: %v (screen in test-output/dashboard-failed.png)", err)
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(tctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(v)
	}
	count := func(sel string) int {
		t.Helper()
		v, err := chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll(`+"`"+sel+"`"+`).length`))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return v
	}
	calls, allowed, denied, users := text("#m-calls"), text("#m-allowed"), text("#m-denied"), text("#m-users")
	title, total := text("#title"), text("#chart-total")
	rows, paths := count("#ifaces tr"), count("#chart svg path")
	shot, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(filepath.Join(outDir, "dashboard-24h.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, pair := range map[string][2]string{
		"calls":        {calls, groupDigits(num(want, "calls"))},
		"allowed":      {allowed, groupDigits(num(want, "allowed"))},
		"denied":       {denied, groupDigits(num(want, "denied"))},
		"unique users": {users, groupDigits(num(want, "unique_users"))},
		"title":        {title, "shop"},
	} {
		if pair[0] != pair[1] {
			t.Errorf("dashboard shows %s %q, want %q", name, pair[0], pair[1])
		}
	}
	if num(want, "calls") >= 1000 && !strings.Contains(calls, ",") {
		t.Errorf("calls %q has no thousands separator", calls)
	}
	if rows != 3 || paths < 2 || !strings.Contains(total, "calls") {
		t.Errorf("interface rows %d, chart paths %d, chart total %q", rows, paths, total)
	}
	t.Logf("dashboard: calls %s, allowed %s, denied %s, users %s; chart: %s", calls, allowed, denied, users, total)

	// The 30-day curve, and one interface alone.
	err = chromedp.Do(tctx,
		chromedp.Click(chromedp.CSS(`.ranges button[data-range="30d"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#chart svg[data-resolution="1h"]`)),
	)
	if err != nil {
		t.Fatalf("chromium, 30 days: %v", err)
	}
	total30 := text("#chart-total")
	if shot, err = chromedp.Run(tctx, chromedp.FullScreenshot(100)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outDir, "dashboard-30d.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(total30, "30 days") {
		t.Errorf("30-day chart total %q", total30)
	}
	t.Logf("30 days: %s; screenshots in test-output/", total30)
}
