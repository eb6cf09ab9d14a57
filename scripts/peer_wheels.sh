# Sourced by the device scripts (bench_gpu.sh, ab_gpu.sh): installs the peers' wheels that
# a carried .whl/ folder holds (quack, Liger-Kernel, FlashInfer and what they need) into
# a target folder the benchmark puts first on PYTHONPATH. The GPU machine has no network.
#   install_peer_wheels <python> <target folder>
# Returns 0 when there were none or all installed, 1 when pip failed (its output on stderr).
install_peer_wheels() {
  local py=$1 target=$2 wheels
  shopt -s nullglob
  wheels=(.whl/*.whl)
  shopt -u nullglob
  [ "${#wheels[@]}" -gt 0 ] || return 0
  echo "=== peer wheels: ${wheels[*]} -> $target"
  # --no-deps: the image's torch and triton stay the ones used; the wheels carry the rest.
  "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$target" \
    "${wheels[@]}" 1>&2
}
