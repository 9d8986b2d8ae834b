# Sourced by scripts/run and scripts/test. Creates .venv when missing and installs, editable and pinned by
# constraints.txt, what the caller asks for: `ensure_extras` with no argument is the core (the main job),
# `ensure_extras dev audio ...` adds those extras. Both commands share .venv, so each installs only what it
# lacks: the stamp (.venv/.installed) holds the hash of pyproject.toml + constraints.txt and the extras in;
# a changed hash reinstalls every extra the stamp named, so the venv never mixes two versions of the project.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
STAMP="$VENV/.installed"
LOG="$VENV/setup.log"
WANT_HASH="$(cat "$ROOT/pyproject.toml" "$ROOT/constraints.txt" | sha256sum | cut -d' ' -f1)"

_stamped_extras() {
  # The extras installed for the current hash (one per line; "core" is the package itself).
  [ -f "$STAMP" ] && [ "$(head -n1 "$STAMP")" = "$WANT_HASH" ] && tail -n +2 "$STAMP" || true
}

ensure_extras() {
  local have missing=() all=() extra
  have="$(_stamped_extras)"
  for extra in core "$@"; do
    grep -qx -- "$extra" <<<"$have" || missing+=("$extra")
  done
  [ -x "$VENV/bin/python" ] && [ "${#missing[@]}" -eq 0 ] && return 0
  if [ ! -x "$VENV/bin/python" ]; then
    echo "[setup] creating $VENV" >&2
    "$PY" -m venv "$VENV"  # its bundled pip (23.2+) does all this needs; upgrading it costs a first run time
  fi
  # What the stamp named before (even for an older hash) stays installed, at the new versions.
  for extra in $( [ -f "$STAMP" ] && tail -n +2 "$STAMP" || true ) "${missing[@]}"; do
    [ "$extra" = core ] || [[ " ${all[*]-} " == *" $extra "* ]] || all+=("$extra")
  done
  local spec="$ROOT"
  [ "${#all[@]}" -gt 0 ] && spec="$ROOT[$(IFS=,; echo "${all[*]}")]"
  local pip=("$VENV/bin/python" -m pip install --disable-pip-version-check -c "$ROOT/constraints.txt" -e "$spec")
  if [[ " ${all[*]-} " == *" local-summarizer "* ]] && ! "$VENV/bin/python" -c \
      "import importlib.util, sys; sys.exit(importlib.util.find_spec('llama_cpp') is None)"; then
    # llama-cpp-python is an sdist: pip compiles llama.cpp, unless its wheel cache has it from an earlier build.
    # Portable flags, or the build can crash with "Illegal instruction" on another CPU.
    echo "[setup] installing ${all[*]}: the local-summarizer extra compiles llama.cpp (about 8 min on 2 cores the" \
         "first time, then pip's cache has the wheel); progress below, full log in $LOG" >&2
    CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" "${pip[@]}" -v >"$LOG" 2>&1 &
    local pid=$!
    # The build's own progress lines ([ 42%] or [17/120]) as they come, while pip runs.
    tail -n +1 -F --pid="$pid" "$LOG" 2>/dev/null \
      | grep --line-buffered -E '^\s*(\[ *[0-9]+%\]|\[[0-9]+/[0-9]+\]) |Building wheel for|Successfully installed' \
      | sed -u -E 's/^ *(.{0,110}).*/[setup]   \1/' >&2 || true
    if ! wait "$pid"; then
      tail -n 40 "$LOG" >&2
      echo "[setup] failed; full log in $LOG" >&2
      return 1
    fi
  else
    echo "[setup] installing into $VENV: core${all[*]+ + ${all[*]}} (pinned by constraints.txt)" >&2
    "${pip[@]}" --quiet >&2
  fi
  { echo "$WANT_HASH"; echo core; printf '%s\n' "${all[@]}"; } >"$STAMP"
  echo "[setup] done" >&2
}

run_installing_extras() {
  # Runs "$@". When it stops for a missing extra (the CLI exits 3 and names `pip install 'voice-agent[NAME]'`
  # on stderr) and that extra is not installed yet, installs it, saying so, and runs the command again.
  local err status extra
  err="$(mktemp)"
  # stderr through tee (a pipeline waits for tee to finish); stdout stays the terminal, for rich's progress bar.
  set +e
  { "$@" 2>&1 1>&3 3>&- | tee "$err" >&2 3>&-; status=${PIPESTATUS[0]}; } 3>&1
  set -e
  extra="$(grep -o "pip install 'voice-agent\[[a-z-]*\]'" "$err" | head -n1 | sed "s/.*\[\(.*\)\].*/\1/" || true)"
  rm -f "$err"
  if [ "$status" -ne 0 ] && [ -n "$extra" ] && ! grep -qx -- "$extra" <<<"$(_stamped_extras)"; then
    echo "[setup] this command needs the $extra extra: installing it, then running the command again" >&2
    ensure_extras "$extra"
    run_installing_extras "$@"  # again: it may need a further extra (installed ones never repeat)
    return
  fi
  return "$status"
}

export PATH="$VENV/bin:$PATH"
cd "$ROOT"
