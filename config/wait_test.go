package config

import (
	"strings"
	"testing"
	"time"
)

func TestLoad_RedisWaitReplicas(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		env      map[string]string
		replicas int
		timeout  time.Duration
		wantErr  string
	}{
		{name: "off by default", env: nil, replicas: 0, timeout: 100 * time.Millisecond},
		{name: "one replica, default timeout", env: map[string]string{"QUOTA_REDIS_WAIT_REPLICAS": "1"}, replicas: 1, timeout: 100 * time.Millisecond},
		{name: "timeout set", env: map[string]string{"QUOTA_REDIS_WAIT_REPLICAS": "2", "QUOTA_REDIS_WAIT_TIMEOUT": "20ms"}, replicas: 2, timeout: 20 * time.Millisecond},
		{name: "negative replicas", env: map[string]string{"QUOTA_REDIS_WAIT_REPLICAS": "-1"}, wantErr: "QUOTA_REDIS_WAIT_REPLICAS"},
		{name: "not a number", env: map[string]string{"QUOTA_REDIS_WAIT_REPLICAS": "one"}, wantErr: "QUOTA_REDIS_WAIT_REPLICAS"},
		{name: "timeout not below the Redis timeout", env: map[string]string{"QUOTA_REDIS_WAIT_REPLICAS": "1", "QUOTA_REDIS_WAIT_TIMEOUT": "250ms"}, wantErr: "QUOTA_REDIS_WAIT_TIMEOUT"},
		{name: "timeout zero", env: map[string]string{"QUOTA_REDIS_WAIT_REPLICAS": "1", "QUOTA_REDIS_WAIT_TIMEOUT": "0s"}, wantErr: "QUOTA_REDIS_WAIT_TIMEOUT"},
		{name: "timeout not a duration", env: map[string]string{"QUOTA_REDIS_WAIT_TIMEOUT": "soon"}, wantErr: "QUOTA_REDIS_WAIT_TIMEOUT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := Load(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "\n") {
					t.Fatalf("err = %v, want one line naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.RedisWaitReplicas != tc.replicas || s.RedisWaitTimeout != tc.timeout {
				t.Errorf("replicas %d timeout %s, want %d and %s", s.RedisWaitReplicas, s.RedisWaitTimeout, tc.replicas, tc.timeout)
			}
		})
	}
}
