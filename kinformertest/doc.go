// Package kinformertest lets controllers built on kinformer be unit-tested
// without an API server: [Server] is an in-memory API server for one
// resource, and [New] returns a real [kinformer.Informer] over it, so the
// code under test sees the informer's real semantics (watch-list, resume
// from a resourceVersion, re-list after 410 Gone, ordering, causes), not a
// mock of them.
//
// The test drives the server with [Server.Add], [Server.Update] and
// [Server.Delete], each a write with a new resourceVersion, and reads its
// state back with [Server.Get]:
//
//	inf, srv := kinformertest.New(configMap("default", "a"))
//	ctrl := newController(inf) // the code under test
//	inf.Start()
//	defer inf.Stop()
//	if err := inf.WaitForSync(ctx); err != nil {
//		t.Fatal(err)
//	}
//	srv.Delete(configMap("default", "a"))
//	// … wait until ctrl has seen it, then check what it did.
//
// [Server.Compact], [Server.CloseWatches] and [Server.Bookmark] make the
// server behave as a real one does at its worst moments, so that the
// controller's handling of re-lists (Deleted with kinformer.CauseRelist) and
// bookmarks can be tested too. [Server.Requests] counts lists and watches,
// so that a test can tell whether the informer re-listed or watched again.
//
// Informers over a Server detect mutations of their cache
// (kinformer.Options.DetectMutations, whatever the options say): each
// cached object is compared with a copy every second and when it is
// replaced or removed, and a handler or reader that changed one in place,
// instead of a DeepCopy, gets the informer's handlers an Error event
// wrapping kinformer.ErrMutated that names the object and what differs,
// and an error log line. With the environment variable
// KINFORMER_CACHE_MUTATION_DETECTOR=panic the test binary panics instead of
// going on: set it in TestMain (os.Setenv before m.Run) to make such a bug
// fail the run.
package kinformertest
