#!/usr/bin/env bash
# One device call: build for sm_90, run the GPU tests, the benchmarks and compute-sanitizer; logs go to $OUT.
# Usage (GPU machine, repo root): bash benchmarks/run_gpu.sh
# A device command may run 10 minutes: the whole suite alone can fill one, so run the tests in one call and the
# benchmarks and sanitizers in the next (made at once, the machine is still warm and the build is reused), e.g.
#   SAGE_BENCHES="" SAGE_SANITIZERS="" bash benchmarks/run_gpu.sh   then   SAGE_TESTS="" bash benchmarks/run_gpu.sh
#   SAGE_TESTS   pytest selection (default: test, the whole suite, as README's test command runs it; "" for none),
#   SAGE_BENCHES (default: bench_prologue bench_attention); SAGE_BENCH_ARGS, more arguments for each, e.g.
#   "--methods sage-auto,sage-triton" (bench_attention: those rows and cuDNN's only; "--tokens 32760,75600": only the
#   rows of those sequence lengths)
#   SAGE_BENCH_PLOT=1: bench_attention also writes its table as bench_attention.json to $OUT and, where matplotlib is
#   installed, the plot of it as bench_attention.png (without it, draw it elsewhere:
#   python benchmarks/bench_attention.py --plot-from bench_attention.json --plot bench_attention.png)
#   SAGE_PROFILES ';'-separated argument lists for tools/profile_one_call.py, each run after the tests (default: none),
#   e.g. "--shape 1,32,8192,128 --causal --mode fp8 --kernels 20; --shape 1,40,1024,128 --kernels 50"
#   SAGE_SANITIZERS compute-sanitizer tools to run over tools/gpu_memcheck.py (default: memcheck; "" for none)
#   SAGE_NCU "kernel regex|tools/profile_one_call.py arguments": the second launch of that kernel under ncu with the
#   SourceCounters (PC sampling), WarpStateStats, SpeedOfLight, ComputeWorkloadAnalysis (pipe utilization),
#   InstructionStats and MemoryWorkloadAnalysis sections, on the tree as given (not an A/B's builds: a call brings
#   back at most 8 files); its page per SASS instruction (stall samples by reason, instructions executed) comes back
#   as ncu_sass.csv, the section summary (L2 and shared-memory throughput among them) as ncu_details.csv, every metric
#   (the pipes' utilization among them) as ncu_raw.csv. E.g.
#   SAGE_NCU="qk_int8_attention_ws_kernel|--shape 1,40,8192,128 --dtype bfloat16"
#   SAGE_STEP_S  per-step time limit in seconds (default 200; the test step: SAGE_TEST_S, default 480)
#   SAGE_CLOCKS=1 samples the card's SM clock, power, temperature and clock event reasons (power cap, thermal) every
#   20 ms while each benchmark runs, into clocks_<benchmark><tag>.csv: what a lone call's time owes to the clocks
#   SAGE_AB_PATCH diffs in the tree (untracked files travel with it), e.g. from `git diff main...branch > ab.patch`:
#   after everything else, each is applied alone, built, measured again (benchmark logs tagged with
#   its name, profiles in the one profiles.txt), reverted
# With pytest-xdist carried in .whl/, SAGE_TESTS="-n 4 test" and the build fit one call (446 s, F27); without it
# the whole suite (~550 s on the H200) and the build do not fit one 600 s call together. SAGE_SUITE_BG=1 runs the
# test step in the background from a copy of the tree (/tmp/sage_suite: the next call re-copies the working tree,
# and a suite running in it sees files vanish, docs/FINDINGS.md F22) and returns; a call made at once after it with
# SAGE_SUITE_WAIT=1 (nothing else runs then) waits for the suite and brings its log back as gpu_tests.log.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/sage_out}
STEP=${SAGE_STEP_S:-200}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/gpu.txt"
# Peers carried as wheels (.whl/, ignored by git), e.g. sageattention 1.0.6.
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
# all-MiniLM-L6-v2 in float16 (.minilm/, ignored; the package's wheel is over the machine's carry limit).
[ -d .minilm ] && export PYTHONPATH=$PWD/.minilm${PYTHONPATH:+:$PYTHONPATH}
if [ -n "${SAGE_SUITE_WAIT-}" ]; then
  for _ in $(seq 1 110); do grep -q "^suite exit" /tmp/sage_suite.log 2>/dev/null && break; sleep 5; done
  cp /tmp/sage_suite.log "$OUT/gpu_tests.log"; grep -E "^(FAILED|ERROR)|passed|failed|^suite exit" "$OUT/gpu_tests.log" | tail -30
  exit 0
