"""The fleet through Prometheus: the API client (prom), PromQL per engine profile (promql), the
source that builds a Frame per node (source) and what it holds after a poll (state)."""
