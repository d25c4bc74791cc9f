# Sourced by the benchmarks that start nodes: makes the scratch directory
# $work (under ${SCRATCH_PARENT:-$TMPDIR or /tmp}) and, at exit, stops every
# node whose pid was added to node_pids and removes $work.
work=$(mktemp -d "${SCRATCH_PARENT:-${TMPDIR:-/tmp}}/tasksup-bench-XXXXXX")
node_pids=()
stop_scratch_nodes() {
  local p
  for p in "${node_pids[@]}"; do
    kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
  done
  rm -rf "$work"
}
trap stop_scratch_nodes EXIT
