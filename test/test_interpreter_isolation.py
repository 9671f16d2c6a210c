"""On a machine with a GPU the Triton-interpreter test files must not run in the main pytest process (setting
TRITON_INTERPRET there switches every Triton kernel of the session to the interpreter): conftest.py collects
each of them as one item that runs the file in a child process. SAGE_INTERPRETER_SUBPROCESS=1 takes that path
on a CPU-only machine, which is how this test sees it."""
import os
import pathlib
import subprocess
import sys

from conftest import INTERPRETER_TEST_FILES

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_interpreter_files_collect_as_one_child_process_item_each():
    env = dict(os.environ, SAGE_INTERPRETER_SUBPROCESS="1")
    files = [str(ROOT / "test" / name) for name in INTERPRETER_TEST_FILES]
    res = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    ids = [line for line in res.stdout.splitlines() if "::" in line]
    assert ids == [f"test/{name}::in_interpreter_process" for name in INTERPRETER_TEST_FILES]
