package loadgen

import "strconv"

// Value prefixes of the generated dimension values. They contain nothing
// that needs escaping in JSON, which is what lets AppendCheck skip escaping.
const (
	appPrefix   = "app-"
	userPrefix  = "user-"
	ifacePrefix = "iface-"
)

// AppendCheck appends the JSON object of one check for k to b:
//
//	{"app_id":"app-7","ip":"1.0.3.9","user_id":"user-42","interface_id":"iface-3"}
//
// It allocates nothing when b has room.
func AppendCheck(b []byte, k Key) []byte {
	b = append(b, `{"app_id":"`+appPrefix...)
	b = strconv.AppendUint(b, k.App, 10)
	b = append(b, `","ip":"`...)
	b = AppendIP(b, k.IP)
	b = append(b, `","user_id":"`+userPrefix...)
	b = strconv.AppendUint(b, k.User, 10)
	b = append(b, `","interface_id":"`+ifacePrefix...)
	b = strconv.AppendUint(b, k.Iface, 10)
	b = append(b, `"}`...)
	return b
}

// AppendIP appends IP index i as a dotted IPv4 address, 1.0.0.0 + i.
func AppendIP(b []byte, i uint64) []byte {
	v := uint32(i + 1<<24)
	b = strconv.AppendUint(b, uint64(v>>24), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(v>>16&0xff), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(v>>8&0xff), 10)
	b = append(b, '.')
	b = strconv.AppendUint(b, uint64(v&0xff), 10)
	return b
}

// AppendBatch appends a /v1/check/batch body of n checks drawn from src:
//
//	{"checks":[{…},{…}]}
func AppendBatch(b []byte, src *KeySource, n int) []byte {
	b = append(b, `{"checks":[`...)
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendCheck(b, src.Next())
	}
	return append(b, "]}"...)
}
