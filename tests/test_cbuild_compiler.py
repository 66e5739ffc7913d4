"""The C-loop builder with this host's real compiler: a tiny C source built, cached, called and rebuilt, and a
missing header told in one line. Every build goes to a cache under tmp_path."""

from __future__ import annotations

import ctypes
import subprocess
import sysconfig
from dataclasses import replace
from pathlib import Path

import pytest

from fabricbench.transports import cbuild
from fabricbench.transports.cbuild import CLoopUnavailable, Recipe
from fabricbench.transports.mpi import cloop as mpi_cloop
from fabricbench.transports.ofi import cloop as ofi_cloop
from fabricbench.transports.ucx import cloop as ucx_cloop
from fabricbench.transports.verbs import cloop as verbs_cloop
from support import PYTHON, clean_env

COMPILER = cbuild.find_compiler()
pytestmark = pytest.mark.skipif(COMPILER is None, reason="no C compiler on this host (set CC)")

SIGNATURES = {"fb_add": ([ctypes.c_int, ctypes.c_int], ctypes.c_int)}


@pytest.fixture
def recipe(tmp_path, monkeypatch) -> Recipe:
    monkeypatch.setenv("FABRICBENCH_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "add.c"
    source.write_text("int fb_add(int a, int b) { return a + b; }\n")
    return Recipe(name="addloop", source=source, compiler=COMPILER, key_parts=("test",))


def test_a_c_source_is_built_into_the_cache_called_and_found_again(recipe, tmp_path):
    lib, path = cbuild.load_library(recipe, SIGNATURES)
    assert lib.fb_add(2, 3) == 5 and lib.fb_add.argtypes == [ctypes.c_int, ctypes.c_int]
    assert path.parent == tmp_path / "cache" / "addloop" and path.name.startswith("addloop-")
    built = path.stat().st_mtime_ns
    again, same = cbuild.load_library(recipe, SIGNATURES)
    assert same == path and path.stat().st_mtime_ns == built  # found, not built again
    _, other = cbuild.load_library(replace(recipe, key_parts=("another library",)), SIGNATURES)
    assert other != path and other.is_file()


def test_a_cached_file_that_does_not_load_is_rebuilt_once(recipe):
    path = cbuild.cache_dir("addloop") / f"addloop-{cbuild.cache_key(recipe)[:16]}.so"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a shared library")  # another machine's file, or a torn one
    lib, found = cbuild.load_library(recipe, SIGNATURES)
    assert found == path and lib.fb_add(40, 2) == 42


def test_a_build_without_a_promised_function_is_one_line_and_leaves_no_file(recipe):
    with pytest.raises(CLoopUnavailable) as refused:
        cbuild.load_library(recipe, SIGNATURES | {"fb_missing": ([], ctypes.c_int)})
    said = str(refused.value)
    assert said.startswith(f"the library {Path(COMPILER[0]).name} built does not load:") and "fb_missing" in said
    assert "\n" not in said and not list(cbuild.cache_dir("addloop").glob("addloop-*"))


def test_a_missing_header_is_one_line_with_the_fix(recipe):
    recipe.source.write_text("#include <fabricbench/no_such_header.h>\nint fb_add(int a, int b) { return a + b; }\n")
    hint = "Debian/Ubuntu: apt-get install libfabricbench-dev"
    with pytest.raises(CLoopUnavailable) as refused:
        cbuild.load_library(replace(recipe, missing_hint=hint), SIGNATURES)
    assert str(refused.value) == f"cannot build the addloop C loop: fabricbench/no_such_header.h not found ({hint})"


def test_an_unusable_cache_builds_a_private_copy(recipe, tmp_path, monkeypatch):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("FABRICBENCH_CACHE_DIR", str(blocked))  # the cache folder cannot be made under a file
    lib, path = cbuild.load_library(recipe, SIGNATURES)
    assert lib.fb_add(1, 1) == 2 and path.parent.name.startswith("fabricbench-addloop-")


def test_the_tcp_loop_is_built_as_an_extension_for_this_python(tmp_path):
    """In a child process, so that this one keeps whatever build it has loaded."""
    code = (
        "import sys\n"
        "from fabricbench.transports.tcp import transport as tcp\n"
        "loop = tcp.load_c_loop()\n"
        "assert sys.modules['fabricbench.transports.tcp._tcploop'] is loop.module\n"
        "print(loop.path, callable(loop.module.pingpong), callable(loop.module.window), sep='\\n')\n"
    )
    env = clean_env({"FABRICBENCH_CACHE_DIR": str(tmp_path / "cache")})
    done = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    path, pingpong, window = done.stdout.split()
    assert Path(path).parent == tmp_path / "cache" / "tcploop" and path.endswith(sysconfig.get_config_var("EXT_SUFFIX"))
    assert pingpong == window == "True"


def test_the_runtime_header_is_on_every_builds_include_path(recipe):
    """fb_runtime.h from a source outside its folder: the clock, back-to-back stamps and the error buffer."""
    recipe.source.write_text(
        '#include "fb_runtime.h"\n'
        "int fb_stamps(int64_t *times, int n, char *error, int size)\n"
        "{\n"
        "    int64_t last = fb_now_ns();\n"
        "    for (int i = 0; i < n; i++)\n"
        "        fb_stamp(times, i, &last);\n"
        '    return fb_fail(error, (size_t)size, "%d stamps", n);\n'
        "}\n"
    )
    signature = [ctypes.POINTER(ctypes.c_int64), ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib, _ = cbuild.load_library(recipe, {"fb_stamps": (signature, ctypes.c_int)})
    times, error = (ctypes.c_int64 * 5)(*[-1] * 5), ctypes.create_string_buffer(16)
    assert lib.fb_stamps(times, 5, error, 16) == -1 and error.value == b"5 stamps"
    assert all(0 <= t < 10**9 for t in times)


@pytest.mark.parametrize("loop", [mpi_cloop, verbs_cloop, ofi_cloop, ucx_cloop], ids=["mpi", "verbs", "ofi", "ucx"])
def test_the_codes_python_reads_are_the_numbers_the_compiler_sees(recipe, loop):
    names = list(cbuild._defines(loop.CODES))
    body = "".join(f"    out[{i}] = {name};\n" for i, name in enumerate(names))
    recipe.source.write_text(f'#include "{loop.CODES}"\nvoid fb_codes(long long *out)\n{{\n{body}}}\n')
    lib, _ = cbuild.load_library(recipe, {"fb_codes": ([ctypes.POINTER(ctypes.c_longlong)], None)})
    seen = (ctypes.c_longlong * len(names))()
    lib.fb_codes(seen)
    assert dict(zip(names, seen, strict=True)) == cbuild._defines(loop.CODES)
