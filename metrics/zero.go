package metrics

// Series from the first second: every series the shipped dashboard and
// alert rules select exists from start-up at zero, with the label values
// they select, so that a fresh deployment shows zeros rather than "No
// data", rate() and increase() see the first event, and an absent() alert
// tells a broken exporter from one with nothing to report yet
// (deploy/firstscrape_test.go).

// checkRoutes are the routes whose requests the check alerts and panels
// select (route=~"/v1/check.*"), and checkCodes the status codes a check
// answers with: allowed, denied, bad input, and the 5xx of a failure or of
// the closed fail mode.
var (
	checkRoutes = []string{"/v1/check", "/v1/check/batch", "/v1/auth"}
	checkCodes  = []string{"200", "400", "429", "500", "503"}
	decisions   = []string{"allowed", "denied"}
)

// zeroRequests creates the check routes' request series at zero.
func (m *Metrics) zeroRequests() {
	for _, r := range checkRoutes {
		for _, c := range checkCodes {
			m.Requests.WithLabelValues(r, c)
		}
	}
}

// ZeroChecks creates quota_checks_total at zero for each rule named (the
// rules in force at start) and each decision, allowed and denied.
func (m *Metrics) ZeroChecks(rules []string) {
	for _, r := range rules {
		for _, d := range decisions {
			m.Checks.WithLabelValues(r, d)
		}
	}
}
