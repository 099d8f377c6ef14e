// Package version says which build of quota is running: the version and
// revision the Makefile stamps with -ldflags -X, or, for a plain `go build`
// or `go install`, what the Go toolchain recorded in the binary.
package version

import (
	"runtime"
	"runtime/debug"
)

// Stamped by the Makefile:
//
//	-ldflags "-X github.com/quota-platform/quota/internal/version.Version=v1.2.3
//	          -X github.com/quota-platform/quota/internal/version.Revision=<git sha>"
var (
	Version  string
	Revision string
)

// Info is one build's identity.
type Info struct {
	Version   string // e.g. v0.3.0, v0.3.0-4-gabc1234-dirty; "devel" when unknown
	Revision  string // VCS commit; "unknown" when not recorded
	GoVersion string // the toolchain that built it
}

// Get returns the stamped values, falling back to the build information the
// toolchain embeds (module version, vcs.revision, vcs.modified).
func Get() Info {
	return resolve(Version, Revision, debug.ReadBuildInfo)
}

func resolve(ver, rev string, read func() (*debug.BuildInfo, bool)) Info {
	in := Info{Version: ver, Revision: rev, GoVersion: runtime.Version()}
	if bi, ok := read(); ok {
		if bi.GoVersion != "" {
			in.GoVersion = bi.GoVersion
		}
		if in.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			in.Version = bi.Main.Version
		}
		if in.Revision == "" {
			dirty := false
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					in.Revision = s.Value
				case "vcs.modified":
					dirty = s.Value == "true"
				}
			}
			if in.Revision != "" && dirty {
				in.Revision += "-dirty"
			}
		}
	}
	if in.Version == "" {
		in.Version = "devel"
	}
	if in.Revision == "" {
		in.Revision = "unknown"
	}
	return in
}

// String is the one line `quotad version` prints.
func (i Info) String() string {
	return i.Version + " (revision " + i.Revision + ", " + i.GoVersion + ")"
}
