package sharding

// A fake Lease API for the tests: a linearizable in-memory store (the API
// server and etcd stand-in) and each replica's connection to it, with
// request latency, cut-offs, slowness and stalls; and a member of a group
// over it.

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/kinformer/kinformer"
)

var leasesGR = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

// leaseStore is a linearizable store of Leases: each call takes effect
// at one instant, under mu, between its request and response delays.
type leaseStore struct {
	mu    sync.Mutex
	rv    int64
	items map[string]*coordinationv1.Lease
}

func newLeaseStore() *leaseStore {
	return &leaseStore{items: map[string]*coordinationv1.Lease{}}
}

// putLocked stores a copy of l at the next resourceVersion and returns
// another copy; st.mu must be held.
func (st *leaseStore) putLocked(l *coordinationv1.Lease) *coordinationv1.Lease {
	st.rv++
	n := l.DeepCopy()
	n.ResourceVersion = fmt.Sprint(st.rv)
	st.items[l.Name] = n
	return n.DeepCopy()
}

// client returns a new connection to the store, whose requests and
// responses each take rnd().
func (st *leaseStore) client(rnd func() time.Duration) *leaseClient {
	return &leaseClient{st: st, rnd: rnd}
}

// leaseClient is one replica's connection to the store; down cuts it off.
type leaseClient struct {
	coordclient.LeaseInterface // not implemented: panics if called
	st                         *leaseStore
	down                       atomic.Bool
	slow                       atomic.Int64 // extra request delay, if set (a slow server)
	rnd                        func() time.Duration
	// stall, if set, is called before each Get, Create, Update and List:
	// the calls Run makes on its own goroutine (Delete is also made by
	// other goroutines), so that a stall there stalls Run.
	stall func()
}

func (c *leaseClient) stallRun() {
	if c.stall != nil {
		c.stall()
	}
}

var errCut = fmt.Errorf("connection refused")

// call runs op after a request delay and returns after a response delay;
// a cut connection fails (and its request may or may not have landed).
func (c *leaseClient) call(ctx context.Context, op func() error) error {
	if c.down.Load() {
		time.Sleep(c.rnd())
		return errCut
	}
	time.Sleep(c.rnd() + time.Duration(c.slow.Load()))
	c.st.mu.Lock()
	err := op()
	c.st.mu.Unlock()
	time.Sleep(c.rnd())
	if c.down.Load() || ctx.Err() != nil {
		return errCut // landed, but the answer was lost
	}
	return err
}

func (c *leaseClient) Get(ctx context.Context, name string, _ metav1.GetOptions) (out *coordinationv1.Lease, err error) {
	c.stallRun()
	err = c.call(ctx, func() error {
		l, ok := c.st.items[name]
		if !ok {
			return apierrors.NewNotFound(leasesGR, name)
		}
		out = l.DeepCopy()
		return nil
	})
	return out, err
}

func (c *leaseClient) Create(ctx context.Context, l *coordinationv1.Lease, _ metav1.CreateOptions) (out *coordinationv1.Lease, err error) {
	c.stallRun()
	err = c.call(ctx, func() error {
		if _, ok := c.st.items[l.Name]; ok {
			return apierrors.NewAlreadyExists(leasesGR, l.Name)
		}
		out = c.st.putLocked(l)
		return nil
	})
	return out, err
}

func (c *leaseClient) Update(ctx context.Context, l *coordinationv1.Lease, _ metav1.UpdateOptions) (out *coordinationv1.Lease, err error) {
	c.stallRun()
	err = c.call(ctx, func() error {
		cur, ok := c.st.items[l.Name]
		if !ok {
			return apierrors.NewNotFound(leasesGR, l.Name)
		}
		if cur.ResourceVersion != l.ResourceVersion {
			return apierrors.NewConflict(leasesGR, l.Name, fmt.Errorf("stale resourceVersion"))
		}
		out = c.st.putLocked(l)
		return nil
	})
	return out, err
}

func (c *leaseClient) List(ctx context.Context, opts metav1.ListOptions) (out *coordinationv1.LeaseList, err error) {
	c.stallRun()
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return nil, err
	}
	err = c.call(ctx, func() error {
		out = &coordinationv1.LeaseList{}
		for _, l := range c.st.items {
			if sel.Matches(labels.Set(l.Labels)) {
				out.Items = append(out.Items, *l.DeepCopy())
			}
		}
		return nil
	})
	return out, err
}

func (c *leaseClient) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.call(ctx, func() error {
		l, ok := c.st.items[name]
		if !ok {
			return apierrors.NewNotFound(leasesGR, name)
		}
		if p := opts.Preconditions; p != nil && p.ResourceVersion != nil && *p.ResourceVersion != l.ResourceVersion {
			return apierrors.NewConflict(leasesGR, name, fmt.Errorf("precondition failed"))
		}
		delete(c.st.items, name)
		return nil
	})
}

// member is a Sharding on the fake Lease API, with an informer that
// applies every share at once.
type member struct {
	sh     *Sharding
	client *leaseClient
	sub    kinformer.ShareSubscription
	cancel context.CancelFunc
	done   <-chan struct{} // closed once Run and the informer have returned
}

// startMember runs a Sharding with opts on st; it is stopped at the end
// of the test.
func startMember(t *testing.T, st *leaseStore, opts Options) *member {
	t.Helper()
	m := &member{client: st.client(func() time.Duration { return time.Millisecond })}
	m.sh = newSharding(m.client, opts)
	m.sub = m.sh.Subscribe()
	var ctx context.Context
	ctx, m.cancel = context.WithCancel(context.Background())
	m.done = runWithInformer(ctx, m.sh, m.sub, func() {
		for {
			share, changed := m.sub.Share()
			m.sub.Ack(share.Version)
			m.sub.(kinformer.ShareSyncer).Synced(share.Version) // synced at once
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	})
	t.Cleanup(func() { m.stop(t) })
	return m
}

// runWithInformer runs sh until ctx ends, and informer, which applies the
// shares of sub, on another goroutine; sub is closed once informer
// returns. The channel is closed once both have returned.
func runWithInformer(ctx context.Context, sh *Sharding, sub kinformer.ShareSubscription, informer func()) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = sh.Run(ctx) }()
	go func() { defer wg.Done(); defer sub.Close(); informer() }()
	go func() { wg.Wait(); close(done) }()
	return done
}

// stopWithin is how long a replica may take to stop: its Run gives the
// share up for at most LeaseDuration/2, and deletes its Lease.
const stopWithin = 10 * time.Second

// cancelAndWait cancels a run and waits, at most stopWithin, for done;
// false if it did not come.
func cancelAndWait(cancel context.CancelFunc, done <-chan struct{}) bool {
	cancel()
	select {
	case <-done:
		return true
	case <-time.After(stopWithin):
		return false
	}
}

// stop ends the member's Run and waits for it, at most stopWithin.
func (m *member) stop(t *testing.T) {
	t.Helper()
	if !cancelAndWait(m.cancel, m.done) {
		t.Errorf("%s: Run did not return within %v", m.sh.opts.Identity, stopWithin)
	}
}

// share returns the slots m's informer is given now.
func (m *member) share() kinformer.Share {
	s, _ := m.sub.Share()
	return s
}
