"""OSU Micro-Benchmarks 7.4's MPI programs, as data: every one of the 77 its ``c/mpi`` tree builds, with the option
string a build without accelerators (OSU's CPU build) hands to getopt.

Read from OSU 7.4's source, not copied: ``c/util/osu_util_options.h`` holds the option strings (``OMBOP__<bench>__
<subtype>``); each program's ``main`` sets its ``options.bench`` and ``options.subtype`` (``osu_allgatherv`` is a
``GATHER``, so it takes ``-k``), and ``c/util/osu_util.c``'s ``process_options`` picks the string from them. The
one-sided programs build theirs there: ``+:w:s:hvm:x:i:G:Iz::``, then ``W:`` for a bandwidth test, ``P:`` (the
CPU build's PAPI) and ``cT:`` where the program sets ``show_validation`` (acc, cas and fop latency).

A string that starts with ``+`` stops at the first argument that is not an option (POSIX getopt); one without
(``osu_mbw_mr``'s, ``osu_init``'s) lets GNU getopt take options after other arguments too. A letter followed by
``:`` takes a value (the next argument when not attached); by ``::`` an optional one, taken only when attached
(``-z50,99``). The long names are OSU's ``OMBOP_LONG_OPTIONS_ALL``: getopt_long knows the ones whose letter is in
the string. ``osu_hello`` parses nothing.

Checked one by one in the source: ``osu_allgatherv`` (GATHER), ``osu_igather`` (NBC_GATHER), ``osu_ialltoallw``
(NBC_ALLTOALL), ``osu_ibarrier`` (NBC_BARRIER), the acc/cas/fop latency tests' ``show_validation`` and
``osu_get_acc_latency``'s lack of it, ``osu_bw``, ``osu_mbw_mr``, ``osu_latency_mt`` and the Makefiles' lists of
programs. The other vector, non-blocking and neighbourhood programs take their operation's subtype (as those
checked do); whoever adds a program's shim reads its ``main`` first.

``fabricbench.launch.osu_shims`` refers to this table: a shim exists for a program where its BENCHMARKS has an
entry of the same name.
"""

from __future__ import annotations

from dataclasses import dataclass

OSU_VERSION = "7.4"

# OSU 7.4's OMBOP_LONG_OPTIONS_ALL: long name -> (letter, value kind: "" none, "required", "optional").
LONG_OPTIONS = {
    "help": ("h", ""),
    "version": ("v", ""),
    "full": ("f", ""),
    "message-size": ("m", "required"),
    "window-size": ("W", "required"),
    "num-test-calls": ("t", "required"),
    "iterations": ("i", "required"),
    "warmup": ("x", "required"),
    "array-size": ("a", "required"),
    "sync-option": ("s", "required"),
    "win-options": ("w", "required"),
    "mem-limit": ("M", "required"),
    "accelerator": ("d", "required"),
    "cuda-target": ("r", "required"),
    "print-rate": ("R", "required"),
    "num-pairs": ("p", "required"),
    "vary-window": ("V", "required"),  # as OSU's table has it, though -V itself takes no value
    "validation": ("c", "optional"),
    "buffer-num": ("b", "required"),
    "validation-warmup": ("u", "required"),
    "graph": ("G", "required"),
    "papi": ("P", "required"),
    "ddt": ("D", "required"),
    "nhbr": ("N", "required"),
    "type": ("T", "required"),
    "session": ("I", ""),
    "in-place": ("l", ""),
    "tail-lat": ("z", "optional"),
    "root-rank": ("k", "required"),
}

