package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"gpucloud/hostd/virt"
)

// domainCollector exports hostd's libvirt domains as they are at scrape time, one series per
// instance: what the host really runs, for comparing with what the apiserver believes (the chaos
// test does; an operator's alert can too). A host holds tens of VMs, so the cardinality is small.
type domainCollector struct {
	hv   *virt.Hypervisor
	desc *prometheus.Desc
	errs prometheus.Counter
}

func newDomainCollector(hv *virt.Hypervisor) *domainCollector {
	return &domainCollector{hv: hv,
		desc: prometheus.NewDesc("hostd_domain", "hostd's libvirt domains now: 1 per instance, labelled with its state.",
			[]string{"instance", "state"}, nil),
		errs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "hostd", Name: "domain_list_errors_total",
			Help: "Scrapes that could not list libvirt's domains."}),
	}
}

func (c *domainCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	c.errs.Describe(ch)
}

func (c *domainCollector) Collect(ch chan<- prometheus.Metric) {
	doms, err := c.hv.List()
	if err != nil {
		c.errs.Inc()
	}
	for _, d := range doms {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 1, d.Meta.InstanceID, string(d.State))
	}
	c.errs.Collect(ch)
}
