# Sourced by scripts/gpu_check.sh and scripts/sanitize.sh on the GPU machine (no tilelang, no
# internet there): the carried .carry/tlsite.tar.xz (`gpu_check.sh tilelang_tarball`: tilelang
# for the JIT comparison and tile-kernels' torch references for the GPU tests).

# tlsite_env: unpack the tarball into /tmp/site once and put it on this shell's PYTHONPATH;
# returns 1 (changing nothing) where no tarball was carried.
tlsite_env() {
  [ -e .carry/tlsite.tar.xz ] || return 1
  if [ ! -d /tmp/site/tilelang ]; then
    mkdir -p /tmp/site && tar -xJf .carry/tlsite.tar.xz -C /tmp/site --strip-components=1
  fi
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
}
