package api

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	"gopkg.in/yaml.v3"
)

// openAPIYAML is the OpenAPI 3 document of the HTTP API, written in YAML
// (anchors keep /v1/auth's seven methods one operation); it is served as
// JSON at GET /openapi.json.
//
//go:embed openapi.yaml
var openAPIYAML []byte

// OpenAPI returns the OpenAPI 3 document of the HTTP API as JSON.
func OpenAPI() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("openapi.yaml to JSON: %w", err)
	}
	return b, nil
}

// openAPIRoute serves the document, converted once when the routes are built.
func (s *Server) openAPIRoute(e *echo.Echo) {
	doc, err := OpenAPI()
	if err != nil {
		// The document is embedded: only a broken build gets here, and
		// TestOpenAPI_DocumentIsValid fails first.
		s.deps.Log.Error("openapi document", "err", err)
		return
	}
	e.GET("/openapi.json", func(c echo.Context) error {
		return writeJSON(c, http.StatusOK, doc)
	})
}
