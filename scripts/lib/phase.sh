# SPDX-License-Identifier: Apache-2.0
# Timed phases for the build and CI scripts (sourced, not run).
#   phase NAME CMD...   prints "== NAME", runs CMD, then "== NAME: N s"; with TANDEM_PHASE_LOG set, also
#                       appends "N<TAB>NAME" to that file, so .ci/run can print one table for all scripts.
#   phase_table FILE    prints the table of FILE and the total.
#   quiet_build DIR [TARGET...]  cmake --build with one progress line (below).
phase() {
  local name=$1 t0 rc=0
  shift
  echo "== $name"
  t0=$(date +%s)
  "$@" || rc=$?
  local dt=$(($(date +%s) - t0))
  echo "== $name: ${dt} s$([ "$rc" -eq 0 ] || echo " (failed, rc $rc)")"
  if [ -n "${TANDEM_PHASE_LOG:-}" ]; then
    printf '%s\t%s%s\n' "$dt" "$name" "$([ "$rc" -eq 0 ] || echo ' (failed)')" >>"$TANDEM_PHASE_LOG"
  fi
  return "$rc"
}

# quietly CMD...: CMD with its standard output dropped (for a phase whose stdout is noise, e.g. configure).
quietly() { "$@" >/dev/null; }

phase_table() {
  local total=0 secs name
  echo "| seconds | phase |"
  echo "|---:|---|"
  while IFS=$'\t' read -r secs name; do
    printf '| %d | %s |\n' "$secs" "$name"
    total=$((total + secs))
  done <"$1"
  printf '| %d | total (%d min %d s) |\n' "$total" $((total / 60)) $((total % 60))
}

# quiet_build DIR [TARGET...]: cmake --build with one progress line instead of compiler chatter; the full
# log goes to DIR/build.log and its tail is printed if the build fails.
quiet_build() {
  local dir=$1
  shift
  local targets=()
  [ $# -gt 0 ] && targets=(--target "$@")
  local log="$dir/build.log"
  if [ -t 1 ]; then
    NINJA_STATUS="[%f/%t %es] " cmake --build "$dir" -j "$(nproc)" "${targets[@]}" >"$log" 2>&1 &
    local pid=$!
    while kill -0 "$pid" 2>/dev/null; do
      printf '\r\033[Kbuild %s: %s' "$dir" "$(grep -o '^\[[0-9]*/[0-9]* [0-9.]*s\]' "$log" | tail -1)"
      sleep 1
    done
    printf '\r\033[K'
    wait "$pid" || { tail -n 60 "$log"; echo "build failed: full log in $log" >&2; return 1; }
  else
    NINJA_STATUS="[%f/%t %es] " cmake --build "$dir" -j "$(nproc)" "${targets[@]}" >"$log" 2>&1 ||
      { tail -n 60 "$log"; echo "build failed: full log in $log" >&2; return 1; }
  fi
  local warnings
  warnings=$(grep -cE 'warning:|warning #' "$log" || true)  # GCC/Clang, and nvcc's "warning #177-D:"
  echo "build $dir: $(grep -o '^\[[0-9]*/[0-9]*' "$log" | tail -1 | tr -d '[') steps, ${warnings} warning(s) (log: $log)"
  if [ "$warnings" -gt 0 ]; then grep -E 'warning:|warning #' "$log" | sort | uniq -c | head -n 20; fi
}
