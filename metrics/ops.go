package metrics

import "github.com/prometheus/client_golang/prometheus"

// RegisterBuildInfo registers quota_build_info, 1 with the build's identity
// as labels, so that dashboards and alerts can tell which version runs where.
func RegisterBuildInfo(reg prometheus.Registerer, version, revision, goVersion string) {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "quota_build_info",
		Help:        "1, labelled with the version, VCS revision and Go version quotad was built from.",
		ConstLabels: prometheus.Labels{"version": version, "revision": revision, "goversion": goVersion},
	})
	g.Set(1)
	reg.MustRegister(g)
}

// NewDependencyUp registers quota_dependency_up{dependency}: 1 when the last
// probe of a backing service (redis, mysql_shard_N) answered, 0 when not.
func NewDependencyUp(reg prometheus.Registerer) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "quota_dependency_up",
		Help: "1 when the last probe (every 10 s, the checks /readyz runs) of a backing service answered: redis, mysql_shard_N.",
	}, []string{"dependency"})
	reg.MustRegister(g)
	return g
}
