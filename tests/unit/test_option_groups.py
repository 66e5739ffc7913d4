"""Option groups and buffer places, without a rank or a GPU: each group is declared once, every transport's groups
resolve, the command line shows each option once, and a buffer place says what the rows and OSU text say."""

from __future__ import annotations

import pytest

from fabricbench import transports
from fabricbench.cli import build_parser
from fabricbench.errors import UsageError
from fabricbench.report import osu
from fabricbench.transports import TRANSPORTS, option_groups, transport_class, transport_groups
from fabricbench.transports.buffer_place import CUDA, CUDA_STAGED, HOST, OSU_DEVICE_BUFFERS, place_of
from fabricbench.transports.gpu.devices import GPU_OPTIONS
from fabricbench.transports.options import LOOP, OptionGroup


def _every_group() -> list[OptionGroup]:
    """Every group a transport or a buffer place names, with the groups they include."""
    found = [group for name in TRANSPORTS for group in transport_groups(transport_class(name))]
    return found + [included for group in found for included in group.includes]


def test_each_group_name_is_declared_by_one_object():
    by_name: dict[str, set[int]] = {}
    for group in _every_group():
        by_name.setdefault(group.name, set()).add(id(group))
    assert all(len(objects) == 1 for objects in by_name.values()), by_name
    # --help's order of their argparse groups
    assert list(option_groups()) == ["mpi", "placement", "rma", "tcp", "verbs", "ofi", "ucx", "gpu"]


@pytest.mark.parametrize("name", list(TRANSPORTS))
def test_every_transports_groups_resolve_to_registered_ones(name):
    registered = option_groups()
    for group in transport_groups(transport_class(name)):
        assert registered[group.name] is group


def test_the_transports_that_share_options_share_a_group():
    groups = {name: [g.name for g in transport_groups(transport_class(name))] for name in TRANSPORTS}
    assert groups["mpi"] == ["mpi", "placement", "gpu"]  # the GPU map of its cuda buffer places
    assert groups["mpi-rma"] == ["mpi", "rma"]  # and its own: OSU's -w and -s
    assert groups["verbs"] == groups["verbs-send"] == groups["perftest"] == groups["perftest-send"] == ["verbs"]
    assert groups["nccl"] == ["gpu", "placement"]  # the collectives' in-place form, as mpi's
    assert groups["cuda-copy"] == ["gpu"]
    assert groups["ofi"] == ["ofi"]
    assert groups["ucx"] == groups["ucx-perftest"] == ["ucx"]
    assert groups["tcp"] == ["tcp"]


@pytest.mark.parametrize("command", ["run", "serve"])
def test_the_command_line_shows_each_option_once(command):
    parser = build_parser().commands[command]
    strings = [option for action in parser._actions for option in action.option_strings]
    assert len(strings) == len(set(strings))
    text = parser.format_help()
    for option in ("--loop", "--gpu-map", "--method", "--tcp-port", "--device"):
        if option in strings:
            assert text.count(f"  {option} ") + text.count(f"  {option}\n") == 1, option


def test_the_loop_choice_is_parsed_once_and_carried_by_the_groups_that_include_it():
    args = build_parser().parse_args(["run", "--loop", "c"])
    options = transports.transport_options(args, "run")
    assert [name for name, group in option_groups().items() if LOOP in group.includes] == ["mpi", "tcp", "verbs"]
    assert options["mpi"]["loop"] == options["tcp"]["loop"] == options["verbs"]["loop"] == "c"
    assert "loop" not in options["gpu"] and "loop" not in options  # a run-wide choice, no settings of its own
    former = transports.transport_options(build_parser().parse_args(["run", "--tcp-loop", "python"]), "run")
    assert former["tcp"]["loop"] == "python"


@pytest.mark.parametrize(("code", "settings"), [(0, {}), (1, {"loop": "c"}), (2, {"loop": "python"}), (3, None)])
def test_the_loop_codes_of_the_hello_sections(code, settings):
    assert LOOP.chosen(code) == settings
    if settings is not None:
        assert LOOP.code(settings) == code


def test_the_handshake_sections_come_from_the_groups_in_step_order():
    sections = transports.handshake_sections(["perftest", "tcp", "verbs-send", "mpi", "nccl"])
    assert list(sections) == ["verbs", "tcp"]  # mpi and gpu add no fields
    assert all(group.handshake_version for group in sections.values())


def test_a_groups_settings_are_read_from_the_plans_options():
    assert GPU_OPTIONS.of({"gpu": {"gpu_map": [1, 0]}}) == {"gpu_map": [1, 0]}
    assert GPU_OPTIONS.of({}) == {}


@pytest.mark.parametrize(
    ("buffer", "staged", "place"),
    [(None, False, HOST), ("host", False, HOST), ("cuda", False, CUDA), ("cuda", True, CUDA_STAGED)],
)
def test_buffer_and_method_name_one_place(buffer, staged, place):
    assert place_of(buffer, staged) is place


@pytest.mark.parametrize("buffer", [None, "host"])
def test_staging_host_buffers_is_refused_in_one_line(buffer):
    with pytest.raises(UsageError, match=r"^--method staged copies GPU buffers through host memory: it needs"):
        place_of(buffer, True)


def test_a_place_says_the_rows_buffer_the_methods_end_and_the_osu_lines():
    assert (HOST.name, CUDA.name, CUDA_STAGED.name) == ("host", "cuda", "cuda")
    assert (CUDA.calls, CUDA_STAGED.calls) == ("CUDA-aware", "staged through pinned host memory")
    assert not HOST.on_gpu and CUDA.on_gpu and CUDA_STAGED.staged and not CUDA.staged
    assert (HOST.osu_device, CUDA.osu_device) == ("", "CUDA")
    assert CUDA.osu_buffer_lines(point_to_point=True) == [OSU_DEVICE_BUFFERS]
    assert CUDA.osu_buffer_lines(point_to_point=False) == HOST.osu_buffer_lines(point_to_point=True) == []
    assert HOST.option_groups == () and CUDA_STAGED.option_groups == (GPU_OPTIONS,)
    HOST.preflight("mpi")  # host memory asks for no GPU


def test_the_transports_declare_where_their_buffers_are():
    cuda = {"mpi": {"buffer": "cuda", "method": "staged"}}
    assert transport_class("mpi").buffer_place(cuda) is CUDA_STAGED
    assert transport_class("mpi").buffer_place({"mpi": {"buffer": "cuda"}}) is CUDA
    assert transport_class("mpi").buffer_place({}) is HOST
    assert transport_class("mpi-rma").buffer_place(cuda) is HOST  # its windows stay in host memory
    assert transport_class("tcp").buffer_place(cuda) is HOST


def test_the_osu_title_follows_the_declared_place_not_the_transport_name():
    on_gpu = osu.Columns(transport_options={"mpi": {"buffer": "cuda", "method": "staged"}})
    assert osu.header("mpi", "bw", 64, 1, on_gpu).splitlines()[1:3] == [
        "# OSU MPI-CUDA Bandwidth Test v7.4",
        OSU_DEVICE_BUFFERS,
    ]
    assert osu.header("tcp", "bw", 64, 1, on_gpu).splitlines()[1] == "# OSU fabricbench tcp Bandwidth Test v7.4"
