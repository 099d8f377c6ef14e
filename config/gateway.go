package config

import (
	"fmt"
	"net/textproto"
	"strings"

	"github.com/quota-platform/quota/rules"
)

// HeaderStyle says which rate-limit headers checks answer with.
type HeaderStyle string

// The header styles of QUOTA_HEADERS.
const (
	// HeadersLegacy: RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset
	// of the most restrictive limit (the headers of DESIGN.md).
	HeadersLegacy HeaderStyle = "legacy"
	// HeadersDraft: the RateLimit-Policy and RateLimit structured fields of
	// draft-ietf-httpapi-ratelimit-headers, one item per limit.
	HeadersDraft HeaderStyle = "draft"
	// HeadersBoth: both sets.
	HeadersBoth HeaderStyle = "both"
)

// Legacy reports whether the legacy headers are sent.
func (h HeaderStyle) Legacy() bool { return h == HeadersLegacy || h == HeadersBoth }

// Draft reports whether the draft's structured fields are sent.
func (h HeaderStyle) Draft() bool { return h == HeadersDraft || h == HeadersBoth }

// AuthHeader maps one request header of GET /v1/auth to a dimension.
type AuthHeader struct {
	Dimension string
	Header    string // canonical form (textproto.CanonicalMIMEHeaderKey)
}

// DefaultAuthHeaders is QUOTA_AUTH_HEADERS' default.
const DefaultAuthHeaders = "app_id=X-App-Id,user_id=X-User-Id,interface_id=X-Interface-Id,ip=X-Real-IP"

// Gateway is the settings of the gateway entry points.
type Gateway struct {
	AuthHeaders    []AuthHeader `env:"QUOTA_AUTH_HEADERS" envDefault:"app_id=X-App-Id,user_id=X-User-Id,interface_id=X-Interface-Id,ip=X-Real-IP" help:"forward auth: dimension=Header-Name, ..."`
	AuthDenyStatus int          `env:"QUOTA_AUTH_DENY_STATUS" envDefault:"429" validate:"min=402,max=499" help:"status of a denied /v1/auth (429; nginx's auth_request needs 403)"`
	Headers        HeaderStyle  `env:"QUOTA_HEADERS" envDefault:"legacy" validate:"oneof=legacy draft both" help:"rate-limit headers of checks: legacy, draft or both"`
}

// reserved are check fields that are not dimensions.
var reserved = map[string]bool{"cost": true, "dry_run": true, "report": true}

// ParseAuthHeaders reads QUOTA_AUTH_HEADERS: a comma-separated list of
// dimension=Header-Name.
func ParseAuthHeaders(v string) ([]AuthHeader, error) {
	var out []AuthHeader
	dims := map[string]bool{}
	hdrs := map[string]bool{}
	for _, item := range strings.Split(v, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		dim, hdr, ok := strings.Cut(item, "=")
		dim, hdr = strings.TrimSpace(dim), strings.TrimSpace(hdr)
		if !ok || dim == "" || hdr == "" {
			return nil, fmt.Errorf("QUOTA_AUTH_HEADERS: %q is not dimension=Header-Name", item)
		}
		if !rules.ValidName(dim) || reserved[dim] {
			return nil, fmt.Errorf("QUOTA_AUTH_HEADERS: dimension %q must match [a-z][a-z0-9_]{0,31} and not be cost, dry_run or report", dim)
		}
		if !validHeaderName(hdr) {
			return nil, fmt.Errorf("QUOTA_AUTH_HEADERS: %q is not a valid header name", hdr)
		}
		hdr = textproto.CanonicalMIMEHeaderKey(hdr)
		if dims[dim] || hdrs[hdr] {
			return nil, fmt.Errorf("QUOTA_AUTH_HEADERS: dimension %s or header %s given twice", dim, hdr)
		}
		dims[dim], hdrs[hdr] = true, true
		out = append(out, AuthHeader{Dimension: dim, Header: hdr})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("QUOTA_AUTH_HEADERS %q: give at least one dimension=Header-Name", v)
	}
	if len(out) > 32 {
		return nil, fmt.Errorf("QUOTA_AUTH_HEADERS: %d headers, at most 32 (the dimensions of one check)", len(out))
	}
	return out, nil
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return s != ""
}
