package jsonwatch

import (
	"bytes"
	"strconv"
	"unsafe"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/kinformer/kinformer/internal/projection"
	"github.com/kinformer/kinformer/internal/protowatch"
)

// A Lazy Format leaves the unstructured objects of ADDED, MODIFIED and
// DELETED events undecoded, for a compact cache to keep: the event's
// Object is a *protowatch.Raw, the object's JSON as it came (its tokens
// copied, metadata.managedFields skipped if stripped, what a projection
// leaves out skipped) and the metadata read on the way. Nothing is decoded
// and nothing encoded again.
//
// Only what decodes as it would have is left undecoded: an object whose
// copy finds anything its decoding would refuse or treat specially (a
// number out of range, a name given twice or escaped, a kind missing, an
// apiVersion that is not one, metadata that is not what Kubernetes
// writes) is decoded from the copy, so that it fails as an Error event when
// it arrives, as without Lazy.

// tokenCopy copies JSON values token by token, keeping what a
// projection keeps: a projected typed object before it is decoded
// (typed.decode), an unstructured object a Lazy Format keeps (Reader.raw).
// It belongs to one goroutine.
type tokenCopy struct {
	buf bytes.Buffer
	enc *jsontext.Encoder
	// plain stays true while what was copied decodes as it came (no
	// number out of range, no escaped name that a projection judged).
	plain bool
}

