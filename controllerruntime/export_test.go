package controllerruntime

import "time"

// SetAcquiredHook sets what is called with each kinformer informer's
// LastError once the factory has handed it out, before its watch error
// handler is set; restore unsets it.
func SetAcquiredHook(f func(lastError func() (error, time.Time))) (restore func()) {
	acquiredHook.Store(&f)
	return func() { acquiredHook.Store(nil) }
}
