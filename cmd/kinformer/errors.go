package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/clientcmd"
)

// Exit codes. exitCodes documents them: the help text comes from it, and
// a test checks the package comment against it.
const (
	exitOK = iota
	exitError
	exitUsage
	exitUnknown
	exitBadSelector
	exitUnreachable
	exitForbidden
)

// exitCodes names and explains every exit code, indexed by the code.
var exitCodes = [...]struct{ name, help string }{
	exitOK:          {"ok", "success, including a clean stop on SIGINT or SIGTERM"},
	exitError:       {"error", "any other error"},
	exitUsage:       {"usage", "unknown command or flag, missing or extra argument"},
	exitUnknown:     {"unknown resource", "not found through discovery, or 404 when listing"},
	exitBadSelector: {"bad selector", "the server rejected --selector or --field-selector (400)"},
	exitUnreachable: {"unreachable", "cannot reach the cluster, or no usable configuration"},
	exitForbidden:   {"forbidden", "forbidden or unauthorized (403, 401)"},
}

// exitCodesHelp is the exit code table as --help shows it, each line
// indented by indent.
func exitCodesHelp(indent string) string {
	var b strings.Builder
	for code, c := range exitCodes {
		fmt.Fprintf(&b, "%s%d  %s: %s\n", indent, code, c.name, c.help)
	}
	return b.String()
}

// codedError carries the exit code a failure maps to, with the message
// already worded for the user.
type codedError struct {
	code int
	msg  string
	err  error // the cause, for errors.Is/As; may be nil
}

func (e *codedError) Error() string { return e.msg }
func (e *codedError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &codedError{code: exitUsage, msg: fmt.Sprintf(format, args...)}
}

// errHelp is returned when the user asked for help: usage went to stdout.
var errHelp = errors.New("help requested")

// fail prints err (if any) and returns its exit code.
func (e *env) fail(err error) int {
	if err == nil || errors.Is(err, errHelp) {
		return exitOK
	}
	code, msg := classify(err)
	fmt.Fprintf(e.stderr, "%s: %s\n", e.prog, escapeTerminal(msg)) // it may quote the server
	if code == exitUsage {
		fmt.Fprintf(e.stderr, "Run '%s --help' for usage.\n", e.prog)
	}
	return code
}

// warn prints a warning on stderr.
func (e *env) warn(msg string) {
	fmt.Fprintf(e.stderr, "%s: warning: %s\n", e.prog, escapeTerminal(msg))
}

// classify maps an error to an exit code and a message that names the
// problem.
func classify(err error) (int, string) {
	var ce *codedError
	if errors.As(err, &ce) {
		return ce.code, ce.msg
	}
	status := func() string {
		var st apierrors.APIStatus
		if errors.As(err, &st) && st.Status().Message != "" {
			return st.Status().Message
		}
		return err.Error()
	}
	switch {
	case apierrors.IsForbidden(err):
		return exitForbidden, "forbidden: " + status()
	case apierrors.IsUnauthorized(err):
		return exitForbidden, "unauthorized: " + status()
	case apierrors.IsNotFound(err):
		return exitUnknown, "not found: " + status()
	case apierrors.IsBadRequest(err), apierrors.IsInvalid(err):
		return exitBadSelector, "bad selector: " + status()
	case isUnreachable(err):
		return exitUnreachable, "cannot reach the cluster: " + err.Error()
	case clientcmd.IsEmptyConfig(err):
		return exitUnreachable, "no configuration: set --kubeconfig or $KUBECONFIG, or run inside a cluster"
	case clientcmd.IsConfigurationInvalid(err):
		return exitUnreachable, "invalid configuration: " + err.Error()
	}
	return exitError, err.Error()
}

// isUnreachable reports network-level failures: refused or timed out
// connections, DNS, TLS.
func isUnreachable(err error) bool {
	var (
		ue *url.Error
		oe *net.OpError
		de *net.DNSError
	)
	return errors.As(err, &ue) || errors.As(err, &oe) || errors.As(err, &de) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, context.DeadlineExceeded)
}

// stoppedOr is err, or nil once ctx is done: a failure caused by SIGINT or
// SIGTERM (a request cancelled) is a clean stop, not an error to report.
func stoppedOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}
