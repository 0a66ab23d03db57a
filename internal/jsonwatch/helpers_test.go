package jsonwatch

import (
	"bytes"
	"encoding/json"
	"unsafe"
)

// jsonRaw and newStdDecoder cut a stream into values as client-go's JSON
// framer does (encoding/json's Decoder).
type jsonRaw = json.RawMessage

func newStdDecoder(b []byte) *json.Decoder { return json.NewDecoder(bytes.NewReader(b)) }

// ifacePtr returns the data word of an interface value: equal for two
// interfaces that share one boxed value.
func ifacePtr(x any) unsafe.Pointer { return (*[2]unsafe.Pointer)(unsafe.Pointer(&x))[1] }
