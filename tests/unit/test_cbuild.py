"""The C-loop builder's logic without a compiler: which compiler, the cache key, and each failure as one line.

The compiler is never run here: where a build is asked for, ``cbuild._run`` is replaced by what gcc would answer.
"""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path, PurePosixPath

import pytest
import tomllib

from fabricbench.transports import cbuild
from fabricbench.transports.cbuild import CLoopUnavailable, Recipe
from fabricbench.transports.mpi import cloop as mpi_cloop
from fabricbench.transports.ofi import cloop as ofi_cloop
from fabricbench.transports.tcp import transport as tcp_transport
from fabricbench.transports.verbs import cloop as verbs_cloop
from support import REPO, executable_stub

HINT = "Debian/Ubuntu: apt-get install libibverbs-dev; RHEL/Fedora: dnf install rdma-core-devel"
GCC_MISSING = (
    "probe.c:1:10: fatal error: infiniband/verbs.h: No such file or directory\n"
    "    1 | #include <infiniband/verbs.h>\n      |          ^~~~~~~~~~~~~~~~~~~~\ncompilation terminated.\n"
)
CLANG_MISSING = "probe.c:1:10: fatal error: 'infiniband/verbs.h' file not found\n#include <infiniband/verbs.h>\n"


@pytest.fixture
def recipe(tmp_path, monkeypatch) -> Recipe:
    """A recipe whose compiler identity is given, so that no --version is asked; its cache under tmp_path."""
    monkeypatch.setenv("FABRICBENCH_CACHE_DIR", str(tmp_path / "cache"))
    source = tmp_path / "probe.c"
    source.write_text("int fb_probe(void) { return 1; }\n")
    return Recipe(
        name="verbsloop",
        source=source,
        compiler=["cc"],
        link_flags=("-libverbs",),
        key_parts=("libibverbs 1.14.44.0 /usr/lib/libibverbs.so.1.14.44.0",),
        missing_hint=HINT,
        identity="cc (Debian 12.2.0-14) 12.2.0",
    )


def _compiler_says(monkeypatch, returncode: int, stderr: str = "") -> list[list[str]]:
    """Replace the compiler with one that answers `returncode` and `stderr`; the commands it was given."""
    commands: list[list[str]] = []

    def run(command, timeout):
        commands.append(list(command))
        return subprocess.CompletedProcess(command, returncode, "", stderr)

    monkeypatch.setattr(cbuild, "_run", run)
    return commands


def test_cc_from_the_environment_wins_and_may_carry_flags(monkeypatch):
    monkeypatch.setenv("CC", "ccache gcc -m64")
    assert cbuild.find_compiler() == ["ccache", "gcc", "-m64"]


def test_cc_then_gcc_then_clang_on_path_then_none(monkeypatch, tmp_path):
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    clang = executable_stub(tmp_path / "bin", "clang")
    assert cbuild.find_compiler() == [str(clang)]
    gcc = executable_stub(tmp_path / "bin", "gcc")
    assert cbuild.find_compiler() == [str(gcc)]
    cc = executable_stub(tmp_path / "bin", "cc")
    assert cbuild.find_compiler() == [str(cc)]
    for path in (cc, gcc, clang):
        path.unlink()
    assert cbuild.find_compiler() is None


def test_the_cache_key_follows_everything_the_build_depends_on(recipe):
    key = cbuild.cache_key(recipe)
    assert cbuild.cache_key(replace(recipe)) == key  # the same recipe: the same build
    changed = [
        replace(recipe, compiler=["gcc"]),
        replace(recipe, identity="cc (Debian 13.1.0) 13.1.0"),
        replace(recipe, link_flags=("-libverbs", "-lmlx5")),
        replace(recipe, compile_flags=("-I/opt/include",)),
        replace(recipe, key_parts=("libibverbs 1.15.0 /usr/lib/libibverbs.so.1.15.0",)),
        replace(recipe, suffix=".cpython-312-x86_64-linux-gnu.so"),
    ]
    keys = {cbuild.cache_key(other) for other in changed}
    assert len(keys) == len(changed) and key not in keys
    recipe.source.write_text("int fb_probe(void) { return 2; }\n")
    assert cbuild.cache_key(recipe) != key


def test_the_cache_key_follows_the_headers_the_source_includes(recipe, tmp_path, monkeypatch):
    """A changed runtime header, or a loop's own header, rebuilds the loop; a system header is the library's part."""
    runtime = tmp_path / "runtime" / "fb_runtime.h"
    runtime.parent.mkdir()
    runtime.write_text("static inline int fb_one(void) { return 1; }\n")
    monkeypatch.setattr(cbuild, "RUNTIME_HEADER", runtime)
    codes = tmp_path / "_probecodes.h"
    codes.write_text("#define OP_ONE 1\n")
    recipe.source.write_text('#include <stdio.h>\n#include "_probecodes.h"\n #  include "fb_runtime.h"\nint f;\n')
    assert cbuild.local_headers(recipe.source) == [codes, runtime]
    key = cbuild.cache_key(recipe)
    runtime.write_text("static inline int fb_one(void) { return 2; }\n")
    after_runtime = cbuild.cache_key(recipe)
    codes.write_text("#define OP_ONE 2\n")
    after_codes = cbuild.cache_key(recipe)
    assert len({key, after_runtime, after_codes}) == 3


