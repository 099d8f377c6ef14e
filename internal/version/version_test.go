package version

import (
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	t.Parallel()
	built := func(mainVer string, settings ...debug.BuildSetting) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: mainVer}, Settings: settings}, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	tests := []struct {
		name     string
		ver, rev string
		read     func() (*debug.BuildInfo, bool)
		want     Info
	}{
		{"stamped values win over the build info", "v1.2.3", "abc", built("v9.9.9", debug.BuildSetting{Key: "vcs.revision", Value: "def"}),
			Info{"v1.2.3", "abc", "go1.99"}},
		{"go install of a tagged module gives its version", "", "", built("v0.4.0"),
			Info{"v0.4.0", "unknown", "go1.99"}},
		{"a local build gives the commit, marked dirty when modified", "", "", built("(devel)",
			debug.BuildSetting{Key: "vcs.revision", Value: "0123abc"}, debug.BuildSetting{Key: "vcs.modified", Value: "true"}),
			Info{"devel", "0123abc-dirty", "go1.99"}},
		{"without build info the toolchain of the running binary", "", "", none,
			Info{Version: "devel", Revision: "unknown"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := resolve(tt.ver, tt.rev, tt.read)
			if tt.want.GoVersion == "" {
				tt.want.GoVersion = got.GoVersion
				if got.GoVersion == "" {
					t.Fatal("empty GoVersion")
				}
			}
			if got != tt.want {
				t.Fatalf("resolve = %+v, want %+v", got, tt.want)
			}
		})
	}
}
