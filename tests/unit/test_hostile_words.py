"""The words of a refusal: a token masked in every spelling a quote gives it, serve's address as --peer writes it,
and the descriptor refusal naming --np only where it was given. No process."""

from __future__ import annotations

import json

import pytest

from fabricbench import argtypes, cli
from fabricbench.argtypes import MASK, TOKEN_VAR, masked_text
from fabricbench.errors import UsageError
from fabricbench.launch import slurm
from fabricbench.launch.launcher import HostLimits, check_ranks, foreign_launch, killed_line, killed_rank


def test_a_token_is_masked_as_repr_and_the_terminal_show_it(monkeypatch):
    monkeypatch.setattr(argtypes, "_secrets", set())
    monkeypatch.setenv(TOKEN_VAR, "t\\ok\ten\x1b")
    shown = repr("t\\ok\ten\x1b")  # 't\\ok\ten\x1b': the backslash doubled, the tab and ESC escaped
    assert masked_text(f"bad message size {shown}: expected a byte count") == (
        f"bad message size '{MASK}': expected a byte count"
    )
    assert masked_text("got 't\\ok\ten\x1b'") == f"got '{MASK}'"  # and as given


def test_a_stray_word_equal_to_the_token_is_masked(monkeypatch, capsys):
    monkeypatch.setattr(argtypes, "_secrets", set())
    monkeypatch.delenv(TOKEN_VAR, raising=False)
    assert cli.main(["serve", "--token", "s3cret", "s3cret"]) == 2
    assert capsys.readouterr().err == f"fabricbench: error: unrecognized arguments: {MASK}\n"


def test_serve_takes_an_ipv6_address_in_brackets():
    parser = cli.build_parser()
    assert parser.parse_args(["serve", "--address", "[::1]"]).address == "::1"
    assert parser.parse_args(["serve", "--address", "::"]).address == "::"


def test_the_descriptor_refusal_names_np_only_where_it_was_given():
    limits = HostLimits(cores=2, files=12, tasks=None)
    with pytest.raises(UsageError, match=r"^--np 2: this host cannot start local ranks \(ulimit -n is 12 "):
        check_ranks(2, limits, False)
    with pytest.raises(UsageError, match=r"^this host cannot start local ranks \(ulimit -n is 12 "):
        check_ranks(2, limits, False, given=False)


MPICH = slurm.Speaks("this MPICH", "PMI-2", "pmi2")
OPEN_MPI = slurm.Speaks("this Open MPI", "PMIx", "pmix")


def test_a_launchers_variables_this_mpi_cannot_be_started_by_are_named():
    said = foreign_launch({"PMIX_RANK": "0"}, MPICH)
    assert said.startswith("PMIX_RANK='0' is set, a PMIx launcher's, but this MPICH speaks PMI-2") and (
        "`unset PMIX_RANK`" in said
    )
    ompi = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}
    assert "`unset OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE`" in foreign_launch(ompi, MPICH)
    # What each MPI's own launcher sets is left alone: hydra's PMI_RANK, Open MPI's mpirun under Open MPI.
    assert foreign_launch({"PMI_RANK": "0", "PMIX_RANK": "0"}, MPICH) is None
    assert foreign_launch({**ompi, "PMIX_RANK": "0", "PMIX_NAMESPACE": "prterun-1"}, OPEN_MPI) is None
    assert foreign_launch({"PMIX_RANK": "0"}, slurm.Speaks("this MPI (X)", "", "")) is None  # unknown: left to try


HYDRA_BANNER = [
    "=" * 83,
    "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
    "=   PID 4360 RUNNING AT vm",
    "=   EXIT CODE: 9",
    "=" * 83,
    "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)",
]


def test_a_rank_killed_by_a_signal_is_named_from_hydras_banner_and_the_runs_metadata(tmp_path):
    assert killed_rank(HYDRA_BANNER) == (4360, 9)
    assert killed_rank(HYDRA_BANNER[:-1]) is None  # an exit code, not a signal: the rank said why itself
    (tmp_path / "metadata.json").write_text(json.dumps({"ranks": [{"pid": 4359}, {"pid": 4360}]}))
    assert killed_line(4360, 9, str(tmp_path)) == (
        "fabricbench: error: rank 1 (pid 4360) was killed by signal 9 (SIGKILL, as the kernel's OOM killer and "
        f"kill -9 end a process); the rows measured before it are kept in {tmp_path}/, marked incomplete"
    )
    (tmp_path / "metadata.json").write_text("{")  # cut short: the pid alone
    assert killed_line(4360, 11, str(tmp_path)).startswith(
        "fabricbench: error: a rank (pid 4360) was killed by signal 11 (SIGSEGV)"
    )
