// Package clusterid asks an API server which cluster it serves: the uid
// of its kube-system namespace, made when the cluster was and never
// changed. Two clusters under one certificate authority (a company's CA,
// a cloud's) present one root; their kube-system uids differ.
//
// The informers of one process share the question: one Asker per HTTP
// client and server URL (For), whose answers are kept by the connection
// their GET went out on (a connection leads to one server for its life).
// An informer that asks about the connection its requests use gets the
// answer without a request once any informer has asked over it: with
// HTTP/2, the informers of one client share a connection, and a Factory
// of many informers makes one GET, not one each. Asks that find a GET in
// flight wait for its answer instead of making their own.
package clusterid

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"weak"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Path is the namespace whose uid names a cluster.
const Path = "/api/v1/namespaces/kube-system"

// ErrNoUID means the server answered 200 with something that is not a
// namespace with a uid.
var ErrNoUID = errors.New("the kube-system namespace has no uid")

const (
	// refusalTTL is how long a refusal (403, 404) answers, for every
	// connection (a permission is the client's, not its connection's): a
	// permission granted since is found within it.
	refusalTTL = time.Minute
	// recent is how long the last answer serves asks that name no
	// connection (an informer that has not connected yet: a Factory's
	// informers starting together).
	recent = 2 * time.Second
	// maxAnswers bounds the answers kept (one per connection seen).
	maxAnswers = 64
	// timeout bounds a GET: the asker's list waits for it.
	timeout = 30 * time.Second
)

// Asker asks one server, with one HTTP client, for its kube-system uid.
type Asker struct {
	hc  *http.Client
	url string

	mu      sync.Mutex
	answers map[net.Conn]answer // by the connection the GET went on
	last    answer              // the latest definitive answer (zero: none)
	call    *call               // the GET in flight; nil if none
}

type answer struct {
	uid string
	err error // a refusal (a StatusError), or ErrNoUID; nil with uid
	at  time.Time
}

// definitive: the server said (a uid, or a refusal that stands: 403,
// 404), as opposed to a request that failed on its way, a server busy or
// failing, or credentials it did not take (401: they may be renewed).
func definitive(err error) bool {
	return err == nil || apierrors.IsForbidden(err) || apierrors.IsNotFound(err) || errors.Is(err, ErrNoUID)
}

func (a answer) fresh(now time.Time) bool {
	return !a.at.IsZero() && (a.err == nil || now.Sub(a.at) < refusalTTL)
}

type call struct {
	done chan struct{}
	ans  answer
	conn atomic.Pointer[net.Conn] // the connection the GET went out on
}

type key struct {
	hc  weak.Pointer[http.Client]
	url string
}

var askers sync.Map // key -> *Asker; an entry goes with its client

// For returns the Asker of the server at url (the API server's base URL
// as a REST client builds it, Path appended) through hc: one per client
// and URL in the process, kept as long as hc is.
func For(hc *http.Client, url string) *Asker {
	k := key{hc: weak.Make(hc), url: url}
	if a, ok := askers.Load(k); ok {
		return a.(*Asker)
	}
	a, loaded := askers.LoadOrStore(k, &Asker{hc: hc, url: url, answers: map[net.Conn]answer{}})
	if !loaded {
		runtime.AddCleanup(hc, func(k key) { askers.Delete(k) }, k)
	}
	return a.(*Asker)
}

// UID returns the kube-system uid of the cluster behind conn, the
// connection the asker's requests go out on (nil if it has none yet):
// the answer a GET over conn had, if any had one (a refusal in the last
// refusalTTL answers for every connection; the last answer in the last
// recent, for nil); else a GET's in flight, if one is; else a new GET's
// (whichever connection it goes out on). A refusal is returned as the
// server's StatusError; a 200 without a uid as ErrNoUID.
func (a *Asker) UID(ctx context.Context, conn net.Conn) (string, error) {
	for {
		now := time.Now()
		a.mu.Lock()
		if ans, ok := a.answers[conn]; conn != nil && ok && ans.fresh(now) {
			a.mu.Unlock()
			return ans.uid, ans.err
		}
		if a.last.fresh(now) && (a.last.err != nil || conn == nil && now.Sub(a.last.at) < recent) {
			ans := a.last
			a.mu.Unlock()
			return ans.uid, ans.err
		}
		c := a.call
		if c == nil {
			c = &call{done: make(chan struct{})}
			a.call = c
			a.mu.Unlock()
			a.get(ctx, c)
			return c.ans.uid, c.ans.err
		}
		a.mu.Unlock()
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-c.done:
		}
		if ctx.Err() == nil && errors.Is(c.ans.err, context.Canceled) {
			continue // the asker that made the GET stopped: ask again
		}
		return c.ans.uid, c.ans.err
	}
}

// get makes c's GET, keeps its answer and ends c.
func (a *Asker) get(ctx context.Context, c *call) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			if i.Conn != nil {
				c.conn.Store(&i.Conn)
			}
		},
	})
	uid, err := a.do(ctx)
	c.ans = answer{uid: uid, err: err, at: time.Now()}
	a.mu.Lock()
	a.call = nil
	if definitive(err) {
		a.last = c.ans
		if conn := c.conn.Load(); conn != nil {
			if len(a.answers) >= maxAnswers {
				for k, ans := range a.answers {
					if !ans.fresh(c.ans.at) || len(a.answers) >= maxAnswers {
						delete(a.answers, k)
					}
				}
			}
			a.answers[*conn] = c.ans
		}
	}
	a.mu.Unlock()
	close(c.done)
}

// do GETs the kube-system namespace, with the asker's HTTP client (its
// credentials and connections) but not through a REST client's rate
// limiter: a Factory's informers start together, and their lists must
// not wait behind it.
func (a *Asker) do(ctx context.Context) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := a.hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		// A StatusError, which the apierrors predicates read: the
		// server's, or one for its code.
		var st metav1.Status
		if json.Unmarshal(body, &st) == nil && st.Kind == "Status" && st.Code == int32(resp.StatusCode) {
			return "", &apierrors.StatusError{ErrStatus: st}
		}
		return "", apierrors.NewGenericServerResponse(resp.StatusCode, http.MethodGet, schema.GroupResource{Resource: "namespaces"}, "kube-system", "", 0, true)
	}
	var ns struct {
		Metadata struct {
			UID string `json:"uid"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(body, &ns); err != nil || ns.Metadata.UID == "" {
		return "", fmt.Errorf("GET %s: %w", Path, ErrNoUID)
	}
	return ns.Metadata.UID, nil
}
