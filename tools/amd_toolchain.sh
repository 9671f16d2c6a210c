#!/usr/bin/env bash
# Sets up what compiling csrc/hip for gfx1200/gfx1201 needs besides Debian's clang-19, without an AMD GPU or a ROCm
# install: the HIP headers and device libraries of Debian's ROCm 5.2.3 packages, unpacked into a cache folder, plus
# the gfx12 ISA-version bitcode they lack (made from the gfx1030 one). test/test_amd_compile.py uses it.
#
#   bash tools/amd_toolchain.sh [CACHE]     prints the ROCm root to use as --rocm-path (CACHE/root/usr)
#
# CACHE defaults to $SAGE_AMD_CACHE, else ~/.cache/torch_sage/rocm-5.2.3. Idempotent: a finished cache is reused.
# Needs: apt-get (with package lists: apt-get update), dpkg-deb, llvm-dis-19 and llvm-as-19 (package llvm-19).
# Downloads ~0.65 MB (libamdhip64-dev, rocm-device-libs); root is not needed. Nothing is installed system-wide.
# The compiler itself: apt-get install -y --no-install-recommends clang-19 lld-19 llvm-19 clang-tools-19
set -euo pipefail

CACHE=${1:-${SAGE_AMD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torch_sage/rocm-5.2.3}}
ROOT=$CACHE/root
BC=$ROOT/usr/lib/x86_64-linux-gnu/amdgcn/bitcode

if [ -f "$CACHE/.complete" ]; then
  echo "$ROOT/usr"
  exit 0
fi
for tool in apt-get dpkg-deb llvm-dis-19 llvm-as-19; do
  command -v "$tool" > /dev/null || { echo "amd_toolchain.sh: $tool not found" >&2; exit 2; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download libamdhip64-dev rocm-device-libs > "$work/download.log" 2>&1) || {
  cat "$work/download.log" >&2
  echo "amd_toolchain.sh: apt-get download failed (no network, or no package lists: run apt-get update)" >&2
  exit 3
}
rm -rf "$ROOT"
mkdir -p "$ROOT"
for deb in "$work"/*.deb; do
  dpkg-deb -x "$deb" "$ROOT"
  echo "unpacked $(basename "$deb")" >&2
done
[ -f "$BC/oclc_isa_version_1030.bc" ] || { echo "amd_toolchain.sh: no device libraries in $BC" >&2; exit 4; }
# The ISA-version library is one constant (the gfx version as a number); gfx1200 = 12000, gfx1201 = 12001.
for v in 12000:1200 12001:1201; do
  llvm-dis-19 "$BC/oclc_isa_version_1030.bc" -o - | sed "s/i32 10300/i32 ${v%%:*}/" \
    | llvm-as-19 -o "$BC/oclc_isa_version_${v##*:}.bc"
done
touch "$CACHE/.complete"
echo "$ROOT/usr"
