package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/quota-platform/quota/migrate"
)

// Member is one instance of the fleet as quotactl status shows it: its
// heartbeat and its own answer, or why it gave none.
type Member struct {
	URL       string    `json:"url"`
	Heartbeat *Entry    `json:"heartbeat,omitempty"` // nil: none in Redis (not registered, or Redis unreachable)
	Status    *Instance `json:"status,omitempty"`    // nil: it did not answer
	Error     string    `json:"error,omitempty"`     // why it did not
}

// View is the fleet seen from one instance: quotactl status.
type View struct {
	From    string    `json:"from"`
	At      time.Time `json:"at"`
	Members []Member  `json:"instances"`
	// RulesVersions are the rules versions in force, and the instances
	// (URLs) that have each: more than one is a fleet that disagrees.
	RulesVersions map[string][]string `json:"rules_versions"`
	Fleet         Status              `json:"fleet"` // what From answered
}

// Fetch asks the instance at url for its status (scope "fleet" or
// "instance").
type Fetch func(ctx context.Context, url, scope string) (Status, error)

// Collect asks the instance at from for the fleet's status, then every
// instance its heartbeats name for their own, at once.
func Collect(ctx context.Context, from string, fetch Fetch) (View, error) {
	st, err := fetch(ctx, from, "fleet")
	if err != nil {
		return View{}, err
	}
	v := View{From: from, At: st.At, Fleet: st, RulesVersions: map[string][]string{}}
	self := st.Instance
	byURL := map[string]*Member{}
	add := func(url string) *Member {
		url = strings.TrimRight(url, "/")
		if m, ok := byURL[url]; ok {
			return m
		}
		m := &Member{URL: url}
		byURL[url] = m
		return m
	}
	me := add(self.URL)
	me.Status = &self
	for _, e := range st.Instances {
		m := add(e.URL)
		m.Heartbeat = &e
	}
	var wg sync.WaitGroup
	for _, m := range byURL {
		if m.Status != nil {
			continue
		}
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			ist, err := fetch(cctx, m.URL, "instance")
			if err != nil {
				m.Error = err.Error()
				return
			}
			m.Status = &ist.Instance
		})
	}
	wg.Wait()
	for _, m := range byURL {
		v.Members = append(v.Members, *m)
		switch {
		case m.Status != nil:
			v.RulesVersions[m.Status.RulesVersion] = append(v.RulesVersions[m.Status.RulesVersion], m.URL)
		case m.Heartbeat != nil:
			v.RulesVersions[m.Heartbeat.RulesVersion] = append(v.RulesVersions[m.Heartbeat.RulesVersion], m.URL)
		}
	}
	sort.Slice(v.Members, func(i, j int) bool { return v.Members[i].URL < v.Members[j].URL })
	for _, urls := range v.RulesVersions {
		sort.Strings(urls)
	}
	return v, nil
}

// Render writes v as one screen of text: the instances, Redis and MySQL,
// the tiers, the migration cycle and analytics.
func (v View) Render(w io.Writer) {
	fmt.Fprintf(w, "quota fleet, as %s sees it at %s\n", v.From, v.At.UTC().Format("2006-01-02 15:04:05 UTC"))
	v.renderInstances(w)
	v.renderStores(w)
	v.renderTiers(w)
	v.renderCycle(w)
	v.renderAnalytics(w)
}

func (v View) renderInstances(w io.Writer) {
	fmt.Fprintf(w, "\nINSTANCES (%d)\n", len(v.Members))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  ADDRESS\tVERSION\tUPTIME\tRULES\tSTATE")
	for _, m := range v.Members {
		version, uptime, rules, state := v.memberRow(m)
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", m.URL, version, uptime, rules, state)
	}
	tw.Flush()
	switch len(v.RulesVersions) {
	case 0:
	case 1:
		for ver := range v.RulesVersions {
			fmt.Fprintf(w, "  rules: every instance has %s in force\n", ver)
		}
	default:
		fmt.Fprintln(w, "  rules: INSTANCES DISAGREE:")
		for _, ver := range sortedKeys(v.RulesVersions) {
			fmt.Fprintf(w, "    %s: %s\n", ver, strings.Join(v.RulesVersions[ver], ", "))
		}
	}
	if v.Fleet.RegistryError != "" {
		fmt.Fprintf(w, "  fleet registry: %s (instances other than %s may be missing)\n", v.Fleet.RegistryError, v.From)
	}
}

// memberRow is the VERSION, UPTIME, RULES and STATE of m's line.
func (v View) memberRow(m Member) (version, uptime, rules, state string) {
	version, uptime, rules = "-", "-", "-"
	switch {
	case m.Status != nil:
		s := m.Status
		version, uptime, rules = s.Version, duration(s.UptimeSeconds), short(s.RulesVersion)
		switch {
		case s.State == "draining":
			state = "DRAINING: " + s.NotReady
		case !s.Ready:
			state = "NOT READY: " + s.NotReady
		case s.NotReady != "":
			state = "ready, " + s.NotReady
		default:
			state = "ready"
		}
	default:
		state = "UNREACHABLE: " + m.Error
		if hb := m.Heartbeat; hb != nil {
			version, rules = hb.Version, short(hb.RulesVersion)
			state += fmt.Sprintf("; last heartbeat %s ago (%s)", duration(v.At.Sub(hb.SeenAt).Seconds()), hb.State)
		}
	}
	if m.Heartbeat == nil && m.Status != nil {
		state += " (no heartbeat in Redis)"
	} else if hb := m.Heartbeat; hb != nil && m.Status != nil && v.At.Sub(hb.SeenAt) > Stale {
		state += fmt.Sprintf(" (heartbeat %s old)", duration(v.At.Sub(hb.SeenAt).Seconds()))
	}
	return version, uptime, rules, state
}

