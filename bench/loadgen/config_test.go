package loadgen

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseFlags(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		args    []string
		wantErr string
		check   func(*testing.T, Config)
	}{
		{"defaults", nil, "", func(t *testing.T, c Config) {
			if c.Connections != 64 || c.Duration != 20*time.Second || c.Rate != 0 || c.Mode() != "closed" ||
				c.Keys.Apps != 1000 || c.Keys.Users != 100000 || c.Keys.IPs != 100000 || c.Keys.Ifaces != 50 ||
				c.Keys.Dist != DistUniform || c.URL != "http://127.0.0.1:8080" || c.Progress == nil ||
				c.Client != ClientRaw {
				t.Errorf("defaults: %+v", c)
			}
		}},
		{"everything", []string{"-url", "http://127.0.0.1:18080/", "-token", "t0k", "-c", "8", "-d", "3s",
			"-rate", "500", "-apps", "10", "-users", "20", "-ips", "30", "-ifaces", "4", "-identities", "700",
			"-dist", "zipf", "-zipf-s", "1.3", "-batch", "10", "-seed", "9", "-json", "-", "-progress=false"}, "",
			func(t *testing.T, c Config) {
				want := Keyspace{Apps: 10, Users: 20, IPs: 30, Ifaces: 4, Identities: 700, Dist: DistZipf, ZipfS: 1.3}
				if c.Keys != want || c.Token != "t0k" || c.Connections != 8 || c.Duration != 3*time.Second ||
					c.Rate != 500 || c.Mode() != "open" || c.Batch != 10 || c.Seed != 9 || c.JSONPath != "-" ||
					c.Progress != nil || c.endpoint() != "http://127.0.0.1:18080/v1/check/batch" {
					t.Errorf("parsed %+v", c)
				}
			}},
		{"net/http client", []string{"-client", "nethttp"}, "", func(t *testing.T, c Config) {
			if c.Client != ClientNetHTTP {
				t.Errorf("client %q", c.Client)
			}
		}},
		{"https with the net/http client", []string{"-client", "nethttp", "-url", "https://quota.example:8443"}, "", func(t *testing.T, c Config) {
			if c.Client != ClientNetHTTP || c.endpoint() != "https://quota.example:8443/v1/check" {
				t.Errorf("parsed %+v", c)
			}
		}},
		{"https with the raw client", []string{"-url", "https://quota.example:8443"}, "-client raw speaks plain http only", nil},
		{"unknown client", []string{"-client", "curl"}, "invalid -client \"curl\"", nil},
		{"zero connections", []string{"-c", "0"}, "invalid -c 0", nil},
		{"negative connections", []string{"-c", "-3"}, "invalid -c", nil},
		{"zero duration", []string{"-d", "0s"}, "invalid -d", nil},
		{"negative duration", []string{"-d", "-1s"}, "invalid -d", nil},
		{"zipf s of 1", []string{"-dist", "zipf", "-zipf-s", "1"}, "invalid -zipf-s", nil},
		{"unknown dist", []string{"-dist", "normal"}, "invalid -dist", nil},
		{"negative rate", []string{"-rate", "-5"}, "invalid -rate", nil},
		{"batch too big", []string{"-batch", "1001"}, "invalid -batch", nil},
		{"negative apps", []string{"-apps", "-1"}, "invalid -apps", nil},
		{"zero users", []string{"-users", "0"}, "invalid -users", nil},
		{"identities beyond the space", []string{"-apps", "2", "-users", "2", "-ifaces", "2", "-identities", "9"}, "invalid -identities", nil},
		{"bad url", []string{"-url", "127.0.0.1:8080"}, "invalid -url", nil},
		{"unknown flag", []string{"-connections", "3"}, "not defined", nil},
		{"bad number", []string{"-c", "many"}, "invalid value", nil},
		{"stray argument", []string{"http://x"}, "unexpected argument", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var stderr bytes.Buffer
			cfg, err := ParseFlags(tc.args, &stderr)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error spans lines: %q", err)
				}
				if stderr.Len() != 0 {
					t.Errorf("printed %q besides the error", stderr.String())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, cfg)
		})
	}
}

func TestParseFlagsHelp(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	_, err := ParseFlags([]string{"-h"}, &stderr)
	if !errors.Is(err, ErrHelp) || !strings.Contains(stderr.String(), "-zipf-s") {
		t.Errorf("-h: err %v, usage %q", err, stderr.String())
	}
}