# OSU 7.4's CPU-build option strings, by the (bench, subtype) that picks them.
_PT2PT_LAT = "+:hvm:x:i:b:c::u:G:D:P:T:Iz::"
_PT2PT_BW = "+:hvm:x:i:t:W:b:c::u:G:D:P:T:Iz::"
_LAT_MT = "+:hvm:x:i:t:c::u:G:D:T:Iz::"
_LAT_MP = "+:hvm:x:i:t:c::u:G:D:P:T:Iz::"
_CONG_BW = "+:hvm:x:i:W:b:G:D:P:T:Iz::"
_MBW_MR = "p:W:R:x:i:m:Vhvb:c::u:G:D:P:T:Iz::"
_ALLTOALL = "+:hvfm:i:x:M:a:c::u:G:D:P:T:Ilz::"  # ALL_GATHER too; GATHER and SCATTER add k:
_BCAST = "+:hvfm:i:x:M:a:c::u:G:D:P:T:Iz::"
_BARRIER = "+:hvfm:i:x:M:a:u:G:P:Iz::"
_ALL_REDUCE = "+:hvfm:i:x:M:a:c::u:G:P:T:Ilz::"  # REDUCE_SCATTER too; REDUCE adds k:
_NBC_BARRIER = "+:hvfm:i:x:M:t:a:G:P:Iz::"
_NBC_ALLTOALL = "+:hvfm:i:x:M:t:a:c::u:G:D:P:T:Ilz::"  # NBC_ALL_GATHER too; NBC_GATHER and NBC_SCATTER add k:
_NBC_BCAST = "+:hvfm:i:x:M:t:a:c::u:G:D:P:T:Iz::"
_NBC_ALL_REDUCE = "+:hvfm:i:x:M:t:a:c::u:G:P:T:Ilz::"  # NBC_REDUCE_SCATTER too; NBC_REDUCE adds k:
_NHBR = "+:hvfm:i:x:M:a:c::u:N:G:D:P:T:Iz::"
_NBC_NHBR = "+:hvfm:i:x:M:t:a:c::u:N:G:D:P:T:Iz::"
# The persistent collectives' own strings: the blocking ones' without k: (root fixed at 0).
_ALLTOALL_P, _BCAST_P, _BARRIER_P, _ALL_REDUCE_P = _ALLTOALL, _BCAST, _BARRIER, _ALL_REDUCE
_ONE_SIDED = "+:w:s:hvm:x:i:G:Iz::"


def _one_sided(bandwidth: bool, validation: bool = False) -> str:
    return _ONE_SIDED + ("W:" if bandwidth else "") + "P:" + ("cT:" if validation else "")


@dataclass(frozen=True)
class Program:
    """One OSU 7.4 MPI program: its name, its family (the folder of c/mpi it is in) and its option string."""

    name: str
    family: str  # pt2pt, blocking, non-blocking, persistent, neighbourhood, one-sided, startup
    optstring: str  # what OSU's CPU build hands to getopt ("" for a program that parses nothing)

    @property
    def letters(self) -> str:
        """The option letters it accepts, in its string's order."""
        return "".join(c for c in self.optstring if c.isalpha())

    def takes(self, letter: str) -> str | None:
        """The value kind of ``letter`` ("" a flag, "required", "optional"), None when it is not an option here."""
        at = self.optstring.find(letter) if letter.isalpha() else -1
        if at < 0:
            return None
        rest = self.optstring[at + 1 : at + 3]
        return "optional" if rest == "::" else "required" if rest[:1] == ":" else ""

    @property
    def permutes(self) -> bool:
        """GNU getopt's default: options are read after other arguments too (a string without a leading +)."""
        return not self.optstring.startswith("+")


def _family(family: str, *entries: tuple[str, str]) -> list[Program]:
    return [Program(name, family, optstring) for name, optstring in entries]


