package kinformer

// EventType says what happened to an object. The values are the wire strings
// of the Kubernetes watch protocol.
type EventType string

const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
	Bookmark EventType = "BOOKMARK"
	Error    EventType = "ERROR"
)

// eventTypes lists the valid types in a stable order; its index is the bit
// used in a registration's mask.
var eventTypes = [...]EventType{Added, Modified, Deleted, Bookmark, Error}

// EventTypes returns every event type, in the order Added, Modified,
// Deleted, Bookmark, Error. The slice is the caller's.
func EventTypes() []EventType { return append([]EventType(nil), eventTypes[:]...) }

func (t EventType) bit() (uint8, bool) {
	for i, et := range eventTypes {
		if et == t {
			return 1 << i, true
		}
	}
	return 0, false
}

// Event is what a handler receives.
//
//   - Added: Object is the new object.
//   - Modified: Object is the new state, Old the previously cached state.
//   - Deleted: Object is the last known state.
//   - Bookmark: Object carries only a resourceVersion; the cache is unchanged.
//   - Error: Err says what went wrong; classify it with errors.Is (ErrExpired,
//     ErrTransform, …) or k8s.io/apimachinery/pkg/api/errors; the message
//     names the object when the error concerns one. Object is the zero value.
//
// ResourceVersion is the resourceVersion the informer had reached with this
// event. Objects are shared with the cache and other handlers: do not modify
// them.
type Event[T Object] struct {
	Type            EventType
	Object          T
	Old             T
	ResourceVersion string
	Err             error
}
