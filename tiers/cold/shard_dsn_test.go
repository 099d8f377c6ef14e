package cold

import "testing"

func TestShardDSN_TurnsOnWhatTheColdTierNeedsAndRefusesItOff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, dsn, want string
		err             bool
	}{
		{"default DSN", "quota:quota@tcp(127.0.0.1:3306)/quota_0", "quota:quota@tcp(127.0.0.1:3306)/quota_0?interpolateParams=true&multiStatements=true", false},
		{"other options kept", "u:p@tcp(db:3306)/q?timeout=5s", "u:p@tcp(db:3306)/q?interpolateParams=true&multiStatements=true&timeout=5s", false},
		{"already on", "u:p@tcp(db:3306)/q?multiStatements=true&interpolateParams=true", "u:p@tcp(db:3306)/q?interpolateParams=true&multiStatements=true", false},
		{"multiStatements off", "u:p@tcp(db:3306)/q?multiStatements=false", "", true},
		{"interpolateParams off", "u:p@tcp(db:3306)/q?interpolateParams=false", "", true},
		{"invalid DSN", "u:p@tcp(db:3306)", "", true},
		{"no database", "u:p@tcp(db:3306)/", "", true},
		{"no database, options", "u:p@tcp(db:3306)/?timeout=5s", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := ShardDSN(tc.dsn)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("ShardDSN(%q) = %q, %v; want %q (error %v)", tc.dsn, got, err, tc.want, tc.err)
			}
		})
	}
}
