"""What Kubernetes and Prometheus ask of a pod: liveness, readiness and the metrics exposition."""
