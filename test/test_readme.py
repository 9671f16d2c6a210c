"""README.md as a user meets it: its set-up commands agree with each other and with pyproject.toml for every torch
their range admits, and each of its snippets runs (on the CPU; those that need a GPU or a package that is missing
are skipped with the reason)."""
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
# The line .ci/run runs (its grep: the first README line that matches): the test command.
CI_PATTERN = re.compile(r"^pip install .*python -m pytest.*$", re.M)

# The triton each torch release requires on Linux, from the Requires-Dist of its PyPI wheel (read with
# `pip install --dry-run --no-deps --report - torch==X`). A torch installed from PyPI comes with that triton, so the
# test command's triton pin must admit every version of it, or running the test command after the demo command
# would swap triton (and pip then torch) underneath the user. A new torch in the range needs its row here.
TORCH_TRITON = {
    "2.11.0": "==3.6.0",
    "2.12.0": "==3.7.0",
    "2.12.1": "==3.7.1",
    "2.13.0": "==3.7.1",
    "2.14.0": "~=3.8.0",
    "2.14.1": "~=3.8.0",
    "2.15.0": "~=3.9.0",
}


def blocks(lang):
    return re.findall(rf"^```{lang}\n(.*?)^```", README, re.S | re.M)


def pip_lines():
    return [line for block in blocks("bash") for line in block.splitlines() if line.startswith("pip install")]


def requirements(line):
    """The requirements that a command line's `pip install` parts name, by project name (files, folders and
    options left out)."""
    reqs = {}
    for part in line.split("&&"):
        words = shlex.split(part)
        if words[:2] != ["pip", "install"]:
            continue
        args = iter(words[2:])
        for w in args:
            if w in ("--index-url", "--extra-index-url", "-i", "-r", "-c"):
                next(args)  # the option's value
            elif not w.startswith("-") and w != ".":
                r = Requirement(w)
                reqs[r.name] = r
    return reqs


def demo_command():
    [line] = [line for line in pip_lines() if line.endswith("python -m torch_sage")]
    return line


def ci_test_command():
    found = CI_PATTERN.findall(README)
    assert len(found) == 1, "CI runs the first README line of this shape: there must be exactly one"
    return found[0]


def cpu_torch_line():
    [line] = [line for line in pip_lines() if "download.pytorch.org/whl/cpu" in line]
    return line


def torch_range():
    return requirements(demo_command())["torch"].specifier


def admitted_minors(spec):
    return sorted({m for m in range(0, 40) if any(Version(f"2.{m}.{p}") in spec for p in range(10))})


def test_setup_commands_are_single_pip_lines_that_ci_finds():
    for line in (demo_command(), ci_test_command()):
        assert line.startswith("pip install ") and "\n" not in line
    assert ci_test_command().endswith("python -m pytest -q test")
    assert "--no-build-isolation -e ." in demo_command() and "--no-build-isolation -e ." in ci_test_command()


def test_every_torch_pin_is_the_same_range_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    [dep] = [Requirement(d) for d in project["dependencies"] if Requirement(d).name == "torch"]
    lines = [demo_command(), ci_test_command(), cpu_torch_line()]
    for line in lines:
        assert requirements(line)["torch"].specifier == dep.specifier, line
    assert dep.specifier == SpecifierSet(">=2.11,<2.16")  # what README's prose and the table below are about


def test_test_command_keeps_what_the_demo_command_installed():
    # Every requirement of command 1 is in command 2 with the same pin, so command 2 run after it changes none.
    first, second = requirements(demo_command()), requirements(ci_test_command())
    for name, req in first.items():
        assert name in second and second[name].specifier == req.specifier, name
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    # --no-build-isolation builds with what is installed: the commands must install what the build requires.
    for r in map(Requirement, build):
        if r.name != "torch":
            assert r.name in first and first[r.name].specifier == r.specifier, r


def test_the_table_covers_every_torch_the_range_admits():
    spec = torch_range()
    table_minors = sorted({Version(v).minor for v in TORCH_TRITON})
    assert admitted_minors(spec) == table_minors, "TORCH_TRITON needs a row for each torch minor of the range"
    assert all(Version(v) in spec for v in TORCH_TRITON)


@pytest.mark.parametrize("torch_version", sorted(TORCH_TRITON, key=Version))
def test_triton_pin_admits_the_triton_of_each_torch(torch_version):
    pin = requirements(ci_test_command())["triton"].specifier
    needed = SpecifierSet(TORCH_TRITON[torch_version])
    # Every triton torch accepts (its first release and later patches) must satisfy the pin, or pip replaces it.
    lowest = next(s.version for s in needed)
    major, minor = Version(lowest).major, Version(lowest).minor
    candidates = [v for v in (lowest, f"{major}.{minor}.{Version(lowest).micro + 1}", f"{major}.{minor}.9")
                  if Version(v) in needed]
    assert candidates
    for v in candidates:
        assert Version(v) in pin, f"torch {torch_version} needs triton{needed}; the pin {pin} refuses {v}"


