package kinformertest

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kinformer/kinformer"
)

// List is what [Server.List] returns: the list type of any T, as
// *corev1.PodList is that of *corev1.Pod, so that one generic Server serves
// every type. The informer reads it as it reads a client's list, through
// meta.ListAccessor and meta.EachListItem.
type List[T kinformer.Object] struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []T `json:"items"`
}

// DeepCopyObject copies the list and every item, as runtime.Object requires.
func (l *List[T]) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &List[T]{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]T, len(l.Items))
		for i, o := range l.Items {
			if !isNil(o) {
				out.Items[i] = copyOf(o)
			}
		}
	}
	return out
}
