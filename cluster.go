package kinformer

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http/httptrace"
	"strings"

	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/kinformer/kinformer/internal/clusterid"
	"github.com/kinformer/kinformer/internal/describe"
)

// A state file is bound to the cluster it was written from. Its identity
// (durable.go) is the server's URL, the resource and, through a Factory or
// the CLI, the credentials: another cluster reached at the same URL with
// the same credentials (a cluster re-created, a name moved to another one)
// would find the file, and the probe's list, authorized there, would let
// its objects be restored: another cluster's Secrets, served as this one's.
// So each list and probe notes the certificate authority the server
// presents (clusterOf) and the uid of its kube-system namespace
// (clusterID: two clusters under one root CA share a fingerprint), each
// commit records them in the file, and a file written from another
// cluster, or from a resourceVersion beyond the server's (another
// history: another cluster, or etcd restored from a backup), is not
// restored (loop.foreign) but discarded, and the informer lists.
//
// A running informer, with a state file or not, checks the same as it
// goes: each new connection of a list or watch is fingerprinted again, a
// watch opened on a new one asks for the kube-system uid again (where the
// server told it), and a list
// below the cache's resourceVersion is another history. Any of them: a
// list from scratch, diffed against the cache (anotherHistory).

// clusterOf fingerprints the cluster a connection leads to by its
// certificate authority: the key of the root that verified the server's
// chain, however many of the chain's certificates the server presents and
// whatever its own certificate names (kube-apiserver's is re-issued often;
// servers of one cluster may present the root or not). Without verified
// chains (insecure-skip-tls-verify), the issuer of the presented chain's
// top certificate, by name and key id, or the server's own key where it
// names no key id. "" if the connection is not TLS.
func clusterOf(conn net.Conn) string {
	tc, ok := conn.(*tls.Conn)
	if !ok {
		return ""
	}
	cs := tc.ConnectionState()
	h := sha256.New()
	switch certs := cs.PeerCertificates; {
	case len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0:
		chain := cs.VerifiedChains[0]
		root := chain[len(chain)-1]
		fmt.Fprintf(h, "root-key:%d:%s;", len(root.RawSubjectPublicKeyInfo), root.RawSubjectPublicKeyInfo)
	case len(certs) == 0:
		return ""
	case len(certs[len(certs)-1].AuthorityKeyId) > 0:
		top := certs[len(certs)-1]
		fmt.Fprintf(h, "issuer:%d:%s;key-id:%d:%s;", len(top.RawIssuer), top.RawIssuer, len(top.AuthorityKeyId), top.AuthorityKeyId)
	default:
		fmt.Fprintf(h, "server-key:%d:%s;", len(certs[0].RawSubjectPublicKeyInfo), certs[0].RawSubjectPublicKeyInfo)
	}
	return "ca-sha256:" + hex.EncodeToString(h.Sum(nil)[:16])
}

// clusterID is what binds a cache to a cluster: the certificate authority
// its server presents (clusterOf) and, where this client may read it, the
// uid of the cluster's kube-system namespace, made when the cluster was
// and never changed, so that two clusters under one root (a company's CA,
// a cloud's) are told apart. A state file records it as one string
// (String), the uid after the CA's fingerprint; a file written before the
// uid was recorded holds the fingerprint alone, and is judged by it.
type clusterID struct {
	ca  string // clusterOf; "" if not TLS
	uid string // the kube-system namespace's uid; "" if not known
}

const uidMark = " kube-system-uid:"

func (c clusterID) String() string {
	if c.uid == "" {
		return c.ca
	}
	return c.ca + uidMark + c.uid
}

// parseCluster reads a state file's record of its cluster (String).
func parseCluster(s string) clusterID {
	ca, uid, _ := strings.Cut(s, uidMark)
	return clusterID{ca: ca, uid: uid}
}

