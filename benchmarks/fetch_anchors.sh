#!/usr/bin/env bash
# Run here (not on the device): copies the peers' sources from ../shared/anchors into .anchors/ (ignored by git), which
# a device call brings along with carry=[".anchors"] (the device receives the working tree only, not ../shared).
# SageAttention 2.2.0's setup.py is patched to build _qattn_sm80, _qattn_sm89 and _fused only: for
# TORCH_CUDA_ARCH_LIST=9.0 it would also build _qattn_sm90, the longest part of a build that must overlap torch_sage's
# own within one device call. run_gpu.sh builds the copy with SAGE_SAGE2=1.
# Usage (repo root): bash benchmarks/fetch_anchors.sh [ANCHORS_DIR, default /work/shared/anchors]
set -euo pipefail
src=${1:-/work/shared/anchors}/SageAttention-2.2.0
dst=.anchors/SageAttention-2.2.0
[ -f setup.py ] && [ -d torch_sage ] || { echo "run from the repository root"; exit 1; }
[ -d "$src" ] || { echo "$src not found"; exit 1; }
# The shared copy is read-only and cp keeps the modes: make the old copy removable and the new one patchable.
if [ -d "$dst" ]; then chmod -R u+w "$dst"; rm -rf "$dst"; fi
mkdir -p .anchors
cp -r "$src" "$dst"
chmod -R u+w "$dst"
python3 - "$dst/setup.py" <<'EOF'
import sys
path = sys.argv[1]
text = open(path).read()
# _qattn_sm90 (sageattn_qk_int8_pv_fp8_cuda_sm90) not built. _qattn_sm89 stays: its condition already includes
# HAS_SM90 (the H100 runs the sm89 instructions), and HAS_SM90 keeps the sm_90a gencode flag.
old = "    if HAS_SM90:\n        ext_modules.append(\n            CUDAExtension(\n                name=\"sageattention._qattn_sm90\","
new = ("    if False:  # torch_sage: _qattn_sm90 not built (benchmarks/fetch_anchors.sh)\n"
       "        ext_modules.append(\n            CUDAExtension(\n                name=\"sageattention._qattn_sm90\",")
if text.count(old) != 1:
    sys.exit(f"{path}: the _qattn_sm90 block was not found once; setup.py changed?")
open(path, "w").write(text.replace(old, new))
EOF
python3 -c "import ast, sys; ast.parse(open(sys.argv[1]).read())" "$dst/setup.py"
echo "$dst: $(du -sh "$dst" | cut -f1), setup.py patched: _qattn_sm80, _qattn_sm89 and _fused, no _qattn_sm90"
