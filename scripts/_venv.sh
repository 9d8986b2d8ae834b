# Sourced by scripts/run and scripts/test: creates or refreshes .venv when missing or stale.
# Stale means pyproject.toml changed since the last install (its hash is stamped in the venv).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
STAMP="$VENV/.pyproject.sha256"
want="$(sha256sum "$ROOT/pyproject.toml" | cut -d' ' -f1)"
have="$(cat "$STAMP" 2>/dev/null || true)"
if [ ! -x "$VENV/bin/python" ] || [ "$want" != "$have" ]; then
  echo "[setup] preparing $VENV (first run or pyproject.toml changed; takes a few minutes)" >&2
  [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
  # local-summarizer compiles llama.cpp once (pip caches the wheel); portable flags, or it can crash with
  # "Illegal instruction" on another CPU.
  CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" \
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -e "$ROOT[dev,audio,local-summarizer]" >&2
  echo "$want" > "$STAMP"
  echo "[setup] done" >&2
fi
export PATH="$VENV/bin:$PATH"
cd "$ROOT"
