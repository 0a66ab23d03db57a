package kinformer

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"net"
	"net/http/httptrace"

	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// A state file is bound to the cluster it was written from. Its identity
// (persist.go) is the server's URL, the resource and, through a Factory or
// the CLI, the credentials: another cluster reached at the same URL with
// the same credentials (a cluster re-created, a name moved to another one)
// would find the file, and the probe's list, authorized there, would let
// its objects be restored: another cluster's Secrets, served as this one's.
// So each list and probe notes the certificate authority the server
// presents (clusterOf), each commit records it in the file, and a file
// written from another one, or from a resourceVersion beyond the server's
// (another history: another cluster, or etcd restored from a backup), is
// not restored (loop.foreign) but discarded, and the informer lists.

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

// traceCluster returns ctx with a trace that notes the cluster a list or
// probe made with it reaches (loop.cluster), and tells the state file,
// whose next commits record it, before the list's objects reach it (the
// probe's choice between a held file and this cluster is made against the
// cluster the file recorded, FileCluster). ctx itself without a state file.
func (l *loop[T]) traceCluster(ctx context.Context) context.Context {
	if l.w.state == nil {
		return ctx
	}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			if c := clusterOf(i.Conn); c != "" {
				l.cluster.Store(&c)
				l.w.state.SetCluster(c)
			}
		},
	})
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
	now, file := "", l.w.state.FileCluster()
	if c := l.cluster.Load(); c != nil {
		now = *c
	}
	switch {
	case now == "" || file == now:
		return ""
	case file == "":
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