func (v View) renderStores(w io.Writer) {
	fmt.Fprintf(w, "\nREDIS (%s)\n", v.Fleet.RedisMode)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, e := range v.Fleet.Redis {
		slots := ""
		if e.Slots != "" {
			slots = "slots " + e.Slots
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", e.Name, e.Addr, slots, upDown(e))
	}
	tw.Flush()
	fmt.Fprintf(w, "\nMYSQL (%d shards)\n", len(v.Fleet.MySQL))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, e := range v.Fleet.MySQL {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", e.Name, e.Addr, upDown(e))
	}
	tw.Flush()
}

func (v View) renderTiers(w io.Writer) {
	switch tc := v.Fleet.Tiers; {
	case v.Fleet.TieringOff:
		fmt.Fprintln(w, "\nTIERS: tiering off (QUOTA_TIERING=off): every cell is hot")
	case v.Fleet.TiersError != "":
		fmt.Fprintf(w, "\nTIERS: unavailable: %s\n", v.Fleet.TiersError)
	case tc == nil:
		fmt.Fprintln(w, "\nTIERS: never counted (quotactl tiers counts them)")
	default:
		fmt.Fprintf(w, "\nTIERS (counted %s ago, %s)\n", duration(tc.AgeSeconds), tc.CountedAt.UTC().Format("2006-01-02 15:04:05 UTC"))
		total := tc.Hot.Identities + tc.Warm.Identities + tc.Cold.Identities
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "  tier\tcells\tshare\tbytes\t")
		for _, t := range []struct {
			name string
			u    migrate.TierUsage
		}{{"hot", tc.Hot}, {"warm", tc.Warm}, {"cold", tc.Cold}} {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t\n", t.name, group(t.u.Identities), pct(t.u.Identities, total), group(t.u.Bytes))
		}
		tw.Flush()
	}
}

func (v View) renderCycle(w io.Writer) {
	switch c := v.Fleet.Cycle; {
	case v.Fleet.TieringOff:
		fmt.Fprintln(w, "\nCYCLE: none (tiering off)")
	case v.Fleet.CycleError != "":
		fmt.Fprintf(w, "\nCYCLE: unavailable: %s\n", v.Fleet.CycleError)
	case c == nil:
		fmt.Fprintln(w, "\nCYCLE: none running, none ended in the last two days")
	case c.State == "compaction":
		fmt.Fprintf(w, "\nCYCLE: a cold filter compaction holds the cycle key (%s)\n", c.Cycle)
	default:
		when := ""
		if c.EndedAt != nil {
			when = fmt.Sprintf(", ended %s ago", duration(v.At.Sub(*c.EndedAt).Seconds()))
		}
		fmt.Fprintf(w, "\nCYCLE %s: %s%s\n", c.Cycle, c.State, when)
		eta := "?"
		if c.ETASeconds != nil {
			eta = duration(*c.ETASeconds)
		}
		cells := group(c.CellsScanned)
		if c.CellsTotal > 0 {
			cells += "/" + group(c.CellsTotal)
			if !c.CellsCounted {
				cells += "+"
			}
		}
		fmt.Fprintf(w, "  %d/%d parts (%.1f%%), %s cells scanned, %s moved, %s cells/s, elapsed %s, ETA %s\n",
			c.PartsDone, c.PartsTotal, c.Fraction*100, cells, group(c.CellsMoved), group(int64(c.CellsPerSecond+0.5)), duration(c.ElapsedSeconds), eta)
		for _, name := range sortedKeys(c.Instances) {
			ip := c.Instances[name]
			fmt.Fprintf(w, "  by %s: %d parts done, %d running, %s cells scanned, %s moved\n", name, ip.PartsDone, ip.PartsRunning, group(ip.CellsScanned), group(ip.CellsMoved))
		}
	}
}

func (v View) renderAnalytics(w io.Writer) {
	fmt.Fprintln(w, "\nANALYTICS (each instance's last complete flush)")
	for _, m := range v.Members {
		switch {
		case m.Status == nil:
			fmt.Fprintf(w, "  %s: unknown (unreachable)\n", m.URL)
		case m.Status.Analytics == nil:
			fmt.Fprintf(w, "  %s: off\n", m.URL)
		case m.Status.Analytics.LastFlushAt == nil:
			fmt.Fprintf(w, "  %s: no flush since start, %s rows pending\n", m.URL, group(m.Status.Analytics.PendingRows))
		default:
			a := m.Status.Analytics
			fmt.Fprintf(w, "  %s: lag %s, %s rows pending\n", m.URL, duration(a.LagSeconds), group(a.PendingRows))
		}
	}
}

func upDown(e Endpoint) string {
	if e.OK {
		return "ok"
	}
	return "DOWN: " + e.Error
}

func short(v string) string {
	if len(v) > 12 {
		return v[:12]
	}
	if v == "" {
		return "-"
	}
	return v
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// duration is seconds for a person: 950ms, 42s, 3m07s, 2h05m, 3d04h.
func duration(s float64) string {
	d := time.Duration(s * float64(time.Second))
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}

func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + group(-n)
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

func pct(n, total int64) string {
	if total == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", float64(n)*100/float64(total))
}

// MarshalIndent is v as indented JSON (quotactl status --json).
func (v View) MarshalIndent() ([]byte, error) { return json.MarshalIndent(v, "", "  ") }
