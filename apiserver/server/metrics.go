package server

import (
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
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