// reset empties the copy, dropping a buffer grown large for one object.
func (c *tokenCopy) reset() {
	if c.buf.Cap() > 1<<20 {
		c.buf = bytes.Buffer{}
	} else {
		c.buf.Reset()
	}
	if c.enc == nil {
		c.enc = jsontext.NewEncoder(&c.buf, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	} else {
		c.enc.Reset(&c.buf, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	}
	c.plain = true
}

// rawCopy is a Lazy Format's copy of one object, with its metadata.
type rawCopy struct {
	tokenCopy
	meta protowatch.Meta
}

var (
	qMetadata        = []byte(`"metadata"`)
	qManagedFields   = []byte(`"managedFields"`)
	qKind            = []byte(`"kind"`)
	qAPIVersion      = []byte(`"apiVersion"`)
	qName            = []byte(`"name"`)
	qNamespace       = []byte(`"namespace"`)
	qUID             = []byte(`"uid"`)
	qResourceVersion = []byte(`"resourceVersion"`)
)

// raw copies the object at dec's position (its first token a '{'). ok
// false: it must be decoded (from r.copy.buf's bytes, the object as
// copied). An error is dec's: the stream is broken.
func (r *Reader) raw(sel *projection.Node) (obj *protowatch.Raw, ok bool, err error) {
	c := r.copy
	if c == nil {
		c = &rawCopy{}
		r.copy = c
	}
	c.reset()
	c.meta = protowatch.Meta{}
	dec := r.vals.dec
	if _, err := dec.ReadToken(); err != nil {
		return nil, false, err
	}
	if err := c.enc.WriteToken(jsontext.BeginObject); err != nil {
		return nil, false, err
	}
	// A name given twice is decoded last-wins, as the copy will be on
	// every read; only metadata twice would be read otherwise here.
	var seenMeta, seenKind, seenAPI bool
	for dec.PeekKind() != '}' {
		name, err := dec.ReadValue()
		if err != nil {
			return nil, false, err
		}
		if bytes.IndexByte(name, '\\') >= 0 || (seenMeta && bytes.Equal(name, qMetadata)) {
			c.plain = false
		}
		child, keep := sel.ChildQuoted(name)
		if !keep {
			if err := dec.SkipValue(); err != nil {
				return nil, false, err
			}
			continue
		}
		if err := c.enc.WriteValue(name); err != nil {
			return nil, false, err
		}
		switch {
		case bytes.Equal(name, qMetadata):
			seenMeta = true
			err = r.rawMeta(c, child)
		case bytes.Equal(name, qKind):
			seenKind = true
			err = c.str(dec, func(s []byte) { c.plain = c.plain && len(s) > 0 })
		case bytes.Equal(name, qAPIVersion):
			seenAPI = true
			// More than one "/" is no group version: the kind is hidden.
			err = c.str(dec, func(s []byte) { c.plain = c.plain && bytes.Count(s, []byte("/")) <= 1 })
		default:
			err = c.value(dec, child)
		}
		if err != nil {
			return nil, false, err
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, false, err
	}
	if err := c.enc.WriteToken(jsontext.EndObject); err != nil {
		return nil, false, err
	}
	if !c.plain || !seenMeta || !seenKind || !seenAPI || c.meta.Name == "" {
		return nil, false, nil
	}
	return &protowatch.Raw{Data: bytes.Clone(bytes.TrimSpace(c.buf.Bytes())), Meta: c.meta}, true, nil
}

// rawMeta copies the metadata, reading its name, namespace, uid and
// resourceVersion, skipping managedFields if stripped.
func (r *Reader) rawMeta(c *rawCopy, sel *projection.Node) error {
	dec := r.vals.dec
	if dec.PeekKind() != '{' {
		c.plain = false
		return c.value(dec, sel)
	}
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	if err := c.enc.WriteToken(tok); err != nil {
		return err
	}
	for dec.PeekKind() != '}' { // a field twice: the last, here as when decoded
		name, err := dec.ReadValue()
		if err != nil {
			return err
		}
		if bytes.IndexByte(name, '\\') >= 0 {
			c.plain = false
		}
		child, keep := sel.ChildQuoted(name)
		if !keep || (r.vals.strip && bytes.Equal(name, qManagedFields)) {
			if err := dec.SkipValue(); err != nil {
				return err
			}
			continue
		}
		if err := c.enc.WriteValue(name); err != nil {
			return err
		}
		var into *string
		switch {
		case bytes.Equal(name, qName):
			into = &c.meta.Name
		case bytes.Equal(name, qNamespace):
			into = &c.meta.Namespace
		case bytes.Equal(name, qUID):
			into = &c.meta.UID
		case bytes.Equal(name, qResourceVersion):
			into = &c.meta.ResourceVersion
		}
		if into != nil {
			err = c.str(dec, func(s []byte) { *into = string(s) })
		} else {
			err = c.value(dec, child)
		}
		if err != nil {
			return err
		}
	}
	tok, err = dec.ReadToken()
	if err != nil {
		return err
	}
	return c.enc.WriteToken(tok)
}

// str copies a value that must be a plain string (no escapes), giving
// its content to fn; anything else is copied and makes the object one to
// decode.
func (c *tokenCopy) str(dec *jsontext.Decoder, fn func([]byte)) error {
	if dec.PeekKind() != '"' {
		c.plain = false
		return c.value(dec, nil)
	}
	v, err := dec.ReadValue()
	if err != nil {
		return err
	}
	if bytes.IndexByte(v, '\\') >= 0 {
		c.plain = false
	} else {
		fn(v[1 : len(v)-1])
	}
	return c.enc.WriteValue(v)
}

// value copies a value, keeping of it what sel keeps, checking that its
// numbers decode.
func (c *tokenCopy) value(dec *jsontext.Decoder, sel *projection.Node) error {
	switch dec.PeekKind() {
	case '{':
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if err := c.enc.WriteToken(tok); err != nil {
			return err
		}
		for dec.PeekKind() != '}' {
			name, err := dec.ReadValue()
			if err != nil {
				return err
			}
			child, keep := sel, true
			if sel != nil {
				if bytes.IndexByte(name, '\\') >= 0 {
					c.plain = false // its projection is the decoder's to make
				}
				child, keep = sel.ChildQuoted(name)
			}
			if !keep {
				if err := dec.SkipValue(); err != nil {
					return err
				}
				continue
			}
			if err := c.enc.WriteValue(name); err != nil {
				return err
			}
			if err := c.value(dec, child); err != nil {
				return err
			}
		}
		tok, err = dec.ReadToken()
		if err != nil {
			return err
		}
		return c.enc.WriteToken(tok)
	case '[':
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if err := c.enc.WriteToken(tok); err != nil {
			return err
		}
		for dec.PeekKind() != ']' {
			if err := c.value(dec, sel); err != nil {
				return err
			}
		}
		tok, err = dec.ReadToken()
		if err != nil {
			return err
		}
		return c.enc.WriteToken(tok)
	}
	v, err := dec.ReadValue()
	if err != nil {
		return err
	}
	if v.Kind() == '0' && !decodable(v) {
		c.plain = false // out of range: the decoder says so
	}
	return c.enc.WriteValue(v)
}

// decodable tells whether number accepts raw, without boxing it.
func decodable(raw []byte) bool {
	if bytes.IndexByte(raw, '.') < 0 {
		if _, ok := parseInt(raw); ok {
			return true
		}
	}
	_, err := strconv.ParseFloat(unsafe.String(unsafe.SliceData(raw), len(raw)), 64)
	return err == nil
}
