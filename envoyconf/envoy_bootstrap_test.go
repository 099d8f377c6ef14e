package envoyconf_test

import (
	"encoding/json"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3" // typed_config types
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"    // of the example
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	"github.com/quota-platform/quota/envoyconf"
)

// TestDeployEnvoyConfig_IsValidEnvoyV3: the Envoy configuration quota ships
// (deploy/envoy/envoy.yaml, the README's snippet) parses as Envoy's v3
// bootstrap with every typed_config known, and passes the API's own
// validation rules (protoc-gen-validate), typed configs included. There is
// no Envoy binary on Debian to load it with.
func TestDeployEnvoyConfig_IsValidEnvoyV3(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../deploy/envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("not an Envoy v3 bootstrap: %v", err)
	}
	validateDeep(t, &b)
	// The limits it sends descriptors for are those of ratelimit.yaml.
	c, err := envoyconf.Load("../deploy/envoy/ratelimit.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range [][]envoyconf.Entry{entries("app_id=a,ip=1.2.3.4"), entries("app_id=a,user_id=u,interface_id=i")} {
		if c.Lookup("platform", d) == nil {
			t.Errorf("%v has no limit in deploy/envoy/ratelimit.yaml", d)
		}
	}
}

// validateDeep runs ValidateAll on m and on every Any inside it, unpacked.
func validateDeep(t *testing.T, m proto.Message) {
	t.Helper()
	if v, ok := m.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s: %v", m.ProtoReflect().Descriptor().FullName(), err)
		}
	}
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		visit := func(x protoreflect.Value) {
			msg := x.Message().Interface()
			if a, ok := msg.(*anypb.Any); ok {
				inner, err := a.UnmarshalNew()
				if err != nil {
					t.Errorf("typed_config %s: %v", a.GetTypeUrl(), err)
					return
				}
				msg = inner
			}
			validateDeep(t, msg)
		}
		switch {
		case fd.IsList() && fd.Message() != nil:
			for i := range v.List().Len() {
				visit(v.List().Get(i))
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, x protoreflect.Value) bool { visit(x); return true })
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			visit(v)
		}
		return true
	})
}
