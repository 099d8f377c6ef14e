package loadgen

// scanBatch counts the results of a /v1/check/batch answer,
//
//	{"results": [{"allowed": true, "rules": [...]}, ...]}
//
// without decoding it: one pass over the bytes that tracks nesting, skips
// strings (escapes included) and reads the "allowed" member of each object
// directly inside the top-level "results" array, ignoring the "allowed"
// members nested deeper (per-rule entries). ok is false when the body is
// not shaped like that, or when some result has no boolean "allowed".
func scanBatch(b []byte) (allowed, denied, results int, ok bool) {
	const (
		topDepth    = 1 // inside the top-level object
		arrayDepth  = 2 // inside the results array
		resultDepth = 3 // inside one result object
	)
	depth := 0
	pendingResults := false // just read the key "results" at topDepth
	inResults := false
	sawResults := false
	for i := 0; i < len(b); {
		c := b[i]
		switch c {
		case '"':
			j := i + 1
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			if j >= len(b) {
				return 0, 0, 0, false
			}
			s := b[i+1 : j]
			k := skipSpace(b, j+1)
			if k < len(b) && b[k] == ':' { // s is a member name
				k = skipSpace(b, k+1)
				switch {
				case depth == topDepth && string(s) == "results":
					if k >= len(b) || b[k] != '[' {
						return 0, 0, 0, false
					}
					pendingResults = true
				case inResults && depth == resultDepth && string(s) == "allowed":
					switch {
					case hasPrefix(b[k:], "true"):
						allowed++
						k += 4
					case hasPrefix(b[k:], "false"):
						denied++
						k += 5
					default:
						return 0, 0, 0, false
					}
				}
				i = k
				continue
			}
			i = j + 1
		case '{', '[':
			depth++
			if c == '[' && pendingResults && depth == arrayDepth {
				if sawResults {
					return 0, 0, 0, false
				}
				inResults, sawResults, pendingResults = true, true, false
			}
			if c == '{' && inResults && depth == resultDepth {
				results++
			}
			i++
		case '}', ']':
			if c == ']' && inResults && depth == arrayDepth {
				inResults = false
			}
			depth--
			if depth < 0 {
				return 0, 0, 0, false
			}
			i++
		default:
			i++
		}
	}
	if depth != 0 || !sawResults || allowed+denied != results {
		return 0, 0, 0, false
	}
	return allowed, denied, results, true
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}
