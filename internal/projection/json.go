package projection

import (
	"bytes"

	"github.com/go-json-experiment/json/jsontext"
)

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
