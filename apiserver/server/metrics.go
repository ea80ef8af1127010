package server

import (
	"crypto/subtle"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"gpucloud/apiserver/store"
	"gpucloud/internal/authn"
)

type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	placed   prometheus.Counter
	refusals *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, keyCacheLive func() bool) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_http_requests_total", Help: "HTTP requests by route and status.",
		}, []string{"method", "route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "apiserver_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"method", "route"}),
		placed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "apiserver_instances_placed_total", Help: "Instances placed and reserved.",
		}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "apiserver_instance_refusals_total", Help: "Instance creates refused, by reason.",
		}, []string{"reason"}),
	}
	listener := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "apiserver_key_cache_listener_up",
		Help: "1 while the credentials listener is connected and the API key cache serves; 0: every key is looked up.",
	}, func() float64 {
		if keyCacheLive() {
			return 1
		}
		return 0
	})
	reg.MustRegister(m.requests, m.latency, m.placed, m.refusals, listener)
	return m
}

// observe records every request by its route template (not the raw path: ids would explode
// the label space).
func (s *Server) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	route := c.FullPath()
	if route == "" {
		route = "unmatched"
	}
	s.metrics.requests.WithLabelValues(c.Request.Method, route, strconv.Itoa(c.Writer.Status())).Inc()
	s.metrics.latency.WithLabelValues(c.Request.Method, route).Observe(time.Since(start).Seconds())
}

// metricsAccess guards /metrics: it tells every tenant's instance counts, request rates and key
// cache state, so only Prometheus (with Options.MetricsToken as its bearer token, the usual
// `authorization: credentials_file` of a scrape config) and operators (their API key) read it.
func (s *Server) metricsAccess(c *gin.Context) {
	secret, _ := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	if tok := s.opts.MetricsToken; tok != "" && subtle.ConstantTimeCompare([]byte(secret), []byte(tok)) == 1 {
		c.Next()
		return
	}
	if secret != "" && len(secret) <= 256 {
		cred, err := s.store.Authenticate(c.Request.Context(), secret)
		switch {
		case err == nil && cred.Principal.Role == authn.RoleOperator:
			c.Next()
			return
		case err == nil:
			s.fail(c, forbidden("metrics are for operators and the metrics token"))
			return
		case !errors.Is(err, store.ErrNotFound):
			s.fail(c, err)
			return
		}
	}
	c.Header("WWW-Authenticate", `Bearer realm="gpucloud-metrics"`)
	s.fail(c, unauthenticated("metrics need Authorization: Bearer <metrics token or operator API key>"))
}
