package controllerruntime

import (
	"context"
	"errors"
	"log/slog"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/kinformer/kinformer"
)

// loggerName names kinformer's logger under controller-runtime's
// (Options.Logger's default).
const loggerName = "kinformer"

// loggerOf is the cache's logger: Options.Logger, else controller-runtime's
// root logger (what ctrl.SetLogger set, or sets later) named loggerName.
func loggerOf(o Options) *slog.Logger {
	if o.Logger != nil {
		return o.Logger
	}
	return slog.New(logr.ToSlogHandler(crlog.Log.WithName(loggerName)))
}

// informerLogger is the logger of one kind's informer: its lines name the
// kind ("Pod", "ReplicaSet.apps"), and the namespace if it watches one.
func informerLogger(log *slog.Logger, gvk schema.GroupVersionKind, namespace string) *slog.Logger {
	log = log.With("kind", gvk.GroupKind().String())
	if namespace != "" {
		log = log.With("namespace", namespace)
	}
	return log
}

// watchErrorLogger is an informer's watch error handler when
// cache.Options.DefaultWatchErrorHandler is not set. The informer has
// logged every error its list and watch met already, at Warn (logr's
// V(0) info: a connection cut or refused, a server restarting, a watch
// gone silent are retried and heal by themselves), with an unusable state
// file or a changed cached object at their own level. This adds one line
// at Error for what someone has to act on: what retrying cannot fix
// (permissions, a missing resource, a bad selector: kinformer.IsPersistent)
// and what the informer could not use (a Transform's error, an unexpected
// object from the server). The rest it logs at Debug only.
func watchErrorLogger(log *slog.Logger) toolscache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, _ *toolscache.Reflector, err error) {
		if kinformer.IsPersistent(err) || errors.Is(err, kinformer.ErrTransform) ||
			errors.Is(err, kinformer.ErrUnexpectedObject) || errors.Is(err, kinformer.ErrFields) {
			log.ErrorContext(ctx, "kinformer: failed to list or watch", "error", err)
			return
		}
		log.DebugContext(ctx, "kinformer: list or watch failed; retrying", "error", err.Error())
	}
}