def test_triton_pin_admits_no_triton_newer_than_the_range_needs():
    # The CPU build of torch brings no triton, so pip picks the newest the pin admits: one that no admitted
    # torch was released with is untested with this code.
    pin = requirements(ci_test_command())["triton"].specifier
    newest = max((Version(next(s.version for s in SpecifierSet(r))) for r in TORCH_TRITON.values()))
    assert Version(f"{newest.major}.{newest.minor + 1}.0") not in pin
    assert Version(f"{newest.major + 1}.0.0") not in pin


def test_cpu_line_installs_the_cpu_build_only():
    line = cpu_torch_line()
    assert line.startswith("pip install ") and "--index-url https://download.pytorch.org/whl/cpu" in line
    assert set(requirements(line)) == {"torch"}


def test_local_links_resolve():
    headings = {}  # images too: a plot README shows must be in the tree
    for target, anchor in re.findall(r"\[[^\]]*\]\(([^)#\s]+)(?:#([^)\s]+))?\)", README):
        if target.startswith("http"):
            continue
        path = ROOT / target
        assert path.exists(), target
        if anchor:
            if target not in headings:
                headings[target] = {github_anchor(h) for h in re.findall(r"^#+ (.*)$", path.read_text(), re.M)}
            assert anchor in headings[target], f"{target}#{anchor}"


def github_anchor(heading):
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


# ---------------------------------------------------------------------------------------------------------------
# The snippets
# ---------------------------------------------------------------------------------------------------------------

def snippet(marker):
    """The README python block that contains marker (exactly one)."""
    found = [b for b in blocks("python") if marker in b]
    assert len(found) == 1, marker
    return found[0]


# Each README python block, by a line that picks it out, and what it needs beyond torch_sage on the CPU.
SNIPPETS = {
    "FluxTransformer2DModel(": "diffusers",
    "UNet2DConditionModel(": "diffusers",
    "activate_flash_attention_impl": "registry",
    "torch.compile(": None,
    "torch.export.export(": None,
    "torch.ops.sage.attention(q, k, v)": None,
}
# Checks run after a snippet, in its process.
AFTER = {
    "FluxTransformer2DModel(": "import diffusers.models.attention_dispatch as ad, sys\n"
                               "assert ad._CAN_USE_SAGE_ATTN and ad.sageattn is sys.modules['sageattention'].sageattn\n",
    "torch.ops.sage.attention(q, k, v)": "assert out.shape == q.shape and lse.shape == (1, 8, 1024)\n",
}


def expected_prints(code):
    """What a snippet's `print(...)  # text` lines say they print."""
    return [line.split("# ", 1)[1].strip() for line in code.splitlines() if line.startswith("print(") and "# " in line]


def run_python(code, tmp_path, **env):
    script = tmp_path / "snippet.py"
    script.write_text(code)
    # The tree under test first on the path, and a working folder outside it, as a user's script would run.
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **env)
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=full_env, capture_output=True, text=True,
                          timeout=600)


def test_every_python_snippet_is_listed():
    for block in blocks("python"):
        assert sum(marker in block for marker in SNIPPETS) == 1, block.splitlines()[:3]


@pytest.mark.parametrize("marker", list(SNIPPETS))
def test_python_snippet_runs(marker, tmp_path):
    need = SNIPPETS[marker]
    if need == "diffusers":
        pytest.importorskip("diffusers", reason="pip install diffusers (the test command installs it)")
    if need == "registry" and not hasattr(torch.nn.attention, "activate_flash_attention_impl"):
        pytest.skip("this torch has no flash-attention impl registry")
    code = snippet(marker)
    # The alias stands in even where a real SageAttention is installed, so that this tests torch_sage.
    res = run_python(code + AFTER.get(marker, ""), tmp_path, TORCH_SAGE_FORCE_ALIAS="1")
    assert res.returncode == 0, res.stderr[-4000:]
    printed = res.stdout.strip().splitlines()
    assert printed == expected_prints(code), res.stdout


def test_comfyui_launcher_line(tmp_path):
    """The README's ComfyUI line, run in a folder with a stand-in main.py (ComfyUI itself is not installed here):
    what ComfyUI's own main.py would see when it imports sageattention."""
    [line] = [line for block in blocks("bash") for line in block.splitlines()
              if "torch_sage.with_sageattention" in line and not line.startswith("#")]
    words = shlex.split(line)
    assert words[:4] == ["python", "-m", "torch_sage.with_sageattention", "main.py"]
    (tmp_path / "main.py").write_text(
        "import sys, torch\n"
        "from sageattention import sageattn\n"
        "import sageattention\n"
        "q = torch.randn(1, 2, 64, 64, dtype=torch.bfloat16)\n"
        "out = sageattn(q, q, q, tensor_layout='HND', is_causal=False, smooth_k=False)\n"
        "print(sageattention.__torch_sage_alias__, sys.argv[1:], tuple(out.shape))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
               TORCH_SAGE_FORCE_ALIAS="1")
    res = subprocess.run([sys.executable] + words[1:], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-4000:]
    assert res.stdout.strip().splitlines()[-1] == "True ['--use-sage-attention'] (1, 2, 64, 64)"


def test_every_bash_line_is_checked():
    # pip lines: the tests above; the ComfyUI line: test_comfyui_launcher_line. Anything else would go unchecked.
    for block in blocks("bash"):
        for line in block.splitlines():
            if line.strip() and not line.startswith("#"):
                assert line.startswith("pip install") or "torch_sage.with_sageattention" in line, line
