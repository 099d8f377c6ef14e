package main

import "testing"

func TestInterpolating_TurnsClientSideInterpolationOnUnlessTheDSNSaysOtherwise(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, dsn, want string
		err             bool
	}{
		{"default DSN", "quota:quota@tcp(127.0.0.1:3306)/quota_0", "quota:quota@tcp(127.0.0.1:3306)/quota_0?interpolateParams=true", false},
		{"other options kept", "u:p@tcp(db:3306)/q?timeout=5s", "u:p@tcp(db:3306)/q?interpolateParams=true&timeout=5s", false},
		{"explicitly off", "u:p@tcp(db:3306)/q?interpolateParams=false", "u:p@tcp(db:3306)/q?interpolateParams=false", false},
		{"invalid DSN", "u:p@tcp(db:3306)", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := interpolating(tc.dsn)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("interpolating(%q) = %q, %v; want %q (error %v)", tc.dsn, got, err, tc.want, tc.err)
			}
		})
	}
}
