package hostile

import (
	"strconv"
	"strings"
)

// containsMetricAtLeast says whether the Prometheus text has name with a value of at least n.
func containsMetricAtLeast(text, name string, n int) bool {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return err == nil && x >= float64(n)
		}
	}
	return false
}
