package reconcile

import "github.com/prometheus/client_golang/prometheus"

var (
	passes = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "hostd", Name: "reconcile_passes_total", Help: "Reconcile passes run.",
	})
	passErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "hostd", Name: "reconcile_pass_errors_total", Help: "Reconcile passes that ended with an error.",
	})
	actions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "hostd", Name: "domain_actions_total", Help: "Domain lifecycle actions taken.",
	}, []string{"action"})
)

// Collectors are the reconciler's metrics, for the daemon's registry.
func Collectors() []prometheus.Collector { return []prometheus.Collector{passes, passErrors, actions} }
