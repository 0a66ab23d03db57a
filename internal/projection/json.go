package projection

import (
	"bytes"

	"github.com/go-json-experiment/json/jsontext"
)

// JSON reads the next value of dec, an object of the projection's type,
// and appends to out the JSON of what the projection keeps of it: members
// left out are skipped unread, kept ones copied as they came. Duplicate
// names and invalid UTF-8 pass through, for the decoder of the result to
// treat as it would have the original. An error is dec's: the stream is
// broken.
func (f *Fields) JSON(out *bytes.Buffer, dec *jsontext.Decoder) error {
	enc := jsontext.NewEncoder(out, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	return f.root.json(enc, dec)
}

func (n *Node) json(enc *jsontext.Encoder, dec *jsontext.Decoder) error {
	switch dec.PeekKind() {
	case '{':
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if err := enc.WriteToken(tok); err != nil {
			return err
		}
		for dec.PeekKind() != '}' {
			name, err := dec.ReadValue() // the quoted name, as it came
			if err != nil {
				return err
			}
			c, keep := n.ChildQuoted(name)
			if !keep {
				if err := dec.SkipValue(); err != nil {
					return err
				}
				continue
			}
			if err := enc.WriteValue(name); err != nil {
				return err
			}
			if c == nil {
				v, err := dec.ReadValue()
				if err != nil {
					return err
				}
				if err := enc.WriteValue(v); err != nil {
					return err
				}
				continue
			}
			if err := c.json(enc, dec); err != nil {
				return err
			}
		}
		tok, err = dec.ReadToken()
		if err != nil {
			return err
		}
		return enc.WriteToken(tok)
	case '[':
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if err := enc.WriteToken(tok); err != nil {
			return err
		}
		for dec.PeekKind() != ']' {
			if err := n.json(enc, dec); err != nil {
				return err
			}
		}
		tok, err = dec.ReadToken()
		if err != nil {
			return err
		}
		return enc.WriteToken(tok)
	}
	v, err := dec.ReadValue() // a scalar where an object was expected: the object's decoder judges it
	if err != nil {
		return err
	}
	return enc.WriteValue(v)
}

// ChildQuoted is Child of a quoted JSON name (a jsontext.Value), without
// allocating unless it is escaped.
func (n *Node) ChildQuoted(quoted jsontext.Value) (*Node, bool) {
	if n == nil {
		return nil, true
	}
	if bytes.IndexByte(quoted, '\\') < 0 && len(quoted) >= 2 {
		c, ok := n.names[string(quoted[1:len(quoted)-1])]
		return c, ok
	}
	s, err := jsontext.AppendUnquote(nil, quoted)
	if err != nil {
		return nil, false
	}
	c, ok := n.names[string(s)]
	return c, ok
}