// kubeSystemUID returns a function that asks lw's server for the uid of
// its kube-system namespace, given the connection the informer's
// requests last went out on (nil if none yet): one question per HTTP
// client and server, shared by the informers that use them
// (internal/clusterid), with lw's HTTP client (its credentials and
// connections) but not through its REST client's rate limiter. nil if
// kinformer cannot reach that client (a fake, a ListerWatcher of one's
// own): the binding is then the certificate authority alone.
func kubeSystemUID(src describe.Source) func(context.Context, net.Conn) (string, error) {
	rc, hc := src.REST, src.HTTP
	if rc == nil {
		return nil
	}
	a := clusterid.For(hc, rc.Get().AbsPath(clusterid.Path).URL().String())
	return func(ctx context.Context, conn net.Conn) (string, error) {
		uid, err := a.UID(ctx, conn)
		if errors.Is(err, clusterid.ErrNoUID) {
			err = fmt.Errorf("%w: %w", ErrUnexpectedObject, err)
		}
		return uid, err
	}
}

// askUID asks the server for its kube-system uid, notes a change from
// the one the cache came from (loop.moved), and keeps it for the binding
// (a state file's, and the running informer's): before each list or
// probe, where conn is nil (the request may go out on any connection: a
// GET, unless one answered within the last moments), and after a watch
// opened on a new connection, conn (answered without a request if any
// informer of the client asked over it). A server that does not let this
// client read it (403, 404) leaves the binding to the certificate
// authority, said at Debug; any other failure is returned, and the uid is
// left as it was.
func (l *loop[T]) askUID(ctx context.Context, conn net.Conn) error {
	if l.uidOf == nil {
		return nil
	}
	uid, err := l.uidOf(ctx, conn)
	switch {
	case err == nil:
	case IsPersistent(err) || errors.Is(err, ErrUnexpectedObject):
		if l.uid != "" || !l.uidRefused {
			l.log.Debug("kinformer: cannot read the kube-system namespace: the cache is bound to the cluster by its certificate authority alone", "error", err)
		}
		l.uid, l.uidRefused = "", true
		return nil
	default:
		return fmt.Errorf("GET %s (which cluster the server is): %w", clusterid.Path, err)
	}
	if l.uid != "" && uid != l.uid {
		why := fmt.Sprintf("the server is another cluster: kube-system uid %s, the cache's was %s", uid, l.uid)
		l.moved.Store(&why)
	}
	l.uid, l.uidRefused = uid, false
	return nil
}

// traceCluster returns ctx with a trace that notes the cluster a list,
// watch or probe made with it reaches (loop.cluster), whether it went out
// on another connection than the last (loop.newConn), and a change of
// certificate authority from the last connection's (loop.moved); and
// tells the state file, whose next commits record it, before the list's
// objects reach it (the probe's choice between a held file and this
// cluster is made against the cluster the file recorded, FileCluster).
func (l *loop[T]) traceCluster(ctx context.Context) context.Context {
	uid := l.uid // the loop's; the trace may run on the transport's goroutines
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			if i.Conn == nil {
				return
			}
			conn := i.Conn
			if prev := l.conn.Swap(&conn); prev == nil || *prev != conn {
				l.newConn.Store(true)
			}
			c := clusterOf(conn)
			if c == "" {
				return
			}
			if prev := l.cluster.Swap(&c); prev != nil && *prev != "" && *prev != c {
				why := "the server is another cluster: it presents another certificate authority than before"
				l.moved.Store(&why)
				// The file keeps the cluster its objects came from until
				// the list that follows replaces them (its connection
				// finds the fingerprint unchanged).
				return
			}
			if l.w.state != nil {
				l.w.state.SetCluster(clusterID{ca: c, uid: uid}.String())
			}
		},
	})
}

// rebound says why the cluster behind the connections is no longer the
// one the cache came from, "" if it is (or cannot be told): after a watch
// opened on a new connection, the kube-system uid is asked again (where
// the binding has one), and the certificate authority was compared as
// the connection came.
func (l *loop[T]) rebound(ctx context.Context) string {
	if l.newConn.Swap(false) && l.uid != "" {
		var conn net.Conn
		if c := l.conn.Load(); c != nil {
			conn = *c
		}
		if err := l.askUID(ctx, conn); err != nil && ctx.Err() == nil {
			// The watch is open: the next new connection asks again.
			l.log.Debug("kinformer: could not tell which cluster the new connection leads to", "error", err)
		}
	}
	if why := l.moved.Swap(nil); why != nil {
		return *why
	}
	return ""
}