def test_every_c_loop_includes_the_runtime_header_and_so_is_keyed_by_it():
    for source in (mpi_cloop.SOURCE, tcp_transport.SOURCE, verbs_cloop.SOURCE, ofi_cloop.SOURCE):
        assert cbuild.RUNTIME_HEADER in cbuild.local_headers(source), source.name
    assert cbuild.local_headers(mpi_cloop.SOURCE) == [mpi_cloop.CODES, cbuild.RUNTIME_HEADER]


def test_an_unreadable_source_is_one_line(recipe):
    recipe.source.unlink()
    with pytest.raises(CLoopUnavailable, match=r"^cannot read .*probe\.c: No such file or directory$"):
        cbuild.cache_key(recipe)


@pytest.mark.parametrize("said", [GCC_MISSING, CLANG_MISSING])
def test_a_missing_header_is_named_in_gccs_and_clangs_words(said):
    assert cbuild.missing_header(said) == "infiniband/verbs.h"


def test_other_failures_name_no_header():
    assert cbuild.missing_header("probe.c:3:1: error: expected ';' before '}' token\n") is None
    assert cbuild.missing_header("/usr/bin/ld: cannot find -libverbs: No such file or directory\n") is None


def test_no_compiler_is_one_line_and_runs_nothing(recipe, monkeypatch):
    commands = _compiler_says(monkeypatch, 0)
    with pytest.raises(CLoopUnavailable) as refused:
        cbuild.load_library(replace(recipe, compiler=None), {})
    assert str(refused.value) == "no C compiler found (install gcc, or set CC)" and not commands


def test_a_missing_header_names_the_header_and_the_hint(recipe, monkeypatch):
    commands = _compiler_says(monkeypatch, 1, GCC_MISSING)
    with pytest.raises(CLoopUnavailable) as refused:
        cbuild.load_library(recipe, {"fb_probe": ([], None)})
    assert str(refused.value) == f"cannot build the verbsloop C loop: infiniband/verbs.h not found ({HINT})"
    [command] = commands  # a failed compile is not tried again
    assert command[:4] == ["cc", "-O2", "-shared", "-fPIC"] and command[-2:] == [str(recipe.source), "-libverbs"]
    assert f"-I{cbuild.RUNTIME_HEADER.parent}" in command  # where every loop finds the runtime header
    assert not list((cbuild.cache_dir("verbsloop")).glob("*.so"))  # nothing half-built is left in the cache


def test_any_other_compile_failure_is_the_compilers_words_on_one_line(recipe, monkeypatch):
    _compiler_says(monkeypatch, 1, "probe.c: In function 'f':\nprobe.c:3:1: error: expected ';'\n" + "x" * 500)
    with pytest.raises(CLoopUnavailable) as refused:
        cbuild.load_library(recipe, {})
    said = str(refused.value)
    assert said.startswith("cc failed: probe.c: In function 'f': probe.c:3:1: error: expected ';' x")
    assert "\n" not in said and said.endswith("...") and len(said) < 300


def test_a_compiler_that_cannot_run_is_one_line_with_the_recipes_fix(recipe, monkeypatch):
    def cannot(command, timeout):
        raise FileNotFoundError(2, "No such file or directory")

    monkeypatch.setattr(cbuild, "_run", cannot)
    with pytest.raises(CLoopUnavailable) as refused:
        cbuild.load_library(replace(recipe, compiler=["/opt/nope/cc"]), {})
    assert str(refused.value) == "cannot run /opt/nope/cc: No such file or directory (set CC to a C compiler)"


def test_a_compiler_that_hangs_is_one_line(recipe, monkeypatch):
    def hangs(command, timeout):
        raise subprocess.TimeoutExpired(command, timeout)

    monkeypatch.setattr(cbuild, "_run", hangs)
    with pytest.raises(CLoopUnavailable, match=rf"^cc did not finish within {cbuild.BUILD_TIMEOUT_S} s$"):
        cbuild.load_library(recipe, {})


def test_the_mpi_loop_raises_the_builders_exception():
    assert mpi_cloop.CLoopUnavailable is CLoopUnavailable


def test_every_c_loop_source_and_header_is_installed_with_the_package():
    """A loop is compiled from its source on first use, so an installed fabricbench needs each ``.c`` file and
    each header it includes."""
    with open(REPO / "pyproject.toml", "rb") as handle:
        patterns = tomllib.load(handle)["tool"]["setuptools"]["package-data"]["fabricbench"]
    package = Path(cbuild.__file__).parents[1]
    files = [*package.rglob("transports/**/*.c"), *package.rglob("transports/**/*.h")]
    assert len(files) >= 8  # four loops, the runtime header, three codes headers
    for path in files:
        assert any(PurePosixPath(path.relative_to(package).as_posix()).match(glob) for glob in patterns), path
