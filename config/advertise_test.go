package config_test

import (
	"strings"
	"testing"

	"github.com/quota-platform/quota/config"
)

// QUOTA_ADVERTISE_URL is an http(s) URL with a host, or unset; anything
// else stops start-up with one line naming it.
func TestLoad_AdvertiseURLMustBeAnHTTPURLWithAHost(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		value string
		ok    bool
	}{
		{"", true},
		{"http://10.0.0.5:8080", true},
		{"https://quota-2.internal", true},
		{"10.0.0.5:8080", false},
		{"ftp://host", false},
		{"http://", false},
		{"http://a b", false},
	} {
		_, err := config.Load(func(k string) string {
			if k == "QUOTA_ADVERTISE_URL" {
				return tc.value
			}
			return ""
		})
		if tc.ok != (err == nil) || (err != nil && (!strings.Contains(err.Error(), "QUOTA_ADVERTISE_URL") || strings.Contains(err.Error(), "\n"))) {
			t.Errorf("QUOTA_ADVERTISE_URL=%q: %v; want ok=%v, else one line naming it", tc.value, err, tc.ok)
		}
	}
}
