#!/usr/bin/env bash
# Start the embedded LLM (llama.cpp server) and the gateway with the sample knowledge base.
# Everything stays on 127.0.0.1; Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-.venv/bin/python}
LLM_PORT=${LLM_PORT:-8081}
export GATEWAY_LLM_BASE_URL=${GATEWAY_LLM_BASE_URL:-http://127.0.0.1:${LLM_PORT}/v1}
export GATEWAY_LOAD_SAMPLE_KB=${GATEWAY_LOAD_SAMPLE_KB:-true}
export GATEWAY_PORT=${GATEWAY_PORT:-8000}

PIDS=()
stop() { kill "${PIDS[@]}" 2>/dev/null || true; wait "${PIDS[@]}" 2>/dev/null || true; }
trap stop EXIT
trap 'exit 130' INT TERM
"$PY" -m routes.offline.local_llm serve --port "$LLM_PORT" &
LLM_PID=$!
PIDS+=("$LLM_PID")
for _ in $(seq 1 360); do
  if curl -fsS "http://127.0.0.1:${LLM_PORT}/health" >/dev/null 2>&1; then break; fi
  kill -0 "$LLM_PID" 2>/dev/null || { echo "the LLM server (llama.cpp) failed to start" >&2; exit 1; }
  sleep 0.5
done
echo "LLM server ready on http://127.0.0.1:${LLM_PORT}/v1"
echo "Gateway starting on http://127.0.0.1:${GATEWAY_PORT}  (OpenAPI docs: http://127.0.0.1:${GATEWAY_PORT}/schema/swagger)"
# Both run as background jobs so a TERM to this script (not just Ctrl-C) stops them.
"$PY" -m gateway &
PIDS+=("$!")
wait -n "${PIDS[@]}"
