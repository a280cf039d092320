#!/bin/sh
# Container entrypoint, run under tini: prepare the scratch directories the app writes to (the root
# filesystem is read-only; TMPDIR is an emptyDir in Kubernetes), then exec the command so SIGTERM
# reaches uvicorn directly and it can finish in-flight requests.
set -eu

scratch="${TMPDIR:-/tmp}"
cache="${XDG_CACHE_HOME:-$scratch/.cache}"
if ! mkdir -p "$cache" 2>/dev/null; then
  echo "entrypoint: cannot create $cache: mount a writable volume (emptyDir) at $scratch" >&2
  exit 73
fi

if [ -n "${PROMETHEUS_MULTIPROC_DIR:-}" ]; then
  # An emptyDir outlives a container restart: a previous process's metric files would be summed in.
  if ! mkdir -p "$PROMETHEUS_MULTIPROC_DIR" 2>/dev/null; then
    echo "entrypoint: cannot create PROMETHEUS_MULTIPROC_DIR=$PROMETHEUS_MULTIPROC_DIR" >&2
    exit 73
  fi
  find "$PROMETHEUS_MULTIPROC_DIR" -mindepth 1 -maxdepth 1 -name '*.db' -type f -delete
fi

if [ "$#" -eq 0 ]; then
  set -- python -m gateway
fi
exec "$@"
