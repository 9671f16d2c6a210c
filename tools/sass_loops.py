"""Instruction counts of the loops of a kernel's SASS, to compare two builds of it without a GPU.

python tools/sass_loops.py A.sass[,B.sass...] NAME_PART [--min 100]

Each .sass is `cuobjdump -sass` of one .cu file's cubin (e.g. `nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I csrc
-I csrc/hip -cubin -o ws.cubin csrc/sm90/qk_int8_attention_sm90_ws.cu`). For the first function whose mangled name
starts with NAME_PART after "kernelI" (the template arguments: e.g. Li128ELb1E13__nv_bfloat16Lb0ELb0E is D=128, bf16 V,
bf16 out, not causal, accurate), prints every backward branch's range with at least --min instructions (a loop body,
outer loops enclosing inner ones) and its count of the opcodes that matter to the softmax and the products.
A range is what the loop holds, not what one pass runs: the sm90 key-block loop holds both the masked and the unmasked
softmax, and a block runs one of them (docs/FINDINGS.md F37). "stall" sums the stall counts ptxas writes into each
instruction's control bits (bits 105-108: cycles before the warp may issue its next instruction): the issue cycles
of one warp through the range as the compiler scheduled it, before any wait on a scoreboard or barrier (F38).
"""
import argparse
import collections
import re

# /*address*/ text ; /* first 64-bit word */, then the second word on the next line.
INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s*(.*?);\s*/\* 0x[0-9a-f]+ \*/\s*/\* (0x[0-9a-f]+) \*/")
OPS = ("IGMMA", "HGMMA", "QGMMA", "MUFU", "FMNMX", "VIMNMX3", "I2FP", "FADD", "FFMA", "FMUL", "F2FP", "SYNCS", "BAR")


def functions(path):
    """{name: [(address, text, stall cycles)]}: each instruction's second 64-bit word (the line after it) holds its
    control bits, the stall count at bits 41-44 of that word."""
    out = {}
    for body in re.split(r"\n\s+Function : ", open(path).read())[1:]:
        name = body.split("\n")[0].split("kernelI")[-1]
        out[name] = [(int(m.group(1), 16), m.group(2).strip(), (int(m.group(3), 16) >> 41) & 0xF)
                     for m in INSTRUCTION.finditer(body)]
    return out


def opcode(text):
    return text.split()[1 if text.startswith("@") else 0].split(".")[0]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sass")
    p.add_argument("name_part")
    p.add_argument("--min", type=int, default=100)
    args = p.parse_args()
    for path in args.sass.split(","):
        fns = functions(path)
        name = next(n for n in fns if n.startswith(args.name_part))
        ins = fns[name]
        print(f"{path}: {name[:60]} ({len(ins)} instructions)")
        for addr, text, _ in ins:
            m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", text)
            if m and int(m.group(1), 16) < addr:
                body = [(t, stall) for a, t, stall in ins if int(m.group(1), 16) <= a <= addr]
                if len(body) >= args.min:
                    counts = collections.Counter(opcode(t) for t, _ in body)
                    print(f"  {m.group(1)}..{addr:x}: {len(body)}, stall {sum(s for _, s in body)}",
                          {op: counts[op] for op in OPS if counts[op]})


if __name__ == "__main__":
    main()
