package client_test

import (
	"testing"

	"github.com/quota-platform/quota/internal/testsupport/quotatest"
)

// quotaSrv is the real quota HTTP API (quotatest.ExampleRules) that the
// examples and tests call; quotaURL its address.
var (
	quotaSrv *quotatest.Server
	quotaURL string
)

func TestMain(m *testing.M) {
	quotatest.Main(m, &quotaSrv, &quotaURL)
}