// anotherHistory says, in a log line (Warn) and an ERROR event wrapping
// ErrAnotherHistory, that the server's history is not the cache's, and
// returns that error; a list from scratch follows (or came: a list that
// found it), diffed against the cache, whose objects the server lacks are
// Deleted.
func (l *loop[T]) anotherHistory(why string) error {
	err := fmt.Errorf("%w: %s: listing from scratch, diffed against the cache", ErrAnotherHistory, why)
	l.w.report(err)
	l.historyNoted = true
	l.w.listFresh()
	return err
}

// listedFrom checks, after a list, that the server's history is the
// cache's as it was at rv: the connection led to the same cluster, and
// the list is not at a resourceVersion below rv (another cluster's
// history, or etcd restored from a backup). The list has already
// replaced the cache, diffed against it; what is left is to say so, once.
// Unless the list kept cached objects it could not tell by uid (a
// compact cache's, at their cached version): one of those may be
// another cluster's object at the same key and version, so again says
// to list once more, fresh (writer.fresh).
func (l *loop[T]) listedFrom(rv string) (again bool) {
	noted := l.historyNoted
	l.historyNoted = false
	l.newConn.Store(false) // the list's connection is the binding's now
	why := below(l.w.status.ResourceVersion(), rv)
	if p := l.moved.Swap(nil); p != nil {
		why = *p
	}
	if why == "" || noted {
		return false
	}
	l.anotherHistory(why)
	return l.w.listAgainIfBlind()
}

// below says how the server's resourceVersion now is below the cache's
// (another history), or "" if it is not, or either is unknown.
func below(now, cache string) string {
	if now == "" || cache == "" {
		return ""
	}
	if c, err := resourceversion.CompareResourceVersion(now, cache); err == nil && c < 0 {
		return fmt.Sprintf("the server's resourceVersion %s is below the cache's %s", now, cache)
	}
	return ""
}

// foreign says why the held state file must not be restored after the
// probe, or "" if it may: written from another cluster than the probe
// reached, or at a resourceVersion the server has not reached (another
// history).
func (l *loop[T]) foreign() string {
	h := l.held
	if l.target != "" {
		if c, err := resourceversion.CompareResourceVersion(h.rv, l.target); err == nil && c > 0 {
			return fmt.Sprintf("it is at resourceVersion %s, beyond the server's %s: another cluster's history, or etcd restored from a backup", h.rv, l.target)
		}
	}
	now := clusterID{uid: l.uid}
	if c := l.cluster.Load(); c != nil {
		now.ca = *c
	}
	return otherCluster(parseCluster(l.w.state.FileCluster()), now)
}

// otherCluster says why a state file written from the cluster file is not
// the server's (now), or "" if it may be. A file without the uid (written
// before it was recorded, or where kube-system could not be read), or a
// server that will not say it, is judged by the certificate authority
// alone.
func otherCluster(file, now clusterID) string {
	switch {
	case file.uid != "" && now.uid != "" && file.uid != now.uid:
		return fmt.Sprintf("written from another cluster: kube-system uid %s, the server's is %s", file.uid, now.uid)
	case now.ca == "" || file.ca == now.ca:
		return ""
	case file.ca == "":
		return "it does not say which cluster it was written from"
	}
	return "it was written from another cluster (the server presents another certificate authority)"
}

// dropHeld discards the held state file's objects, unrestored, for why:
// an ERROR event (wrapping ErrSnapshot) and a log line say so, the file is
// emptied at its next commit, and the informer lists.
func (l *loop[T]) dropHeld(why string) outcome {
	l.held, l.target = nil, ""
	l.w.state.DropHeld()
	l.w.report(fmt.Errorf("%w: %s: %s: its objects are not restored; listing from scratch", ErrSnapshot, l.w.state.Path(), why))
	return outcome{kind: heldForeign}
}
