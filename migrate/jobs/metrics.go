package jobs

import "github.com/prometheus/client_golang/prometheus"

// The progress series, read from Jobs at each scrape: each kind's last
// job on this instance (running, or the last that ended; zeros before
// the first), and the fleet's cycle as this instance last saw it.
var (
	jobRunningDesc  = prometheus.NewDesc("quota_job_running", "1 while a job of this kind runs on this instance.", []string{"kind"}, nil)
	jobStartedDesc  = prometheus.NewDesc("quota_job_started_timestamp_seconds", "Unix time the last job of this kind on this instance started (0: none since start).", []string{"kind"}, nil)
	jobPartsDesc    = prometheus.NewDesc("quota_job_parts", "Parts of the last job of this kind on this instance, by state: done (by this instance), running (here), total (of the job; a cycle's over the fleet).", []string{"kind", "state"}, nil)
	jobCellsDesc    = prometheus.NewDesc("quota_job_cells", "Cells of the last job of this kind on this instance: scanned and moved by this instance, total counted so far.", []string{"kind", "what"}, nil)
	jobFractionDesc = prometheus.NewDesc("quota_job_fraction_done", "Share of the last job of this kind done (a cycle's: the fleet's), 0 to 1.", []string{"kind"}, nil)
	jobETADesc      = prometheus.NewDesc("quota_job_eta_seconds", "Estimated seconds left of the running job of this kind (a cycle's: the fleet's); -1 while unknown, 0 when none runs.", []string{"kind"}, nil)
	fleetPartsDesc  = prometheus.NewDesc("quota_migration_cycle_fleet_parts", "Parts of the fleet's last migration cycle this instance took part in, by state (done, running, total), as of its last look (every second while it runs).", []string{"state"}, nil)
	fleetCellsDesc  = prometheus.NewDesc("quota_migration_cycle_fleet_cells", "Cells of the fleet's last migration cycle this instance took part in: scanned, moved, total counted so far.", []string{"what"}, nil)
)

// Describe implements prometheus.Collector.
func (js *Jobs) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{jobRunningDesc, jobStartedDesc, jobPartsDesc, jobCellsDesc, jobFractionDesc, jobETADesc, fleetPartsDesc, fleetCellsDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (js *Jobs) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	now := js.Time()
	var fleet *FleetProgress
	for _, kind := range jobKinds {
		var v JobView
		started, running, eta := 0.0, 0.0, 0.0
		if j := js.last(kind); j != nil {
			v = j.View(now)
			started = float64(v.StartedAt.UnixMilli()) / 1000
			if v.State == "running" {
				running, eta = 1, -1
				if v.Progress.ETASeconds != nil {
					eta = *v.Progress.ETASeconds
				}
			}
			if kind == KindMigrate {
				fleet = v.Fleet
			}
		}
		p := v.Progress
		gauge(jobRunningDesc, running, kind)
		gauge(jobStartedDesc, started, kind)
		gauge(jobPartsDesc, float64(p.PartsDone), kind, "done")
		gauge(jobPartsDesc, float64(p.PartsRunning), kind, "running")
		gauge(jobPartsDesc, float64(p.PartsTotal), kind, "total")
		gauge(jobCellsDesc, float64(p.CellsScanned), kind, "scanned")
		gauge(jobCellsDesc, float64(p.CellsMoved), kind, "moved")
		gauge(jobCellsDesc, float64(p.CellsTotal), kind, "total")
		gauge(jobFractionDesc, p.Fraction, kind)
		gauge(jobETADesc, eta, kind)
	}
	var f FleetProgress
	if fleet != nil {
		f = *fleet
	}
	gauge(fleetPartsDesc, float64(f.PartsDone), "done")
	gauge(fleetPartsDesc, float64(f.PartsRunning), "running")
	gauge(fleetPartsDesc, float64(f.PartsTotal), "total")
	gauge(fleetCellsDesc, float64(f.CellsScanned), "scanned")
	gauge(fleetCellsDesc, float64(f.CellsMoved), "moved")
	gauge(fleetCellsDesc, float64(f.CellsTotal), "total")
}
