package analytics_test

import (
	"database/sql"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/quota-platform/quota/analytics"
)

// BenchmarkRecord measures the check path's cost of analytics: Record from
// parallel goroutines (no I/O happens in Record, so no server is needed).
func BenchmarkRecord(b *testing.B) {
	db, _ := sql.Open("mysql", "nobody:x@tcp(127.0.0.1:1)/none")
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	rec, err := analytics.New(analytics.Options{DBs: []*sql.DB{db}, Redis: rdb, MaxPendingRows: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	apps := make([]string, 10)
	for i := range apps {
		apps[i] = "app-" + strconv.Itoa(i)
	}
	users := make([]string, 1000)
	for i := range users {
		users[i] = "user-" + strconv.Itoa(i)
	}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			rec.Recorder.Record(apps[i%10], apps[(i/10)%10], users[(i*7)%1000], i%9 != 0)
		}
	})
}
