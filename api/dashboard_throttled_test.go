package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/quota-platform/quota/rules"
)

// The dashboard's "who is throttled" table in headless Chromium, signed in
// with the app's key: one row per denied identity of each rule, most denied
// first with the API's counts, then the denied interfaces.
func TestDashboard_ShowsWhoIsThrottled(t *testing.T) {
	t.Parallel()
	browser := requireChromium(t)
	h := newStatsHarnessAt(t, time.Now().UTC())
	key := h.mint("shop")
	for _, c := range []struct {
		user, iface string
		n           int
	}{{"u1", "orders.list", 8}, {"u2", "users.get", 5}, {"u3", "users.get", 2}} { // 5, 2 and 0 denied
		for range c.n {
			h.check(`{"app_id":"shop","user_id":"` + c.user + `","interface_id":"` + c.iface + `"}`)
		}
	}
	want := h.get("/v1/apps/shop/throttled", key)
	if want.status != 200 {
		t.Fatalf("throttled: %d %s", want.status, want.raw)
	}

	tctx := signInDashboard(t, browser, h, key)
	rows, err := chromedp.Run(tctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#throttled tr")].map(tr => [...tr.children].map(td => td.textContent).join(" | "))`))
	if err != nil {
		t.Fatal(err)
	}
	wantRows := []string{
		"app_user_iface_hourly | interface_id=orders.list user_id=u1 | 5",
		"app_user_iface_hourly | interface_id=users.get user_id=u2 | 2",
		"interface | orders.list | 5",
		"interface | users.get | 2",
	}
	if strings.Join(rows, "\n") != strings.Join(wantRows, "\n") {
		t.Errorf("the table shows\n%s\nwant\n%s\n(API: %s)", strings.Join(rows, "\n"), strings.Join(wantRows, "\n"), want.raw)
	}
}

// The dashboard's quota bars in headless Chromium: the app's plan and each
// app-level limit, used of limit with its reset, as the usage API says;
// and the identities nearest their quotas, most used first.
func TestDashboard_ShowsThePlansQuotasAndTheNearestIdentities(t *testing.T) {
	t.Parallel()
	browser := requireChromium(t)
	h := newStatsHarnessAt(t, time.Now().UTC())
	key := h.mint("shop")
	set, err := rules.ParseYAML([]byte("rules:\n  - {name: shop_daily, dimensions: [app_id], limit: 10, window: day, algorithm: fixed_window}\n" +
		"  - {name: user_monthly, dimensions: [app_id, user_id], limit: 8, window: month, algorithm: fixed_window}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.lim.SetRules(set); err != nil {
		t.Fatal(err)
	}
	for user, n := range map[string]int{"u1": 6, "u2": 3} { // u2: under half of 8
		for range n {
			h.check(`{"app_id":"shop","user_id":"` + user + `","interface_id":"orders.list"}`)
		}
	}
	waitNearest(t, h, key, 1)
	tctx := signInDashboard(t, browser, h, key)
	got, err := chromedp.Run(tctx, chromedp.Evaluate[[]string](
		`[document.getElementById("plan").textContent, ...[...document.querySelectorAll("#quotas .quota")].map(q => q.className + " | " + q.querySelector(".quota-label").textContent + " | " + q.querySelector(".bar span").style.width + " | " + q.querySelector(".sub").textContent.replace(/resets in .*/, "resets"))]`))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"plan default", "quota near | shop_daily · day | 90% | 9 of 10 used · resets"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the quotas show\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	rows, err := chromedp.Run(tctx, chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#nearest tr")].map(tr => [...tr.children].map(td => td.textContent).join(" | ") + " | " + tr.querySelector(".bar span").style.width)`))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"user_monthly · month | user_id=u1 | 6 of 8 |  | 75%"}; strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("the nearest show\n%s\nwant\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
}

// waitNearest waits until the nearest list of shop's first quota has n
// identities (the record is written off the check path).
func waitNearest(t *testing.T, h *statsHarness, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r := h.get("/v1/apps/shop/usage/nearest", key)
		rs, _ := r.body["rules"].([]any)
		if len(rs) > 0 {
			if top, _ := rs[0].(map[string]any)["top"].([]any); len(top) == n {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("nearest: %d %s, want %d identities", r.status, r.raw, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// signInDashboard opens the dashboard in headless Chromium, signs in with
// key and waits for the board's first load; the context lives until the
// test ends.
func signInDashboard(t *testing.T, browser string, h *statsHarness, key string) context.Context {
	t.Helper()
	actx, cancelA := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(browser), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1400))
	t.Cleanup(cancelA)
	bctx, cancelB := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(cancelB)
	// The first Run starts the browser and must not carry a timeout.
	if err := chromedp.Do(bctx, chromedp.Navigate(h.srv.URL+"/dashboard/")); err != nil {
		t.Fatalf("chromium: %v", err)
	}
	tctx, cancelT := context.WithTimeout(bctx, 60*time.Second)
	t.Cleanup(cancelT)
	if err := chromedp.Do(tctx,
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), key),
		chromedp.Click(chromedp.CSS(`#signin-form button[type="submit"]`)),
		chromedp.WaitVisible(chromedp.CSS(`body[data-loaded="1"]`)),
	); err != nil {
		t.Fatalf("chromium: sign in: %v", err)
	}
	return tctx
}
