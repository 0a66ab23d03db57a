package clientgo

import "k8s.io/client-go/tools/cache"

// Telling a kinformer informer behind client-go's interface, whose %T is
// client-go's own type behind a factory's typed accessor, and how it
// keeps its cache.

// IsKinformer reports whether inf is a kinformer informer behind
// client-go's interface: one of this package's (NewSharedIndexInformer,
// Wrap, WrapWithResync, or a factory's through ForFactory, also as the
// factory's typed accessors return it), rather than client-go's own.
func IsKinformer(inf cache.SharedInformer) bool { return modeOf(inf) != nil }

// Mode says how the kinformer informer behind inf keeps its cache:
// "plain" (decoded objects, whole, as client-go's), "compact" (as bytes,
// kinformer.Options.Compact), "projected" (only some fields,
// kinformer.Options.Fields) or "compact+projected"; "" if inf is not one
// of this package's (IsKinformer). Run logs it in its "Starting kinformer
// informer" line.
func Mode(inf cache.SharedInformer) string {
	if m := modeOf(inf); m != nil {
		return m.mode()
	}
	return ""
}

// moder is the store of an informer of this package, whatever its T.
type moder interface{ mode() string }

// modeOf finds the informer of this package behind inf by its store:
// client-go's typed accessors (f.Core().V1().Pods().Informer()) return the
// factory's informer in a wrapper of their own type, which passes GetStore
// on.
func modeOf(inf cache.SharedInformer) moder {
	if inf == nil {
		return nil
	}
	m, _ := inf.GetStore().(moder)
	return m
}

func (s *informer[T]) mode() string {
	compact, projected := s.inf.Cache().Compact(), len(s.inf.Fields()) > 0
	switch {
	case compact && projected:
		return "compact+projected"
	case compact:
		return "compact"
	case projected:
		return "projected"
	}
	return "plain"
}
