package deploy

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/quota-platform/quota/config"
)

// Each deployment bounds quotad's memory and sets the Go runtime's own
// bound (GOMEMLIMIT) between the heap floor's default, which would
// otherwise let the heap grow to it unchecked, and the deployment's bound,
// which the kernel enforces by killing the process.
func TestDeployFiles_GoMemoryLimitSitsBetweenTheHeapFloorAndTheMemoryBound(t *testing.T) {
	t.Parallel()
	floor := int64(config.Defaults().GCHeapFloorMB) << 20
	m := decodeManifests(t)
	c := m.deployment.Spec.Template.Spec.Containers[0]
	var k8sLimit string
	for _, e := range c.Env {
		if e.Name == "GOMEMLIMIT" {
			k8sLimit = e.Value
		}
	}
	systemd := string(readFile(t, "systemd/quotad.service"))
	compose := string(readFile(t, "compose.yaml"))
	tests := []struct {
		file, goLimit string
		bound         int64
	}{
		{"k8s/deployment.yaml", k8sLimit, c.Resources.Limits.Memory().Value()},
		{"systemd/quotad.service", match(systemd, `\nEnvironment=GOMEMLIMIT=(\S+)`), binarySize(t, match(systemd, `\nMemoryMax=(\S+)`))},
		{"compose.yaml", match(compose, `\n\s+GOMEMLIMIT: (\S+)`), binarySize(t, match(compose, `\n\s+mem_limit: (\S+)`))},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			goLimit := binarySize(t, tc.goLimit)
			if goLimit <= floor || tc.bound <= 0 || goLimit >= tc.bound {
				t.Errorf("GOMEMLIMIT %q (%d bytes), memory bound %d bytes: want the heap floor (%d) < GOMEMLIMIT < the bound", tc.goLimit, goLimit, tc.bound, floor)
			}
		})
	}
}

// match is the first group of re's first match in s ("" if none).
func match(s, re string) string {
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	if m == nil {
		return ""
	}
	return m[1]
}

// binarySize parses a size with a binary suffix as GOMEMLIMIT ("900MiB"),
// systemd ("1G") and Compose ("1g") write it; 0 for an empty one.
func binarySize(t *testing.T, s string) int64 {
	t.Helper()
	if s == "" {
		return 0
	}
	shift := map[string]int{"": 0, "B": 0, "K": 10, "KIB": 10, "M": 20, "MIB": 20, "G": 30, "GIB": 30}
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(s)
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	sh, ok := shift[strings.ToUpper(s[i:])]
	if err != nil || !ok {
		t.Fatalf("size %q", s)
	}
	return n << sh
}
