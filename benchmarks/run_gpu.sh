#!/usr/bin/env bash
# One device call: build for sm_90, run the GPU tests, compute-sanitizer and the benchmarks; logs go to $OUT.
# Usage (on the GPU machine, repo root): bash benchmarks/run_gpu.sh [pytest -k expression]
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/sage_out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
# Peers carried as wheels (.whl/, ignored by git), e.g. sageattention 1.0.6.
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
fi
t0=$(date +%s)
TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 \
  || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
python3 -m pytest -q -m gpu test ${1:+-k "$1"} -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" | tail -25
compute-sanitizer --tool memcheck --error-exitcode 1 python3 test/gpu_memcheck.py ${SAGE_MEMCHECK_ARGS:-} \
  > "$OUT/memcheck.log" 2>&1; echo "memcheck exit: $?"; tail -4 "$OUT/memcheck.log"
for b in ${SAGE_BENCHES:-bench_prologue}; do
  python3 "benchmarks/$b.py" --out "$OUT" 2>&1 | tee "$OUT/$b.log"
done