PROGRAMS = {
    p.name: p
    for p in (
        *_family(
            "pt2pt",
            ("osu_latency", _PT2PT_LAT),
            ("osu_latency_mt", _LAT_MT),
            ("osu_latency_mp", _LAT_MP),
            ("osu_bw", _PT2PT_BW),
            ("osu_bibw", _PT2PT_BW),
            ("osu_mbw_mr", _MBW_MR),
            ("osu_multi_lat", _PT2PT_LAT),
            ("osu_latency_persistent", _PT2PT_LAT),
            ("osu_bw_persistent", _PT2PT_BW),
            ("osu_bibw_persistent", _PT2PT_BW),
            ("osu_bw_fan_in", _CONG_BW),
            ("osu_bw_fan_out", _CONG_BW),
        ),
        *_family(
            "blocking",
            ("osu_allgather", _ALLTOALL),
            ("osu_allgatherv", _ALLTOALL + "k:"),  # a GATHER in OSU 7.4's source
            ("osu_allreduce", _ALL_REDUCE),
            ("osu_alltoall", _ALLTOALL),
            ("osu_alltoallv", _ALLTOALL),
            ("osu_alltoallw", _ALLTOALL),
            ("osu_barrier", _BARRIER),
            ("osu_bcast", _BCAST),
            ("osu_gather", _ALLTOALL + "k:"),
            ("osu_gatherv", _ALLTOALL + "k:"),
            ("osu_reduce", _ALL_REDUCE + "k:"),
            ("osu_reduce_scatter", _ALL_REDUCE),
            ("osu_reduce_scatter_block", _ALL_REDUCE),
            ("osu_scatter", _ALLTOALL + "k:"),
            ("osu_scatterv", _ALLTOALL + "k:"),
        ),
        *_family(
            "non-blocking",
            ("osu_iallgather", _NBC_ALLTOALL),
            ("osu_iallgatherv", _NBC_ALLTOALL),
            ("osu_iallreduce", _NBC_ALL_REDUCE),
            ("osu_ialltoall", _NBC_ALLTOALL),
            ("osu_ialltoallv", _NBC_ALLTOALL),
            ("osu_ialltoallw", _NBC_ALLTOALL),
            ("osu_ibarrier", _NBC_BARRIER),
            ("osu_ibcast", _NBC_BCAST),
            ("osu_igather", _NBC_ALLTOALL + "k:"),
            ("osu_igatherv", _NBC_ALLTOALL + "k:"),
            ("osu_ireduce", _NBC_ALL_REDUCE + "k:"),
            ("osu_ireduce_scatter", _NBC_ALL_REDUCE),
            ("osu_ireduce_scatter_block", _NBC_ALL_REDUCE),
            ("osu_iscatter", _NBC_ALLTOALL + "k:"),
            ("osu_iscatterv", _NBC_ALLTOALL + "k:"),
        ),
        *_family(
            "persistent",
            ("osu_allgather_persistent", _ALLTOALL_P),
            ("osu_allgatherv_persistent", _ALLTOALL_P),
            ("osu_allreduce_persistent", _ALL_REDUCE_P),
            ("osu_alltoall_persistent", _ALLTOALL_P),
            ("osu_alltoallv_persistent", _ALLTOALL_P),
            ("osu_alltoallw_persistent", _ALLTOALL_P),
            ("osu_barrier_persistent", _BARRIER_P),
            ("osu_bcast_persistent", _BCAST_P),
            ("osu_gather_persistent", _ALLTOALL_P),
            ("osu_gatherv_persistent", _ALLTOALL_P),
            ("osu_reduce_persistent", _ALL_REDUCE_P),
            ("osu_reduce_scatter_persistent", _ALL_REDUCE_P),
            ("osu_scatter_persistent", _ALLTOALL_P),
            ("osu_scatterv_persistent", _ALLTOALL_P),
        ),
        *_family(
            "neighbourhood",
            ("osu_neighbor_allgather", _NHBR),
            ("osu_neighbor_allgatherv", _NHBR),
            ("osu_neighbor_alltoall", _NHBR),
            ("osu_neighbor_alltoallv", _NHBR),
            ("osu_neighbor_alltoallw", _NHBR),
            ("osu_ineighbor_allgather", _NBC_NHBR),
            ("osu_ineighbor_allgatherv", _NBC_NHBR),
            ("osu_ineighbor_alltoall", _NBC_NHBR),
            ("osu_ineighbor_alltoallv", _NBC_NHBR),
            ("osu_ineighbor_alltoallw", _NBC_NHBR),
        ),
        *_family(
            "one-sided",
            ("osu_acc_latency", _one_sided(False, validation=True)),
            ("osu_cas_latency", _one_sided(False, validation=True)),
            ("osu_fop_latency", _one_sided(False, validation=True)),
            ("osu_get_acc_latency", _one_sided(False)),
            ("osu_get_bw", _one_sided(True)),
            ("osu_get_latency", _one_sided(False)),
            ("osu_put_bibw", _one_sided(True)),
            ("osu_put_bw", _one_sided(True)),
            ("osu_put_latency", _one_sided(False)),
        ),
        *_family("startup", ("osu_init", "I"), ("osu_hello", "")),
    )
}
FAMILY_SIZES = {"pt2pt": 12, "blocking": 15, "non-blocking": 15, "persistent": 14, "neighbourhood": 10}
FAMILY_SIZES |= {"one-sided": 9, "startup": 2}  # 77 in all


def program(name: str) -> Program | None:
    return PROGRAMS.get(name)
