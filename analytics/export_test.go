package analytics

// Test helpers of this package that the external tests (package
// analytics_test) use too.
var (
	BenchNames     = benchNames
	NewXorshift    = newXorshift
	NewUniformLoad = newUniformLoad
	EachUserEntry  = eachUserEntry
)