fi
# SAGE_SAGE2=1: SageAttention 2.2.0's sm80 / sm89 kernels (.anchors/, from benchmarks/fetch_anchors.sh) built into
# /tmp/sage2 in the background, beside everything else; the benchmarks wait for it and import it (bench_attention's
# sage2-* rows). A warm machine keeps /tmp/sage2: a later call with SAGE_SAGE2=1 reuses it.
if [ -n "${SAGE_SAGE2-}" ] && [ ! -f /tmp/sage2_build.rc ] && [ -z "$(pgrep -f s2src)" ]; then
  rm -rf /tmp/s2src && cp -r .anchors/SageAttention-2.2.0 /tmp/s2src
  setsid bash -c "cd /tmp/s2src && TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=8 EXT_PARALLEL=2 python3 -m pip install \
    --no-build-isolation --no-deps --no-compile --target /tmp/sage2 . > /tmp/sage2_build.log 2>&1; \
    echo \$? > /tmp/sage2_build.rc" < /dev/null > /dev/null 2>&1 &
  echo "SageAttention 2.2.0 build started"
fi
# Builds the tree for sm_90, its log in $1; prints the seconds it took ($2 names the build), or the log's end and stops.
build() {
  local t0; t0=$(date +%s)
  TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=16 python3 -m pip install -v --no-build-isolation --no-deps -e . > "$1" 2>&1 \
    || { tail -40 "$1"; exit 1; }
  echo "build$2: $(( $(date +%s) - t0 )) s"
}
build "$OUT/build.log" ""
if [ -n "${SAGE_SUITE_BG-}" ]; then
  rm -rf /tmp/sage_suite && cp -a . /tmp/sage_suite
  # The subshell's own output redirected too: it waits for the suite, and a pipe it held (run_gpu.sh | tail) would
  # keep the device call from returning (F27).
  (cd /tmp/sage_suite && PYTHONPATH=/tmp/sage_suite${PYTHONPATH:+:$PYTHONPATH} setsid nohup bash -c \
    "python3 -m pytest -q -p no:cacheprovider ${SAGE_TESTS-test}; echo suite exit \$?") > /tmp/sage_suite.log 2>&1 \
    < /dev/null &
  echo "suite started in /tmp/sage_suite; collect it with SAGE_SUITE_WAIT=1"
  exit 0
fi
if [ -n "${SAGE_TESTS-test}" ]; then
  timeout "${SAGE_TEST_S:-480}" python3 -m pytest -q -p no:cacheprovider ${SAGE_TESTS-test} > "$OUT/gpu_tests.log" 2>&1
  echo "tests exit: $?"; grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/gpu_tests.log" | tail -30
fi
grep -E "^torch_sage setup:" "$OUT/build.log"
# The profiles and benchmarks of the tree as built; $1 tags them ("" for the tree as given).
measure() {
  if [ -n "${SAGE_SAGE2-}" ] && [ -n "${SAGE_BENCHES-x}" ]; then
    for _ in $(seq 1 60); do [ -f /tmp/sage2_build.rc ] && break; sleep 5; done
    echo "SageAttention 2.2.0 build: $(cat /tmp/sage2_build.rc 2>/dev/null || echo 'still running')"
    [ "$(cat /tmp/sage2_build.rc 2>/dev/null)" = 0 ] || tail -20 /tmp/sage2_build.log
    export PYTHONPATH=/tmp/sage2${PYTHONPATH:+:$PYTHONPATH}
  fi
  local tag=$1
  IFS=';' read -ra profiles <<< "${SAGE_PROFILES-}"
  for args in "${profiles[@]}"; do
    [ -n "${args// }" ] || continue
    echo "== profile_one_call.py $args $tag" | tee -a "$OUT/profiles.txt"
    timeout "$STEP" python3 tools/profile_one_call.py $args 2>&1 | grep -v -i warn | tee -a "$OUT/profiles.txt"
  done
  for b in ${SAGE_BENCHES-bench_prologue bench_attention}; do
    # An A/B keeps only the logs (a device call brings back at most 8 files).
    local out=$OUT; [ -n "$tag${SAGE_AB_PATCH-}" ] && out=/tmp/sage_bench$tag && mkdir -p "$out"
    local sampler="" fields=timestamp,clocks.sm,power.draw,temperature.gpu reason
    if [ -n "${SAGE_CLOCKS-}" ]; then
      # The reasons' field was renamed (throttle -> event) in newer drivers: whichever this one knows.
      for reason in clocks_event_reasons.active clocks_throttle_reasons.active; do
        nvidia-smi --query-gpu="$reason" --format=csv > /dev/null 2>&1 && { fields+=,$reason; break; }
      done
      nvidia-smi --query-gpu="$fields" --format=csv -lms 20 > "$OUT/clocks_$b$tag.csv" 2>&1 &
      sampler=$!
    fi
    local plot=()
    if [ -n "${SAGE_BENCH_PLOT-}" ] && [ "$b" = bench_attention ]; then
      plot=(--save-json "$OUT/$b$tag.json")
      if python3 -c "import matplotlib" 2> /dev/null; then plot+=(--plot "$OUT/$b$tag.png")
      else echo "matplotlib is not installed here: $b$tag.json only (re-draw it with --plot-from)"; fi
    fi
    timeout "$STEP" python3 "benchmarks/$b.py" --out "$out" ${SAGE_BENCH_ARGS-} ${plot[@]+"${plot[@]}"} > "$OUT/$b$tag.log" 2>&1
    echo "$b$tag exit: $?"; cat "$OUT/$b$tag.log"
    [ -n "$sampler" ] && kill "$sampler"
  done
}
measure ""
# compute-sanitizer tools, one run each (default memcheck; e.g. SAGE_SANITIZERS="memcheck racecheck synccheck").
for tool in ${SAGE_SANITIZERS-memcheck}; do
  timeout "$STEP" compute-sanitizer --tool "$tool" --error-exitcode 1 python3 tools/gpu_memcheck.py --attention --sm90 --mma \
    > "$OUT/$tool.log" 2>&1; echo "$tool exit: $?"; tail -3 "$OUT/$tool.log"
done
if [ -n "${SAGE_NCU-}" ]; then
  IFS='|' read -r ncu_kernel ncu_args <<< "$SAGE_NCU"
  timeout "$STEP" ncu --clock-control none -k "regex:$ncu_kernel" -s 1 -c 1 --section SourceCounters \
    --section WarpStateStats --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats \
    --section MemoryWorkloadAnalysis -f -o /tmp/sage_ncu python3 tools/profile_one_call.py $ncu_args \
    > "$OUT/ncu.log" 2>&1
  echo "ncu exit: $?"; tail -5 "$OUT/ncu.log"
  ncu --import /tmp/sage_ncu.ncu-rep --page source --csv --print-source sass > "$OUT/ncu_sass.csv" 2>&1
  ncu --import /tmp/sage_ncu.ncu-rep --page details --csv > "$OUT/ncu_details.csv" 2>&1
  # Every metric collected, one column each: the pipes' utilization (sm__pipe_*, sm__inst_executed_pipe_*) is here
  # only, not on the details page.
  ncu --import /tmp/sage_ncu.ncu-rep --page raw --csv > "$OUT/ncu_raw.csv" 2>&1
fi
# SAGE_AB_PATCH="a.patch b.patch" (diffs against the tree, e.g. `git diff main...branch`): after all of the above, each
# one alone is applied, built and measured (logs tagged ".a", ".b"), then reverted: an A/B of several changes in one
# call, each side built alone. git apply is all or nothing.
for patch in ${SAGE_AB_PATCH-}; do
  tag=.$(basename "$patch" .patch)
  git apply "$patch" || { echo "$patch did not apply"; exit 1; }
  build "/tmp/build$tag.log" " ($tag)"
  measure "$tag"
  git apply -R "$patch" || { echo "$patch did not revert"; exit 1; }
done
