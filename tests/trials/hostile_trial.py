"""A reproducible hostile trial of fabricbench's input handling: bad command lines, hostile handshakes, silent sockets.

Part 1 (``cli``) runs a corpus of truly bad invocations of every subcommand (run, serve, compare, check, model,
doctor, osu-shims and the ``osu NAME`` command the OSU stand-ins exec; pyproject.toml has no console entry point
besides ``fabricbench``, and there is no plot or report subcommand), built systematically: every numeric option
given each wrong value its type refuses (letters, a negative, zero where not allowed, 400 digits, inf, nan, an
empty string, other scripts' digits, underscores, decimals, hex), every choice an unknown value, malformed sizes
and --peer, abbreviated and unknown options, missing values, conflicting options and bad files (missing, a
directory, empty, binary junk, a cut CSV, a FIFO, /dev/zero, ...). Each case runs as ``python -m fabricbench ...``
with a timeout, in a fresh temporary working directory, and passes when it exits with its expected code (2, bad
input; 3 for the few network failures of ``run --peer``, as the README documents), stderr is exactly one
non-empty line, there is no traceback, no token value is quoted back (in any spelling: as given, as repr quotes
it, as the terminal shows it; one token holds a backslash and a tab), nothing was left in or changed under the
working directory (no results folder) and no process it started is still running. Among them: the token as
serve's --address and as a stray word, an inherited PMIX_RANK or OMPI_COMM_WORLD_* (named in one line, before
MPI_Init), --append through a hard-linked results.csv, and ``ulimit -n 12`` with and without --np.

A case that fabricbench accepted would measure, so none is in the corpus unless its badness is caught before
any rank starts; ``run`` cases get ``-i 5 -x 1 -m 8:8 -k latency`` put first where they do not give their own,
so that one accepted by mistake stays small, and their --peer points at a port nothing listens on. Left out,
as values fabricbench documents no bound for and would run with: 400-digit --inline, --gid-index and --port
(verbs) on run, and --seed on model. The 400-digit serve caps (--max-iterations, --max-warmup, --max-window)
are in: no bound is documented for them either, but a cap past what a client can ever ask (-i and -x stop at
10^9, -W at 65536 on the wire) is a typo; a serve that starts anyway is cut after 15 s and listed.

Part 2 (``handshake``) starts a real ``fabricbench serve --token`` on 127.0.0.1 and sends it K hostile
handshakes of varied kinds, built from the wire format of src/fabricbench/control/rendezvous.py and peer.py
(protocol version 5, written out here; nothing received is unpickled), while two slow drippers on 127.0.0.2 send a
HELLO a byte every 0.5 s; then checks that serve is alive, its RSS before and after (VmRSS) and that a token
holder's ``run --peer`` succeeds. The HELLO's plan (JSON) and transport sections are those a real ``run --peer``
sends, captured from a socket the trial listens on; each absurd HELLO changes one thing in them (window 0,
iterations -5, a NaN or 1e999 timeout, 65 steps, an unknown transport or kernel, a 2 GiB size, escapes in the
run id, a plan nested 16000 deep, a section too many, ...) and is sent once first, serve's answer to each shown:
each must be refused before the CHALLENGE, in words naming its fault. The token kinds (wrong token, none, an
oversized PROOF, a second HELLO, leaving after the CHALLENGE) answer the CHALLENGE a valid HELLO earns.

Part 4 (``streams``): a small run whose stdout fails (``| head -1``, ``> /dev/full``, ``>&-``) or whose stderr is
closed (``2>&-``) keeps every row (metadata complete, one stderr line at most, the README's exit code);
``compare``, ``model``, ``check`` and ``doctor`` to a full stdout write their files and say so in one line, exit
1; ``compare`` and ``model`` of a folder whose metadata.json label and mpi_vendor hold escape sequences and a
newline print no ESC byte and no forged line, and ``compare --out`` of a label with ESC, BEL and a glyph the font
lacks no matplotlib warning; ``serve --address ::1`` and ``[::1]`` listen there or refuse in one line naming
IPv6; and a self-launched run whose rank 1 is killed by SIGKILL says which in one line, exit 137, its rows kept
and marked incomplete.

Part 3 (``silent``) holds N silent sockets open to serve (from 127.0.0.2 and up, four an address, reopening
from a thread each that serve cuts) while M token-holding ``run --peer`` clients run one after another.

Run it from anywhere, with the venv's Python::

    python tests/trials/hostile_trial.py [--part cli|handshake|silent|streams]   # default: all four
    python tests/trials/hostile_trial.py --part cli --list                # the corpus, without running it
    python tests/trials/hostile_trial.py --part cli --only 'peer|sizes'   # cases whose id matches a regex
    python tests/trials/hostile_trial.py --part handshake --handshakes 2000
    python tests/trials/hostile_trial.py --part silent --silent 32 --clients 10

It exits 0 when every part it ran passed, else 1.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import os
import random
import re
import resource
import secrets
import selectors
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "results" / "examples" / "default-sweep"
PYTHON = sys.executable
MARK = "HOSTILE_TRIAL_MARK"  # in every case's environment: a process that outlived its case is found by it
HUGE = "9" * 400
SECRET = "s3cret-trial-value"  # a token value no error line may quote back
ESCAPED_SECRET = "s3cret\\trial\tvalue"  # a token with a backslash and a tab, which a quote shows escaped
# Every spelling of either token an error line may not hold: as given, as repr quotes it, as the terminal shows it.
SPELLINGS = {v for t in (SECRET, ESCAPED_SECRET) for v in (t, repr(t)[1:-1], t.encode("unicode_escape").decode())}
SERVE_WAIT_S = 15.0  # a serve case still running after this long has accepted its options

# --- Part 1: the corpus -----------------------------------------------------------------------------------------


@dataclass
class Case:
    cls: str
    name: str
    argv: list[str]
    expect: int = 2
    env: dict = field(default_factory=dict)
    files: tuple[str, ...] = ()  # fixtures made in the working directory first (FIXTURES)
    timeout: float = 60.0
    why: str = ""  # why this exit code, or why the case counts as bad
    says: str = ""  # a regex the one line must match (case-insensitive), where the words matter
    nofile: int | None = None  # RLIMIT_NOFILE (soft and hard) to run it under: ulimit -n

    @property
    def id(self) -> str:
        return f"{self.cls}: {self.name}"


# Values a type refuses. (label, value); "zero" and "huge" are left out where an option takes them.
WHOLE = [
    ("letters", "abc"),
    ("negative", "-5"),
    ("zero", "0"),
    ("huge", HUGE),
    ("inf", "inf"),
    ("nan", "nan"),
    ("empty", ""),
    ("arabic-indic digit", "\u0663"),
    ("math bold digit", "\U0001d7d6"),
    ("fullwidth digit", "\uff15"),
    ("superscript digit", "\u00b2"),
    ("underscores", "1_000"),
    ("decimal", "2.5"),
    ("hex", "0x10"),
    ("exponent", "1e3"),
]
FEW = ("letters", "negative", "empty", "math bold digit", "decimal")  # for options beside the point of a run
SECONDS = [
    ("letters", "soon"),
    ("negative", "-1"),
    ("zero", "0"),
    ("huge", HUGE),
    ("inf", "inf"),
    ("nan", "nan"),
    ("empty", ""),
    ("math bold digit", "\U0001d7d6"),
    ("fullwidth digit", "\uff15"),
    ("1e20", "1e20"),
    ("over a day", "86401"),
    ("hex", "0x10"),
    ("underscores", "1_0"),
    ("comma decimal", "1,5"),
]
BYTES = [
    ("letters", "lots"),
    ("negative", "-1"),
    ("zero", "0"),
    ("huge", HUGE),
    ("empty", ""),
    ("math bold digit", "\U0001d7d6"),
    ("fullwidth digit", "\uff18"),
    ("unknown unit", "1Q"),
    ("terabytes", "1T"),
    ("decimal", "1.5K"),
    ("inf", "inf"),
    ("nan", "nan"),
]
GUARDS = {  # what a run, serve or osu case gets first, unless it gives the option itself
    "run": [(("-i", "--iterations"), ["-i", "5"]), (("-x", "--warmup"), ["-x", "1"])]
    + [(("-m", "--message-size"), ["-m", "8:8"]), (("-k", "--kernel", "-t", "--transport"), ["-k", "latency"])],
    "serve": [(("--address",), ["--address", "127.0.0.1"]), (("--port",), ["--port", "0"])],
    "osu": [(("-i", "--iterations"), ["-i", "5"]), (("-x", "--warmup"), ["-x", "1"])],
}


def _given(args: list[str], spellings: tuple[str, ...]) -> bool:
    return any(a in spellings or a.split("=")[0] in spellings for a in args)


def guarded(command: str, args: list[str]) -> list[str]:
    first = []
    for spellings, guard in GUARDS.get(command, []):
        if not _given(args, spellings):
            first += guard
    return [*first, *args]


class Corpus:
    def __init__(self) -> None:
        self.cases: list[Case] = []

    def add(self, cls: str, name: str, argv: list[str], **kw) -> None:
        self.cases.append(Case(cls, name, argv, **kw))

    def run(self, cls: str, name: str, *args: str, **kw) -> None:
        self.add(cls, name, ["run", *guarded("run", list(args))], **kw)

    def serve(self, cls: str, name: str, *args: str, **kw) -> None:
        kw.setdefault("timeout", SERVE_WAIT_S)
        self.add(cls, name, ["serve", *guarded("serve", list(args))], **kw)

    def osu(self, cls: str, name: str, bench: str, *args: str, **kw) -> None:
        guards = GUARDS["osu"] + ([] if bench == "osu_barrier" else [(("-m", "--message-size"), ["-m", "8:8"])])
        first = [word for spellings, guard in guards if not _given(list(args), spellings) for word in guard]
        self.add(cls, name, ["osu", bench, *first, *args], **kw)


def _values(table, skip=(), only=None):
    return [(label, value) for label, value in table if label not in skip and (only is None or label in only)]


def build_corpus() -> list[Case]:
    c = Corpus()
    peer = "127.0.0.1:{refused_port}"  # nothing listens: a peer case refused too late fails at connect, exit 3

    # Numbers: every numeric option, each value its type refuses.
    run_whole = [  # (option, what it needs beside it, values left out)
        ("-i", (), ()),
        ("-x", (), ("zero",)),
        ("-W", ("-k", "bw"), ()),
        ("--repeat", (), ()),
        ("--np", (), ()),
        ("--tcp-port", ("-t", "tcp"), ("zero",)),
        ("--cq-mod", (), ()),
        ("--post-list", (), ()),
    ]
    for option, beside, skip in run_whole:
        for label, value in _values(WHOLE, skip):
            c.run("run numbers", f"{option} {label}", *beside, option, value)
    for option, skip in (("--inline", ("zero",)), ("--gid-index", ("zero",)), ("--port", ())):
        for label, value in _values(WHOLE, skip, FEW + ("zero",)):
            c.run("run numbers", f"{option} {label}", option, value)
    for option in ("--max-time", "--timeout"):
        for label, value in SECONDS:
            c.run("run numbers", f"{option} {label}", option, value)
    c.run("run numbers", "--timeout below its 1 s floor", "--timeout", "0.5")
    for label, value in BYTES:
        c.run("run numbers", f"--max-memory {label}", "--max-memory", value)
    for option, over, zero_ok in (("--outlier-z", "101", False), ("--outlier-floor", "1001", True)):
        skip = ("zero",) if zero_ok else ()
        values = [*_values(WHOLE, skip, ("letters", "negative", "zero", "huge", "inf", "nan", "empty"))]
        values += [("math bold digit", "\U0001d7d6"), ("over its range", over), ("exponent", "1e1")]
        for label, value in values:
            c.run("run numbers", f"{option} {label}", "-k", "pairs-bw", option, value)

    serve_whole = [  # (option, values left out, why a huge value counts)
        ("--port", ("zero",)),
        ("--max-iterations", ()),
        ("--max-warmup", ()),
        ("--max-window", ()),
        ("--tcp-port", ("zero",)),
    ]
    cap_why = "no bound is documented; a cap past what any client may ask (10^9, -W 65536) is a typo"
    for option, skip in serve_whole:
        for label, value in _values(WHOLE, skip):
            why = cap_why if label == "huge" and option.startswith("--max-") else ""
            c.serve("serve numbers", f"{option} {label}", option, value, why=why)
    c.serve("serve numbers", "--port 65536", "--port", "65536")
    for option, skip in (("--device-port", ()), ("--gid-index", ("zero",)), ("--inline", ("zero",))):
        for label, value in _values(WHOLE, skip, FEW + ("zero",)):
            c.serve("serve numbers", f"{option} {label}", option, value)
    for option in ("--handshake-timeout", "--max-timeout", "--max-session"):
        for label, value in SECONDS:
            c.serve("serve numbers", f"{option} {label}", option, value)
    for label, value in _values(SECONDS, only=("letters", "zero", "inf", "empty")):
        c.serve("serve numbers", f"--timeout (former name) {label}", "--timeout", value)
    c.serve("serve numbers", "--max-timeout below its 1 s floor", "--max-timeout", "0.5")
    for label, value in BYTES:
        c.serve("serve numbers", f"--max-bytes {label}", "--max-bytes", value)

    for label, value in BYTES:
        c.add("compare", f"--max-input {label}", ["compare", "{example}", "--max-input", value])
    c.add("compare", "--max-input under the table's size", ["compare", "{example}", "--max-input", "10"])
    for label, value in BYTES:
        c.add("model", f"--size {label}", ["model", "{example}", "--size", value])
    for label, value in _values(WHOLE, only=("letters", "negative", "empty", "math bold digit", "decimal", "inf")):
        c.add("model", f"--seed {label}", ["model", "{example}", "--seed", value])

    # Names and lists.
    for label, value in [
        ("empty", ""),
        ("a lone comma", ","),
        ("commas and spaces", " , "),
        ("unknown", "pingpong"),
        ("upper case", "LATENCY"),
        ("one unknown of two", "latency,pingpong"),
        ("semicolon list", "latency;bw"),
        ("zero-width space", "lat\u200bency"),
    ]:
        c.run("run names", f"-k {label}", "-k", value)
    for label, value in [
        ("empty", ""),
        ("a lone comma", ","),
        ("unknown", "carrier-pigeon"),
        ("upper case", "TCP"),
        ("semicolon list", "tcp;mpi"),
        ("zero-width space", "m\u200bpi"),
        ("one unknown of two", "tcp,carrier-pigeon"),
    ]:
        c.run("run names", f"-t {label}", "-t", value, "-k", "latency")
    for label, value in [
        ("empty", ""),
        ("a lone comma", ","),
        ("zero", "0"),
        ("negative", "-2"),
        ("letters", "abc"),
        ("math bold digit", "\U0001d7d6"),
        ("huge", HUGE),
        ("decimal", "2.5"),
        ("one of letters", "2,x"),
    ]:
        c.run("run names", f"--ranks {label}", "-t", "mpi", "-k", "allreduce", "--ranks", value)
    for label, value in [
        ("empty", ""),
        ("letters", "a,b"),
        ("negative", "-1"),
        ("math bold digit", "\U0001d7d6"),
        ("an empty entry", "0,,1"),
        ("past any host", "9999"),
        ("huge", HUGE),
    ]:
        c.run("run names", f"--gpu-map {label}", "--gpu-map", value)
    for label, value in [("not kept", "42"), ("letters", "abc"), ("empty", ""), ("semicolons", "50;90")]:
        c.run("run names", f"--osu-percentiles {label}", "--format", "osu", "--osu-percentiles", value)
    for label, value in [("inf", "inf"), ("nan", "nan")]:
        c.run("run names", f"--osu-percentiles {label}", "--format", "osu", "--osu-percentiles", value)
    c.run("run names", "--osu-datatype unknown", "--format", "osu", "-k", "allreduce", "--osu-datatype", "MPI_DOUBLE")
    c.run("run names", "--osu-datatype empty", "--format", "osu", "-k", "allreduce", "--osu-datatype", "")
    c.run("run names", "--osu-datatype all", "--format", "osu", "-k", "allreduce", "--osu-datatype", "all")
    c.run("run names", "--osu-datatype unknown on latency", "--format", "osu", "--osu-datatype", "MPI_DOUBLE")
    for label, value in [
        ("empty", ""),
        ("a lone comma", ","),
        ("one", "1"),
        ("zero", "0"),
        ("negative", "-2"),
        ("letters", "abc"),
        ("math bold digit", "\U0001d7d6"),
        ("huge", HUGE),
        ("decimal", "2.5"),
        ("past 10^8", "100000001"),
    ]:
        c.add("model", f"--project-ranks {label}", ["model", "{example}", "--project-ranks", value])
    for label, value in [("empty", ""), ("a lone comma", ","), ("unknown", "nosuch"), ("semicolons", "p50;p99")]:
        c.add("compare", f"--metric {label}", ["compare", "{example}", "--metric", value])

    choices = [  # (subcommand, option, a valid value to upper-case, what it needs beside it)
        ("run", "--format", "table", ()),
        ("run", "--loop", "auto", ()),
        ("run", "--tcp-loop", "auto", ("-t", "tcp")),
        ("run", "--method", "blocking", ()),
        ("run", "--buffer", "host", ()),
        ("run", "--hugepages", "on", ()),
        ("run", "--schedule", "shift", ("-k", "pairs-bw")),
        ("run", "--qp-type", "rc", ()),
        ("run", "--spin", "busy", ()),
        ("run", "--dtype", "float32", ()),
        ("run", "--op", "sum", ()),
        ("run", "--gpu-timing", "loop", ()),
        ("serve", "--spin", "busy", ()),
        ("model", "--statistic", "best", ()),
    ]
    for command, option, valid, beside in choices:
        for label, value in (("unknown", "bogus"), ("empty", ""), ("upper case", valid.upper())):
            name = f"{command} {option} {label}"
            if command == "run":
                c.run("choices", name, *beside, option, value)
            elif command == "serve":
                c.serve("choices", name, option, value)
            else:
                c.add("choices", name, ["model", "{example}", option, value])

    # Message sizes.
    for label, value in [
        ("inverted", "8:4"),
        ("unknown unit", "1Q"),
        ("empty", ""),
        ("a lone colon", ":"),
        ("no maximum", "8:"),
        ("negative", "-8"),
        ("negative maximum", "8:-1"),
        ("decimal", "1.5K"),
        ("past 1 GiB", "8G:8G"),
        ("2 GiB", "2G"),
        ("hex", "0x10"),
        ("two colons", "8::16"),
        ("three parts", "4:8:16"),
        ("math bold digit", "\U0001d7d6"),
        ("arabic-indic digit", "\u0668"),
        ("huge", HUGE),
        ("21 digits", "1" * 21),
        ("inf", "inf"),
        ("nan", "nan"),
        ("exponent", "1e3"),
        ("inverted with units", "8K:4"),
        ("terabytes", "1T"),
    ]:
        c.run("sizes", f"-m {label}", "-m", value)
    c.run("sizes", "-k bw -m 0 (no size left)", "-k", "bw", "-m", "0")
    # (-m 0:0 is not in: it asks for 0-byte messages on purpose, a message-rate figure, as the -m 0 refusal says.)

    # Abbreviated options: none is taken, and no value after one is quoted back.
    abbreviations = [
        ("run", ["--tok", SECRET]),
        ("run", [f"--toke={SECRET}"]),
        ("run", ["--ite", "5"]),
        ("run", ["--it", "5"]),
        ("run", ["--warm", "1"]),
        ("run", ["--mess", "8"]),
        ("run", ["--trans", "tcp"]),
        ("run", ["--kern", "latency"]),
        ("run", ["--time", "5"]),
        ("run", ["--max-t", "1"]),
        ("run", ["--pe", peer]),
        ("run", ["--vali"]),
        ("run", ["--rep", "2"]),
        ("run", ["--lab", "x"]),
        ("run", ["--outlier", "3"]),
        ("run", ["--tcp-p", "5000"]),
        ("run", ["--hug", "on"]),
        ("run", ["--form", "none"]),
        ("run", ["--lo", "c"]),
        ("run", ["--max-mem", "1G"]),
        ("run", ["--appe"]),
        ("serve", ["--tok", SECRET]),
        ("serve", ["--max-b", "1M"]),
        ("serve", ["--addr", "127.0.0.1"]),
        ("serve", ["--po", "0"]),
        ("serve", ["--handshake", "5"]),
        ("serve", ["--max-s", "10"]),
        ("compare", ["{example}", "--ou", "d"]),
        ("compare", ["{example}", "--metr", "p50"]),
        ("compare", ["{example}", "--max-in", "1K"]),
        ("model", ["{example}", "--si", "1G"]),
        ("model", ["{example}", "--proj", "8"]),
        ("model", ["{example}", "--stat", "best"]),
        ("model", ["{example}", "--se", "1"]),
        ("doctor", ["--js"]),
        ("top level", ["--versio"]),
    ]
    for command, args in abbreviations:
        name = f"{command} {args[0] if command in ('run', 'serve', 'doctor', 'top level') else args[1]}"
        if command == "run":
            c.run("abbreviations", name, *args)
        elif command == "serve":
            c.serve("abbreviations", name, *args)
        elif command == "top level":
            c.add("abbreviations", name, args)
        else:
            c.add("abbreviations", name, [command, *args])

    # --peer, malformed: exit 2 before anything is resolved or reached.
    for label, value in [
        ("empty", ""),
        ("no port", "hostA"),
        ("port 0", "127.0.0.1:0"),
        ("port 65536", "127.0.0.1:65536"),
        ("no host", ":{refused_port}"),
        ("a 300-character label", "a" * 300 + ":{refused_port}"),
        ("an empty label", "a..b:{refused_port}"),
        ("a name past 253", ".".join(["a" * 60] * 5) + ":{refused_port}"),
        ("fullwidth digits in the host", "\uff11\uff12\uff17.0.0.1:{refused_port}"),
        ("two ports", "127.0.0.1:{refused_port}:1"),
        ("a bare IPv6 address", "::1:{refused_port}"),
        ("no IPv6 in brackets", "[zz]:{refused_port}"),
        ("empty brackets", "[]:{refused_port}"),
        ("brackets without a port", "[::1]"),
        ("an emoji host", "\U0001f642:{refused_port}"),
        ("a space in the host", "a b:{refused_port}"),
        ("IPv4 past 255", "999.1.1.1:{refused_port}"),
        ("a port of letters", "127.0.0.1:http"),
        ("a superscript port", "127.0.0.1:\u00b2"),
        ("a math bold port", "127.0.0.1:\U0001d7d6"),
        ("a negative port", "127.0.0.1:-1"),
        ("a 400-digit port", "127.0.0.1:" + HUGE),
        ("a space before the port", "127.0.0.1: {refused_port}"),
        ("a plus before the port", "127.0.0.1:+{refused_port}"),
        ("a newline after the port", "127.0.0.1:{refused_port}\n"),
        ("a URL", "http://127.0.0.1:{refused_port}"),
        ("a path after the port", "127.0.0.1:{refused_port}/x"),
    ]:
        c.run("peer", f"--peer {label}", "-t", "tcp", "--peer", value)
    for label, args in [
        ("an MPI transport", ["-t", "mpi"]),
        ("tcp and mpi", ["-t", "tcp,mpi"]),
        ("--ranks", ["-t", "tcp", "-k", "allreduce", "--ranks", "2"]),
        ("--schedule shift", ["-t", "tcp", "-k", "pairs-bw", "--schedule", "shift"]),
        ("--per-node", ["-t", "tcp", "-k", "pairs-bw", "--per-node"]),
        ("66 steps", ["-t", "tcp", "-k", "latency,bw", "--repeat", "33"]),
    ]:
        c.run("peer", f"--peer with {label}", "--peer", peer, *args)

    # Tokens.
    c.run("tokens", "run --token empty", "-t", "tcp", "--peer", peer, "--token", "")
    c.run("tokens", "run FABRICBENCH_TOKEN empty", "-t", "tcp", "--peer", peer, env={"FABRICBENCH_TOKEN": ""})
    c.run("tokens", "run --token without --peer", "--token", SECRET)
    c.serve("tokens", "serve --token empty", "--token", "")
    c.serve("tokens", "serve FABRICBENCH_TOKEN empty", env={"FABRICBENCH_TOKEN": ""})

    # Options that cannot go together, and plans refused before any rank starts.
    for label, args, files in [
        ("--append without --out", ["--append"], ()),
        ("--json without an all-pairs kernel", ["--json"], ()),
        ("--osu-full without --format osu", ["-k", "allreduce", "--osu-full"], ()),
        ("--format osu with pairs-bw", ["-k", "pairs-bw", "--format", "osu"], ()),
        ("--method staged without --buffer cuda", ["--method", "staged"], ()),
        ("--ranks above --np", ["-t", "mpi", "-k", "allreduce", "--ranks", "4", "--np", "2"], ()),
        ("--ranks without a collective", ["--ranks", "2"], ()),
        ("--ranks on tcp", ["-t", "tcp", "-k", "allreduce", "--ranks", "2"], ()),
        ("--cq-mod not dividing -W", ["--cq-mod", "3"], ()),
        ("--cq-mod above -W", ["--cq-mod", "128"], ()),
        ("--post-list not dividing -W", ["--post-list", "3"], ()),
        ("--out holding a file", ["--out", "nonempty"], ("nonempty",)),
        ("--out a regular file", ["--out", "afile"], ("afile",)),
        ("--out under /proc", ["--out", "/proc/fabricbench"], ()),
        ("--append to a cut table", ["--append", "--out", "cut-run"], ("cut-run",)),
        ("--append to junk metadata", ["--append", "--out", "junk-meta-run"], ("junk-meta-run",)),
        ("--append to a short table", ["--append", "--out", "short-run"], ("short-run",)),
        ("--np 1 for latency", ["--np", "1"], ()),
        ("--np 3 for msgrate", ["-k", "msgrate", "--np", "3"], ()),
        ("--np 3 for multi-latency", ["-k", "multi-latency", "--np", "3"], ()),
        ("--tcp-port leaving rank 1 none", ["-t", "tcp", "--tcp-port", "65535"], ()),
        ("--tcp-port whose rank 1 port is held", ["-t", "tcp", "--tcp-port", "{held_below}"], ()),
        ("--tcp-address of another host", ["-t", "tcp", "--tcp-address", "8.8.8.8"], ()),
        ("--tcp-address empty", ["-t", "tcp", "--tcp-address", ""], ()),
        ("--tcp-interface missing", ["-t", "tcp", "--tcp-interface", "nonexist0"], ()),
        ("1 GiB with -c over --max-memory", ["-m", "1G:1G", "-c", "--max-memory", "1M"], ()),
        ("4 MiB over --max-memory 4M", ["-m", "4M:4M", "--max-memory", "4M"], ()),
        ("10^8 iterations over --max-memory", ["-i", "100000000", "--max-memory", "1G"], ()),
        ("a 100000 window over --max-memory", ["-k", "bw", "-W", "100000", "--max-memory", "16M"], ()),
        ("--format osu with a cut --osu-datatype", ["--format", "osu", "-t", "tcp", "--osu-datatype", "MPI_"], ()),
    ]:
        c.run("conflicts", label, *args, files=files)

    # Values missing at the end of the command line.
    for option in ["-t", "-k", "-m", "-i", "-x", "-W", "--max-time", "--timeout", "--peer", "--token", "--out"]:
        c.run("missing values", f"run {option}", option)
    for option in ["--label", "--format", "--ranks", "--max-memory", "--tcp-port", "--np", "--loop"]:
        c.run("missing values", f"run {option}", option)
    for option in ["--port", "--address", "--token", "--max-bytes", "--handshake-timeout"]:
        c.serve("missing values", f"serve {option}", option)
    c.run("missing values", "run -i followed by an option", "-i", "-k", "latency")
    c.add("missing values", "compare with no run", ["compare"])
    c.add("missing values", "compare --out with no run", ["compare", "--out", "d"])
    c.add("missing values", "compare --metric", ["compare", "{example}", "--metric"])
    c.add("missing values", "compare --max-input", ["compare", "{example}", "--max-input"])
    c.add("missing values", "model with no run", ["model"])
    for option in ("--size", "--project-ranks", "--seed", "--out"):
        c.add("missing values", f"model {option}", ["model", "{example}", option])
    c.add("missing values", "check with nothing", ["check"])
    c.add("missing values", "check without a run", ["check", "good.toml"], files=("good.toml",))
    c.add("missing values", "check -- with nothing after", ["check", "good.toml", "--"], files=("good.toml",))
    c.add("missing values", "osu-shims without DIR", ["osu-shims"])
    c.add("missing values", "osu without a benchmark", ["osu"])
    c.add("missing values", "no subcommand", [])

    # Unknown options, words and subcommands.
    c.run("unknown", "run --frobnicate", "--frobnicate")
    c.run("unknown", "run -q", "-q")
    c.run("unknown", "run a stray word", "extra")
    c.run("unknown", "run a misspelt --token=VALUE", f"--tokn={SECRET}")
    c.serve("unknown", "serve --bogus", "--bogus")
    c.serve("unknown", "serve a stray word", "extra")
    c.add("unknown", "compare --bogus", ["compare", "{example}", "--bogus"])
    c.add("unknown", "compare -q", ["compare", "{example}", "-q"])
    c.add("unknown", "model --bogus", ["model", "{example}", "--bogus"])
    c.add("unknown", "check --bogus", ["check", "--bogus"])
    c.add("unknown", "check two runs", ["check", "good.toml", "{example}", "{example}"], files=("good.toml",))
    c.add("unknown", "doctor --bogus", ["doctor", "--bogus"])
    c.add("unknown", "doctor a stray word", ["doctor", "extra"])
    c.add("unknown", "doctor --json=yes", ["doctor", "--json=yes"])
    c.add("unknown", "osu-shims two dirs", ["osu-shims", "a", "b"])
    c.add("unknown", "osu-shims --bogus", ["osu-shims", "--bogus", "d"])
    for label, argv in [
        ("runn", ["runn"]),
        ("RUN", ["RUN"]),
        ("an empty subcommand", [""]),
        ("help", ["help"]),
        ("--bogus", ["--bogus"]),
        ("an option before any subcommand", ["-k", "latency"]),
    ]:
        c.add("unknown", f"top level {label}", argv)

    # osu NAME: the command an OSU stand-in execs. Not in it, since the shims read OSU 7.4's command line as OSU's
    # getopt does (osu_shims.py, osu_programs.py): what OSU 7.4 accepts, the shims accept too, so these run and are
    # no bad input: osu_bw -z (OSU prints tail bandwidths), osu_put_latency -w create and -s lock (OSU's window and
    # sync words), osu_allreduce ... X, osu_latency ... H X and ... D (a CPU build of OSU ignores the words after
    # its options) and osu_barrier -m 8 (OSU reads -m on barrier and ignores it).
    for label, bench, args in [
        ("unknown benchmark", "osu_nosuch", []),
        ("-q", "osu_latency", ["-q"]),
        ("--bogus", "osu_latency", ["--bogus"]),
        ("-m inverted", "osu_latency", ["-m", "8:4"]),
        ("-m unknown unit", "osu_latency", ["-m", "1Q"]),
        ("-i negative", "osu_latency", ["-i", "-5"]),
        ("-i letters", "osu_latency", ["-i", "abc"]),
        ("-i math bold digit", "osu_latency", ["-i", "\U0001d7d6"]),
        ("-x huge", "osu_latency", ["-x", HUGE]),
        ("-W zero", "osu_bw", ["-W", "0"]),
        ("-d rocm", "osu_latency", ["-d", "rocm"]),
        ("-d unknown", "osu_latency", ["-d", "gpu"]),
        ("-d cuda without buffers", "osu_latency", ["-d", "cuda"]),
        ("-d cuda H D", "osu_latency", ["-d", "cuda", "H", "D"]),
        ("-d cuda M M", "osu_latency", ["-d", "cuda", "M", "M"]),
        ("-d cuda one-sided", "osu_put_latency", ["-d", "cuda", "D", "D"]),
        ("-T all", "osu_allreduce", ["-T", "all"]),
        ("-T mpi_double", "osu_latency", ["-T", "mpi_double"]),
        ("-z not kept", "osu_latency", ["-z42"]),
        ("-m at the end", "osu_latency", ["-m"]),
        ("--message-size at the end", "osu_latency", ["--message-size"]),
        ("--full=1", "osu_allreduce", ["--full=1"]),
        ("-f on latency", "osu_latency", ["-f"]),
        ("-W on a collective", "osu_allreduce", ["-W", "8"]),
    ]:
        c.osu("osu", f"{bench} {label}", bench, *args)

    for label, args, files in [
        ("under /proc", ["/proc/fabricbench"], ()),
        ("empty", [""], ()),
        ("a regular file", ["afile"], ("afile",)),
        ("a folder with a real OSU binary", ["notshim"], ("notshim",)),
    ]:
        c.add("osu-shims", f"osu-shims {label}", ["osu-shims", *args], files=files)

    # Bad files: each given to compare (beside a good run), model and check.
    bad_tables = [
        ("a missing path", "nope", ()),
        ("an empty folder", "emptydir", ("emptydir",)),
        ("an empty file", "empty.csv", ("empty.csv",)),
        ("binary junk as CSV", "junk.csv", ("junk.csv",)),
        ("binary junk as Parquet", "junk.parquet", ("junk.parquet",)),
        ("a CSV cut mid-row", "cut.csv", ("cut.csv",)),
        ("a run whose CSV is cut", "cut-run", ("cut-run",)),
        ("/dev/zero", "/dev/zero", ()),
        ("a FIFO", "fifo.csv", ("fifo.csv",)),
        ("a run whose results.csv is a folder", "csvdir-run", ("csvdir-run",)),
        ("junk metadata", "junk-meta-run", ("junk-meta-run",)),
        ("metadata nested 100000 deep", "deep-meta-run", ("deep-meta-run",)),
        ("metadata with a lone surrogate", "surrogate-run", ("surrogate-run",)),
        ("metadata of a newer schema", "newer-run", ("newer-run",)),
        ("a fractional size_B", "frac-size-run", ("frac-size-run",)),
        ("a size_B of 1e30", "huge-size-run", ("huge-size-run",)),
        ("inf in a measured column", "inf-run", ("inf-run",)),
        ("NaN in a measured column", "nan-run", ("nan-run",)),
        ("an unknown kernel", "kernel-run", ("kernel-run",)),
        ("a row with an extra field", "fields-run", ("fields-run",)),
        ("fewer rows than the metadata says", "short-run", ("short-run",)),
        ("a byte that is not UTF-8", "latin1-run", ("latin1-run",)),
    ]
    for label, path, files in bad_tables:
        c.add("bad files", f"compare {label}", ["compare", "{example}", path], files=files)
        c.add("bad files", f"model {label}", ["model", path], files=files)
        c.add("bad files", f"check {label}", ["check", "good.toml", path], files=("good.toml", *files))
    c.add("bad files", "compare --out under /proc", ["compare", "{example}", "--out", "/proc/fabricbench"])
    c.add("bad files", "compare --out a regular file", ["compare", "{example}", "--out", "afile"], files=("afile",))
    c.add("bad files", "model --out under /proc", ["model", "{example}", "--out", "/proc/fabricbench"])

    for name in THRESHOLDS:
        if name != "good.toml":
            c.add("thresholds", f"check {name}", ["check", name, "{example}"], files=(name,))
    for label, path, files in [
        ("a missing file", "nope.toml", ()),
        ("a folder", "emptydir", ("emptydir",)),
        ("/dev/zero", "/dev/zero", ()),
        ("a FIFO", "fifo.csv", ("fifo.csv",)),
        ("binary junk", "junk.csv", ("junk.csv",)),
    ]:
        c.add("thresholds", f"check {label} as thresholds", ["check", path, "{example}"], files=files)
    run_args = ["-t", "tcp", "-k", "latency", "-m", "8:8", "-i", "5"]
    c.add(
        "thresholds",
        "check a malformed file before -- run",
        ["check", "syntax.toml", "--", "run", *run_args],
        files=("syntax.toml",),
        why="a malformed thresholds file stops check before the run starts",
    )
    c.add("thresholds", "check a folder named run", ["check", "good.toml", "run"], files=("good.toml",))
    for label, args in [
        ("an unknown kernel", ["-k", "pingpong", "-m", "8:8", "-i", "5"]),
        ("an abbreviated token", ["--tok", SECRET, *run_args]),
        ("a negative -i", [*run_args, "-i", "-5"]),
        ("an inverted -m", [*run_args, "-m", "8:4"]),
    ]:
        c.add(
            "thresholds", f"check -- run with {label}", ["check", "good.toml", "--", "run", *args], files=("good.toml",)
        )

    # Network failures of run --peer: exit 3, one line, and no results folder left.
    net = "a network failure: exit 3 (PeerError), as the README gives a name that does not resolve"
    for label, port, extra in [
        ("nothing listens", "{refused_port}", []),
        ("a server that closes at once", "{closing_port}", []),
        ("a server that answers junk", "{junk_port}", []),
        ("a server that never answers", "{silent_port}", ["--timeout", "1"]),
    ]:
        c.run("network", f"--peer to {label}", "-t", "tcp", "--peer", f"127.0.0.1:{port}", *extra, expect=3, why=net)
    unresolved = ["-t", "tcp", "--peer", "no-such-host.invalid:18600"]
    c.run("network", "--peer to a name that does not resolve", *unresolved, expect=3, why=net)

    # Ranks this host cannot start, and a launch without the descriptors for any: one line before mpiexec.
    c.run("ranks", "--np 100000", "--np", "100000", says="more local ranks than this host can start")
    big = ["--np", "10000000", "--oversubscribe"]
    c.run("ranks", "--np 10^7 oversubscribed", *big, says="more local ranks than this host can start")
    c.run(
        "ranks",
        "ulimit -n 12",
        nofile=12,
        says="^fabricbench: error: this host cannot start local ranks .ulimit -n is 12",
    )
    c.run("ranks", "ulimit -n 12 with --np 2", "--np", "2", nofile=12, says="error: --np 2: this host cannot start")
    c.run("ranks", "--append through a symlinked results.csv", "--append", "--out", "linked-run", files=("linked-run",))
    hard = ["--append", "--out", "hardlinked-run"]
    c.run("ranks", "--append through a hard-linked results.csv", *hard, files=("hardlinked-run",), says="hard link")
    # The token as the value of another option parsed before it, and an inherited launcher environment.
    c.run("secrets", "-m SECRET --token=SECRET", "-t", "tcp", "--peer", peer, "-m", SECRET, f"--token={SECRET}")
    for token in (SECRET, ESCAPED_SECRET):
        kind = "SECRET" if token == SECRET else "a token with \\ and a tab"
        c.run("secrets", f"-m and --token {kind}", "-t", "tcp", "--peer", peer, "-m", token, "--token", token)
        c.serve("secrets", f"--address and --token {kind}", "--address", token, "--token", token, "--port", "1")
        c.serve("secrets", f"a stray word equal to --token {kind}", "--token", token, token)
    inherited = {"PMI_RANK": "7", "PMI_SIZE": "2"}
    c.add("launcher", "an inherited PMI_RANK and PMI_SIZE", ["run", "-k", "latency"], env=inherited, says="PMI_RANK")
    for label, variables in [
        ("an inherited PMIX_RANK", {"PMIX_RANK": "0"}),
        ("inherited OMPI_COMM_WORLD_*", {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "1"}),
    ]:
        said = f"`unset {' '.join(variables)}`"
        c.add("launcher", label, ["run", "-k", "latency", "-m", "8:8", "-i", "5"], env=variables, says=re.escape(said))

    c.serve("serve", "--address empty", "--address", "")
    c.serve("serve", "--address of another host", "--address", "192.0.2.1")
    c.serve("serve", "--port in use", "--port", "{held_port}")
    return c.cases


# --- Part 1: fixtures --------------------------------------------------------------------------------------------


def _rows() -> list[list[str]]:
    with open(EXAMPLE / "results.csv", newline="") as f:
        return list(csv.reader(f))


def _write_rows(path: Path, rows: list[list[str]]) -> None:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    path.write_text(buf.getvalue())


def _run_copy(where: Path, name: str) -> Path:
    run = where / name
    run.mkdir()
    shutil.copy(EXAMPLE / "results.csv", run / "results.csv")
    shutil.copy(EXAMPLE / "metadata.json", run / "metadata.json")
    return run


def _cut(text: str) -> str:
    middle = text.index("\n", len(text) // 2) + 1
    return text[: middle + 17]  # 17 characters into a row


def _edit_cell(where: Path, name: str, column: str, value: str) -> None:
    run = _run_copy(where, name)
    rows = _rows()
    rows[2][rows[0].index(column)] = value  # the second data row ("row 2")
    _write_rows(run / "results.csv", rows)


def _metadata(where: Path, name: str, text: str) -> None:
    (_run_copy(where, name) / "metadata.json").write_text(text)


def _newer(where: Path, name: str) -> None:
    meta = json.loads((EXAMPLE / "metadata.json").read_text())
    meta["schema_version"] = 99
    _metadata(where, name, json.dumps(meta))


def _extra_field(where: Path, name: str) -> None:
    run = _run_copy(where, name)
    rows = _rows()
    rows[2].append("extra")
    _write_rows(run / "results.csv", rows)


def _short(where: Path, name: str) -> None:
    run = _run_copy(where, name)
    _write_rows(run / "results.csv", _rows()[:-10])


def _latin1(where: Path, name: str) -> None:
    run = _run_copy(where, name)
    rows = _rows()
    rows[2][rows[0].index("label")] = "caf\udce9"  # written below as the single byte 0xE9
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    (run / "results.csv").write_bytes(buf.getvalue().encode("utf-8", "surrogateescape"))


def _not_a_shim(where: Path, name: str) -> None:
    (where / name).mkdir()
    (where / name / "osu_latency").write_bytes(b"\x7fELF not a shim")


def _csv_dir(where: Path, name: str) -> None:
    (where / name).mkdir()
    (where / name / "results.csv").mkdir()
    shutil.copy(EXAMPLE / "metadata.json", where / name / "metadata.json")


def _linked(path: Path, outside: Path) -> None:
    """PATH moved to OUTSIDE and a symlink left in its place: --append must not grow OUTSIDE."""
    path.rename(outside)
    path.symlink_to(outside)


def _threshold(body: str) -> str:
    return f'[[threshold]]\ntransport = "mpi"\nkernel = "latency"\n{body}\n'


THRESHOLDS = {
    "good.toml": _threshold("max_lat_p50_us = 1000000"),
    "empty.toml": "",
    "junk.toml": random.Random(7).randbytes(512),
    "latin1.toml": _threshold('name = "caf\xe9"').encode("latin-1"),
    "syntax.toml": "[[threshold]\ntransport = 'mpi'\n",
    "no-table.toml": "x = 1\n",
    "unknown-field.toml": _threshold("min_bw_MBs = 50"),
    "unknown-transport.toml": '[[threshold]]\ntransport = "carrier-pigeon"\nkernel = "latency"\nmax_lat_p50_us = 1\n',
    "unknown-kernel.toml": '[[threshold]]\ntransport = "mpi"\nkernel = "pingpong"\nmax_lat_p50_us = 1\n',
    "inverted-size.toml": _threshold('size = "8:4"\nmax_lat_p50_us = 1'),
    "unit-size.toml": _threshold('size = "1Q"\nmax_lat_p50_us = 1'),
    "string-limit.toml": _threshold('max_lat_p50_us = "fast"'),
    "inf-limit.toml": _threshold("max_lat_p50_us = inf"),
    "nan-limit.toml": _threshold("max_lat_p50_us = nan"),
    "single-table.toml": '[threshold]\ntransport = "mpi"\nkernel = "latency"\nmax_lat_p50_us = 1\n',
    "no-transport.toml": '[[threshold]]\nkernel = "latency"\nmax_lat_p50_us = 1\n',
    "no-kernel.toml": '[[threshold]]\ntransport = "mpi"\nmax_lat_p50_us = 1\n',
    "huge-number.toml": _threshold(f"max_lat_p50_us = {HUGE}"),
    "deep.toml": _threshold("max_lat_p50_us = 1\nx = " + "[" * 100_000 + "]" * 100_000),
    "bad-buffer.toml": _threshold('buffer = "gpu"\nmax_lat_p50_us = 1'),
    "optional-string.toml": _threshold('optional = "yes"\nmax_lat_p50_us = 1'),
    "name-number.toml": _threshold("name = 5\nmax_lat_p50_us = 1"),
}


def _file(content):
    def make(where: Path, name: str) -> None:
        path = where / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())

    return make


FIXTURES = {
    "emptydir": lambda w, n: (w / n).mkdir(),
    "nonempty": lambda w, n: ((w / n).mkdir(), (w / n / "notes.txt").write_text("mine\n")),
    "afile": _file("a regular file\n"),
    "notshim": _not_a_shim,
    "empty.csv": _file(b""),
    "junk.csv": _file(random.Random(1).randbytes(4096)),
    "junk.parquet": _file(b"PAR1" + random.Random(2).randbytes(4096)),
    "cut.csv": lambda w, n: (w / n).write_text(_cut((EXAMPLE / "results.csv").read_text())),
    "cut-run": lambda w, n: (_run_copy(w, n) / "results.csv").write_text(_cut((EXAMPLE / "results.csv").read_text())),
    "fifo.csv": lambda w, n: os.mkfifo(w / n),
    "csvdir-run": _csv_dir,
    "junk-meta-run": lambda w, n: _metadata(w, n, random.Random(3).randbytes(300).decode("latin-1")),
    "deep-meta-run": lambda w, n: _metadata(w, n, "[" * 100_000 + "]" * 100_000),
    "surrogate-run": lambda w, n: _metadata(w, n, '{"label": "\\ud800"}'),
    "newer-run": _newer,
    "frac-size-run": lambda w, n: _edit_cell(w, n, "size_B", "1.5"),
    "huge-size-run": lambda w, n: _edit_cell(w, n, "size_B", "1e30"),
    "inf-run": lambda w, n: _edit_cell(w, n, "lat_p50_us", "inf"),
    "nan-run": lambda w, n: _edit_cell(w, n, "lat_p50_us", "nan"),
    "kernel-run": lambda w, n: _edit_cell(w, n, "kernel", "pingpong"),
    "fields-run": _extra_field,
    "short-run": _short,
    "latin1-run": _latin1,
    "linked-run": lambda w, n: _linked(_run_copy(w, n) / "results.csv", w / "outside.csv"),
    "hardlinked-run": lambda w, n: os.link(_run_copy(w, n) / "results.csv", w / "outside.csv"),
} | {name: _file(text) for name, text in THRESHOLDS.items()}


# --- Part 1: sockets a case may point at -------------------------------------------------------------------------


class Listeners:
    """Loopback ports for the network cases, opened only when a selected case names them."""

    def __init__(self) -> None:
        self.ports: dict[str, int] = {}
        self._socks: list[socket.socket] = []
        self._held: list[socket.socket] = []
        self._stop = threading.Event()

    def _listener(self, behaviour) -> int:
        sock = socket.create_server(("127.0.0.1", 0))
        sock.settimeout(0.2)
        self._socks.append(sock)
        threading.Thread(target=self._loop, args=(sock, behaviour), daemon=True).start()
        return sock.getsockname()[1]

    def _loop(self, sock: socket.socket, behaviour) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = sock.accept()
            except (TimeoutError, OSError):
                continue
            behaviour(conn)

    def _close(self, conn: socket.socket) -> None:
        conn.close()

    def _junk(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            conn.sendall(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        conn.close()

    def _hold(self, conn: socket.socket) -> None:
        self._held.append(conn)  # never answered; closed at the end

    def open(self, names: set[str]) -> dict[str, str]:
        if "refused_port" in names:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                self.ports["refused_port"] = probe.getsockname()[1]
        if "closing_port" in names:
            self.ports["closing_port"] = self._listener(self._close)
        if "junk_port" in names:
            self.ports["junk_port"] = self._listener(self._junk)
        if "silent_port" in names:
            self.ports["silent_port"] = self._listener(self._hold)
        if names & {"held_port", "held_below"}:
            held = self._held_listener()
            self.ports["held_port"] = held
            self.ports["held_below"] = held - 1
        return {name: str(port) for name, port in self.ports.items()}

    def _held_listener(self) -> int:
        """A listening socket, never accepted on, on a port whose lower neighbour is free."""
        while True:
            held = socket.socket()
            held.bind(("0.0.0.0", 0))
            held.listen()
            with socket.socket() as below:
                try:
                    below.bind(("0.0.0.0", held.getsockname()[1] - 1))
                except OSError:
                    held.close()
                    continue
            self._socks.append(held)
            return held.getsockname()[1]

    def close(self) -> None:
        self._stop.set()
        for sock in self._socks + self._held:
            with contextlib.suppress(OSError):
                sock.close()


# --- Part 1: running a case --------------------------------------------------------------------------------------


def clean_env(extra: dict | None = None) -> dict:
    """This environment without a launcher's PMI wire-up or fabricbench's own settings, plus EXTRA."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_", "FABRICBENCH_"))}
    env.update(extra or {})
    return env


def _snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ROOT: files by size and mtime, folders by presence (a probe file come and gone is no trace)."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            is_dir = path.is_dir() and not path.is_symlink()
            found[str(path.relative_to(root))] = ("dir",) if is_dir else ("file", st.st_size, st.st_mtime_ns)
    return found


def _leftover_pids(mark: str) -> list[int]:
    needle = f"{MARK}={mark}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if needle in (proc / "environ").read_bytes().split(b"\0"):
                state = (proc / "stat").read_text().rsplit(")", 1)[-1].split()[0]
                if state not in ("Z", "X"):
                    found.append(int(proc.name))
        except OSError:
            continue
    return found


@dataclass
class Outcome:
    case: Case
    argv: list[str]
    code: int | None
    stderr: str
    seconds: float
    problems: list[str]

    @property
    def ok(self) -> bool:
        return not self.problems


def substitute(argv: list[str], values: dict[str, str]) -> list[str]:
    out = []
    for arg in argv:
        for key, value in values.items():
            arg = arg.replace("{" + key + "}", value)
        out.append(arg)
    return out


def _files_limit(nofile: int):
    """What a case's child runs before exec: ``ulimit -n NOFILE``."""
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))


def run_case(case: Case, values: dict[str, str]) -> Outcome:
    argv = substitute(case.argv, values)
    with tempfile.TemporaryDirectory(prefix="fb-hostile-") as tmp:
        where = Path(tmp)
        for name in case.files:
            FIXTURES[name](where, name)
        before = _snapshot(where)
        mark = uuid.uuid4().hex
        env = clean_env({MARK: mark, "FABRICBENCH_OSU_RESULTS": str(where / "osu-results")} | case.env)
        started = time.monotonic()
        proc = subprocess.Popen(
            [PYTHON, "-m", "fabricbench", *argv],
            cwd=where,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_files_limit(case.nofile) if case.nofile else None,
        )
        problems = []
        try:
            _, err = proc.communicate(timeout=case.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            _, err = proc.communicate()
            problems.append(f"still running after {case.timeout:g} s (accepted?)")
        seconds = time.monotonic() - started
        stderr = err.decode(errors="replace")
        end = time.monotonic() + 10  # a launcher's children may take a moment to be reaped
        while _leftover_pids(mark) and time.monotonic() < end:
            time.sleep(0.1)
        pids = _leftover_pids(mark)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        after = _snapshot(where)
    if not problems and proc.returncode != case.expect:
        problems.append(f"exit {proc.returncode}, expected {case.expect}")
    lines = [line for line in stderr.splitlines() if line.strip()]
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr")
    if "Traceback" in stderr:
        problems.append("a traceback")
    if case.says and not (lines and re.search(case.says, lines[0], re.I)):
        problems.append(f"the line does not say {case.says!r}")
    if any(spelling in stderr for spelling in SPELLINGS):
        problems.append("the token's value quoted back")
    added = sorted({key.split(os.sep)[0] for key in after.keys() - before.keys()})
    changed = sorted(key for key in before if key in after and before[key] != after[key])
    gone = sorted(before.keys() - after.keys())
    if added:
        problems.append(f"left behind: {', '.join(added)}")
    if changed or gone:
        problems.append(f"changed: {', '.join(changed + gone)[:120]}")
    if pids:
        problems.append(f"processes left: {pids}")
    return Outcome(case, argv, proc.returncode, stderr, seconds, problems)


def shown(argv: list[str]) -> str:
    """A command line to read: long arguments shortened, other characters escaped."""
    parts = []
    for arg in argv:
        if len(arg) > 48:
            arg = f"{arg[:16]}...({len(arg)} chars)"
        parts.append(shlex.quote(arg) if arg.isprintable() else repr(arg))
    return "fabricbench " + " ".join(parts)


def part_cli(opts) -> bool:
    cases = build_corpus()
    if opts.only:
        pattern = re.compile(opts.only, re.I)
        cases = [case for case in cases if pattern.search(case.id)]
    ids = Counter(case.id for case in cases)
    assert not [i for i, n in ids.items() if n > 1], [i for i, n in ids.items() if n > 1]
    if opts.list:
        for case in cases:
            note = f"   # {case.why}" if case.why else ""
            print(f"[{case.id}] exit {case.expect}: {shown(case.argv)}{note}")
        for cls, count in Counter(case.cls for case in cases).items():
            print(f"{count:4d}  {cls}")
        print(f"{len(cases)} cases")
        return True
    if not cases:
        print("no case matches --only")
        return False
    names = {m for case in cases for arg in case.argv for m in re.findall(r"\{(\w+)\}", arg)}
    listeners = Listeners()
    values = {"example": str(EXAMPLE)} | listeners.open(names)
    print(f"# part 1: {len(cases)} bad command lines, {opts.jobs} at a time, timeout {opts.timeout:g} s each")
    started = time.monotonic()
    for case in cases:
        case.timeout = min(case.timeout, opts.timeout)
    try:
        with ThreadPoolExecutor(max_workers=opts.jobs) as pool:
            outcomes = []
            for outcome in pool.map(lambda case: run_case(case, values), cases):
                outcomes.append(outcome)
                if opts.verbose or not outcome.ok:
                    mark = "ok  " if outcome.ok else "FAIL"
                    print(f"{mark} [{outcome.case.id}] {outcome.seconds:.1f} s", flush=True)
    finally:
        listeners.close()
    by_class: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        by_class.setdefault(outcome.case.cls, []).append(outcome)
    print(f"\n{'class':<16} {'cases':>5} {'pass':>5} {'fail':>5}")
    for cls, found in by_class.items():
        passed = sum(o.ok for o in found)
        print(f"{cls:<16} {len(found):>5} {passed:>5} {len(found) - passed:>5}")
    passed = sum(o.ok for o in outcomes)
    exit3 = sum(o.case.expect == 3 for o in outcomes)
    took = time.monotonic() - started
    print(f"{'total':<16} {len(outcomes):>5} {passed:>5} {len(outcomes) - passed:>5}   ({took:.0f} s)")
    failures = [o for o in outcomes if not o.ok]
    if failures:
        print("\nfailures:")
        for o in failures:
            first = " | ".join(line for line in o.stderr.splitlines() if line.strip())[:200]
            print(f"- [{o.case.id}] {'; '.join(o.problems)}")
            print(f"    $ {shown(o.argv)}")
            print(f"    stderr: {first!r}")
            if "Traceback" in o.stderr:
                print(f"    its last line: {o.stderr.strip().splitlines()[-1][:200]!r}")
            if o.case.why:
                print(f"    note: {o.case.why}")
    line = f"{passed} of {len(outcomes)} bad command lines: one line, exit 2, nothing left behind"
    if exit3:
        line += f" (exit 3 for the {exit3} network failures)"
    print("\n" + line)
    SUMMARY.append(line)
    return not failures


# --- Part 2 and 3: a real serve -----------------------------------------------------------------------------------

# The rendezvous wire format, version 5 (src/fabricbench/control/rendezvous.py, launch/peer.py): a 12-byte header,
# magic, version, message type, payload length (network order), then fields: a text is a u16 length and UTF-8, a
# blob a u32 length and its bytes. A HELLO is the client's version (text), a hugepages code (u8), the plan as JSON
# (blob, at most 32 KiB), then a u16 count of transport sections, each a key (text), that transport's field version
# (u16) and its fields (blob). Serve answers a HELLO it takes with a CHALLENGE (a blob: a fresh nonce), the client
# with a PROOF (a blob: the HMAC-SHA256 of nonce and HELLO payload under the token, or nothing). Written here, not
# imported: this is what any stranger could send. The plan and sections are those a real ``run --peer`` sends
# (capture_hello), which a stranger can read off the wire as well, changed here as a stranger would.
MAGIC = b"FBRV"
VERSION = 5
HEADER = struct.Struct("!4sHHI")
ERROR, HELLO, ACCEPT, CHALLENGE, PROOF = 1, 2, 3, 4, 5
MAX_PAYLOAD = 64 * 1024
MAX_PLAN = 32 * 1024
REPLY_TIMEOUT_S = 15.0  # longer than serve's 10 s handshake deadline: serve's own answer comes first
# The token holder's run: its HELLO is the one captured, and it runs against serve at the end of parts 2 and 3.
LEGIT_ARGV = ["-t", "tcp", "-k", "latency", "-m", "8:8", "-i", "20", "-x", "2"]


def _text(value) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return struct.pack("!H", len(data)) + data


def _blob(data: bytes) -> bytes:
    return struct.pack("!I", len(data)) + data


def frame(kind: int, payload: bytes, version: int = VERSION, magic: bytes = MAGIC, length: int | None = None) -> bytes:
    return HEADER.pack(magic, version, kind, len(payload) if length is None else length) + payload


class Wire:
    """Reads a payload's fields back, as the format above says (a short payload is a ValueError)."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError(f"payload cut at byte {len(self.data)}, needed {self.pos + n}")
        self.pos += n
        return self.data[self.pos - n : self.pos]

    def number(self, fmt: str) -> int:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def text(self) -> bytes:
        return self.take(self.number("!H"))

    def blob(self) -> bytes:
        return self.take(self.number("!I"))


@dataclass
class CapturedHello:
    client: bytes
    hugepages: int
    plan: dict
    sections: list  # (key, version, fields)


_CAPTURED: list[CapturedHello] = []


def capture_hello() -> CapturedHello:
    """The HELLO a real ``fabricbench run --peer`` sends (LEGIT_ARGV) to a socket of ours that then closes it."""
    if _CAPTURED:
        return _CAPTURED[0]
    with socket.create_server(("127.0.0.1", 0)) as listener, tempfile.TemporaryDirectory() as tmp:
        listener.settimeout(60)
        argv = [PYTHON, "-m", "fabricbench", "run", "--peer", f"127.0.0.1:{listener.getsockname()[1]}", *LEGIT_ARGV]
        client = subprocess.Popen(
            argv, cwd=tmp, env=clean_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            conn, _ = listener.accept()
            with conn:
                conn.settimeout(60)
                magic, version, kind, length = HEADER.unpack(_recv_exact(conn, HEADER.size) or bytes(HEADER.size))
                payload = _recv_exact(conn, length) or b""
        finally:
            try:
                client.wait(timeout=30)
            except subprocess.TimeoutExpired:
                client.kill()
                client.wait()
    if (magic, version, kind) != (MAGIC, VERSION, HELLO):
        raise SystemExit(f"run --peer sent no version {VERSION} HELLO: {magic!r}, version {version}, type {kind}")
    wire = Wire(payload)
    client_version, hugepages, plan = wire.text(), wire.number("!B"), json.loads(wire.blob())
    sections = [(wire.text().decode(), wire.number("!H"), wire.blob()) for _ in range(wire.number("!H"))]
    if wire.pos != len(payload):
        raise SystemExit(f"run --peer's HELLO has {len(payload) - wire.pos} bytes past its sections")
    plan["run_id"] = "hostile-trial"
    _CAPTURED.append(CapturedHello(client_version, hugepages, plan, sections))
    return _CAPTURED[0]


@dataclass(frozen=True)
class Raw:
    """JSON text put into the plan as it is, where Python's json would write it otherwise (1e999, not Infinity)."""

    text: str


def plan_json(plan: dict) -> bytes:
    text = json.dumps(plan, default=lambda raw: f"\x00{raw.text}\x00")  # each Raw, marked, then put in as it is
    return re.sub(r'"\\u0000(.*?)\\u0000"', lambda m: m.group(1), text).encode()


def hello_payload(
    plan: dict | None = None,  # changes to the captured plan's fields (an object's members to its own)
    step: dict | None = None,  # changes to its one step
    steps: list | None = None,  # the steps instead of its own
    raw_plan: bytes | None = None,  # the plan blob as it is, instead of any JSON of the above
    client: str | bytes | None = None,
    hugepages: int | None = None,
    sections: list | None = None,
    section_count: int | None = None,
    trailing: bytes = b"",
) -> bytes:
    """A HELLO payload: the captured one, changed as the arguments say."""
    base = capture_hello()
    if raw_plan is None:
        edited = json.loads(json.dumps(base.plan))
        for name, value in (plan or {}).items():
            merge = isinstance(value, dict) and isinstance(edited.get(name), dict)
            edited[name] = edited[name] | value if merge else value
        if steps is not None:
            edited["steps"] = steps
        elif step:
            edited["steps"] = [edited["steps"][0] | step]
        raw_plan = plan_json(edited)
    sections = base.sections if sections is None else sections
    out = _text(base.client if client is None else client)
    out += struct.pack("!B", base.hugepages if hugepages is None else hugepages) + _blob(raw_plan)
    out += struct.pack("!H", len(sections) if section_count is None else section_count)
    for key, version, fields in sections:
        out += _text(key) + struct.pack("!H", version) + _blob(fields)
    return out + trailing


TCP_LOOP_AUTO = ("tcp", 1, b"\x00")  # the tcp section, version 1: its loop code (0: auto)
ONE_STEP = {"transport": "tcp", "kernel": "latency", "sizes": [8], "datatype": ""}
# Each absurd HELLO is a valid one with one thing changed; serve must refuse each before its CHALLENGE.
ABSURD_HELLOS = {
    "window 0": dict(plan={"window": 0}),
    "window 65537": dict(plan={"window": 65537}),
    "iterations -5": dict(plan={"iterations": -5}),
    "iterations 10^12": dict(plan={"iterations": 10**12}),
    "iterations as text": dict(plan={"iterations": "20"}),
    "iterations 20.5": dict(plan={"iterations": 20.5}),
    "iterations true": dict(plan={"iterations": True}),
    "warmup 10^12": dict(plan={"warmup": 10**12}),
    "timeout nan as text": dict(plan={"timeout": "nan"}),
    "timeout NaN": dict(plan={"timeout": Raw("NaN")}),
    "timeout 1e999": dict(plan={"timeout": Raw("1e999")}),
    "timeout -Infinity": dict(plan={"timeout": Raw("-Infinity")}),
    "timeout 0": dict(plan={"timeout": 0}),
    "timeout 10^6 s": dict(plan={"timeout": 1e6}),
    "max_time -1": dict(plan={"max_time": -1.0}),
    "max_time NaN": dict(plan={"max_time": Raw("NaN")}),
    "validate 7": dict(plan={"validate": 7}),
    "hugepages 9": dict(hugepages=9),
    "65 steps": dict(steps=[ONE_STEP] * 65),
    "0 steps": dict(steps=[]),
    "steps not a list": dict(plan={"steps": {"0": ONE_STEP}}),
    "a step not an object": dict(steps=["tcp latency 8"]),
    "a step without its kernel": dict(steps=[{"transport": "tcp", "sizes": [8]}]),
    "a 2 GiB size": dict(step={"sizes": [1 << 31]}),
    "a size of 2^64": dict(step={"sizes": [1 << 64]}),
    "a negative size": dict(step={"sizes": [-8]}),
    "a size as text": dict(step={"sizes": ["8"]}),
    "65 sizes": dict(step={"sizes": list(range(1, 66))}),
    "0 sizes": dict(step={"sizes": []}),
    "an unknown transport": dict(step={"transport": "carrier-pigeon"}, sections=[]),
    "a transport of 300 bytes": dict(step={"transport": "t" * 300}, sections=[]),
    "an MPI transport": dict(step={"transport": "mpi"}, sections=[]),
    "an unknown kernel": dict(step={"kernel": "pingpong"}),
    "a kernel of more than two ranks": dict(step={"kernel": "congestion", "sizes": [0]}),
    "an unknown datatype": dict(step={"datatype": "MPI_DOUBLE"}),
    "an unknown plan field": dict(plan={"exec": "rm -rf /"}),
    "an unknown step field": dict(step={"command": "sh"}),
    "repeat 2": dict(plan={"repeat": 2}),
    "ranks given": dict(plan={"ranks": [0, 1]}),
    "schedule shift": dict(plan={"pairs": {"schedule": "shift"}}),
    "an unknown pairs field": dict(plan={"pairs": {"shell": "sh"}}),
    "a run id with escapes": dict(plan={"run_id": "x\n\x1b[2J"}),
    "a run id of 300 bytes": dict(plan={"run_id": "r" * 300}),
    "an empty run id": dict(plan={"run_id": ""}),
    "a client version not UTF-8": dict(client=b"\xff\xfe"),
    "a client version of 65 bytes": dict(client="9" * 65),
    "a plan not JSON": dict(raw_plan=b"{not json"),
    "a plan that is a list": dict(raw_plan=b"[]"),
    "a plan not UTF-8": dict(raw_plan=b'{"steps": "\xff"}'),
    "a plan nested 16000 deep": dict(raw_plan=b"[" * 16000 + b"]" * 16000),
    "a plan over 32 KiB": dict(plan={"run_id": "r" * MAX_PLAN}),
    "a section count past its sections": dict(section_count=3),
    "trailing bytes": dict(trailing=b"\x00"),
    "no tcp section": dict(sections=[]),
    "tcp section version 9": dict(sections=[("tcp", 9, b"\x00")]),
    "tcp loop code 7": dict(sections=[("tcp", 1, b"\x07")]),
    "tcp section with more fields": dict(sections=[("tcp", 1, b"\x00\x00")]),
    "tcp section twice": dict(sections=[TCP_LOOP_AUTO, TCP_LOOP_AUTO]),
    "an unknown section": dict(sections=[TCP_LOOP_AUTO, ("rdma", 1, b"")]),
    "17 sections": dict(sections=[TCP_LOOP_AUTO] * 17),
}


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def reply(sock: socket.socket, timeout: float = REPLY_TIMEOUT_S) -> tuple[str, bytes]:
    """What serve answered: ("refused: WORDS" | "challenge" | "accept" | "closed" | "reset" | "timeout" | ...)."""
    sock.settimeout(timeout)
    try:
        header = _recv_exact(sock, HEADER.size)
        if header is None:
            return "closed", b""
        magic, _, kind, length = HEADER.unpack(header)
        if magic != MAGIC or length > MAX_PAYLOAD:
            return "garbage from serve", b""
        payload = _recv_exact(sock, length) or b""
    except TimeoutError:
        return "timeout", b""
    except ConnectionResetError:
        return "reset", b""
    except OSError as exc:
        return f"error {exc.errno}", b""
    if kind == ERROR:
        (size,) = struct.unpack("!H", payload[:2])
        return "refused: " + payload[2 : 2 + size].decode(errors="replace"), payload
    if kind == CHALLENGE:
        return "challenge", payload
    if kind == ACCEPT:
        return "accept", payload
    return f"message type {kind}", payload


def _words(outcome: str) -> str:
    """An outcome with its numbers and quoted bits folded, to count alike ones together."""
    return re.sub(r"\d+", "N", re.sub(r"'[^']*'", "'...'", outcome))[:72]


class Serve:
    """``fabricbench serve --token T`` on a free 127.0.0.1 port, its log read line by line."""

    def __init__(self, token: str, *args: str):
        self.proc = subprocess.Popen(
            [PYTHON, "-m", "fabricbench", "serve", "--address", "127.0.0.1", "--port", "0", "--token", token, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(),
            start_new_session=True,
        )
        first = self.proc.stderr.readline()
        found = re.search(r"listening on [\d.]+:(\d+)", first)
        if not found:
            self.stop()
            raise SystemExit(f"serve did not start: {first.strip()!r}")
        self.port = int(found.group(1))
        self.lines = [first.rstrip("\n")]
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_kb(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"^VmRSS:\s+(\d+) kB", status, re.M).group(1))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def log_faults(self) -> str:
        log = "\n".join(self.lines)
        faults = f"{log.count('Traceback')} tracebacks, {log.count('internal error')} internal errors"
        return f"{len(self.lines)} log lines, {faults}"


def connect(port: int, source: str | None = None, timeout: float = 10.0) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout, (source, 0) if source else None)
    sock.settimeout(timeout)
    return sock


def legit_client(port: int, token: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    argv = ["run", "--peer", f"127.0.0.1:{port}", "--token", token, *LEGIT_ARGV]
    with tempfile.TemporaryDirectory(prefix="fb-hostile-legit-") as tmp:
        return subprocess.run(
            [PYTHON, "-m", "fabricbench", *argv],
            cwd=tmp,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=clean_env(),
            stdin=subprocess.DEVNULL,
        )


class Hostile:
    """One hostile handshake of each kind; each returns what serve did."""

    def __init__(self, port: int, rng: random.Random):
        self.port = port
        self.rng = rng
        self.hello = hello_payload()
        self.frame = frame(HELLO, self.hello)

    def _send_then_listen(self, data: bytes) -> str:
        with connect(self.port) as sock:
            try:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
            except OSError as exc:
                return f"cut while we sent ({exc.strerror})"
            return reply(sock)[0]

    def random_bytes(self) -> str:
        return self._send_then_listen(self.rng.randbytes(self.rng.randrange(1, 300)))

    def magic_then_random(self) -> str:
        return self._send_then_listen(MAGIC + self.rng.randbytes(self.rng.randrange(8, 300)))

    def truncated_hello(self) -> str:
        return self._send_then_listen(self.frame[: self.rng.randrange(1, len(self.frame))])

    def corrupted_hello(self) -> str:
        data = bytearray(self.frame)
        for _ in range(self.rng.randint(1, 4)):
            data[self.rng.randrange(len(data))] = self.rng.randrange(256)
        return self._send_then_listen(bytes(data))

    def oversized_length(self) -> str:
        length = self.rng.choice([MAX_PAYLOAD + 1, 1 << 20, 1 << 31, (1 << 32) - 1])
        return self._send_then_listen(frame(HELLO, self.rng.randbytes(1024), length=length))

    def bad_magic(self) -> str:
        return self._send_then_listen(
            self.rng.choice([b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", frame(HELLO, self.hello, magic=b"FBRW")])
        )

    def other_version(self) -> str:
        return self._send_then_listen(frame(HELLO, self.hello, version=self.rng.choice([0, 1, 2, 3, 4, 6, 65535])))

    def wrong_type_first(self) -> str:
        kind = self.rng.choice([PROOF, ACCEPT, CHALLENGE, 16, 999])
        return self._send_then_listen(frame(kind, _blob(self.rng.randbytes(32))))

    def absurd_hello(self, name: str | None = None) -> str:
        name = name or self.rng.choice(sorted(ABSURD_HELLOS))
        return self._send_then_listen(frame(HELLO, hello_payload(**ABSURD_HELLOS[name])))

    def _challenged(self, then) -> str:
        with connect(self.port) as sock:
            sock.sendall(self.frame)
            outcome, payload = reply(sock)
            if outcome != "challenge":
                return f"HELLO not challenged: {outcome}"
            try:
                sock.sendall(then(payload))
                sock.shutdown(socket.SHUT_WR)
            except OSError as exc:
                return f"cut while we sent ({exc.strerror})"
            return reply(sock)[0]

    def wrong_token(self) -> str:
        return self._challenged(lambda nonce: frame(PROOF, _blob(self.rng.randbytes(32))))

    def no_token(self) -> str:
        return self._challenged(lambda nonce: frame(PROOF, _blob(b"")))

    def oversized_proof(self) -> str:
        return self._challenged(lambda nonce: frame(PROOF, _blob(self.rng.randbytes(200))))

    def hello_twice(self) -> str:
        # The HELLO again is over a PROOF's size bound; its first 32 bytes as a HELLO are within it, and reach the
        # check of the message's type.
        return self._challenged(lambda nonce: self.rng.choice([self.frame, frame(HELLO, self.hello[:32])]))

    def hello_then_leave(self) -> str:
        with connect(self.port) as sock:
            sock.sendall(self.frame)
            outcome, _ = reply(sock)
        return f"{outcome}, then we left"

    def short_drip(self) -> str:
        with connect(self.port) as sock:
            for byte in self.frame[: self.rng.randrange(5, 40)]:
                try:
                    sock.sendall(bytes([byte]))
                except OSError:
                    return "cut mid-drip"
                time.sleep(0.005)
        return "we left mid-drip"

    def connect_and_close(self) -> str:
        connect(self.port).close()
        return "we left"

    def connect_and_reset(self) -> str:
        sock = connect(self.port)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        return "we reset"

    KINDS = (
        "random_bytes",
        "magic_then_random",
        "truncated_hello",
        "corrupted_hello",
        "oversized_length",
        "bad_magic",
        "other_version",
        "wrong_type_first",
        "absurd_hello",
        "wrong_token",
        "no_token",
        "oversized_proof",
        "hello_twice",
        "hello_then_leave",
        "short_drip",
        "connect_and_close",
        "connect_and_reset",
    )


# Outcomes that show something wrong: serve never answered, or did not refuse what it must.
EXPECTED = {
    "oversized_length": "refused",
    "bad_magic": "refused",
    "other_version": "refused",
    "wrong_type_first": "refused",
    "absurd_hello": "refused",
    "wrong_token": "refused: wrong token",
    "no_token": "refused: this server needs a token",
    "oversized_proof": "refused",
    "hello_twice": "refused",
    "hello_then_leave": "challenge, then we left",
}


class Drippers:
    """Slow clients that send a HELLO a byte every EVERY seconds, each reconnecting once serve cuts it."""

    def __init__(self, port: int, count: int, source: str | None, every: float = 0.5):
        self.port, self.source, self.every = port, source, every
        self.stop_event = threading.Event()
        self.cuts: Counter = Counter()
        self.threads = [threading.Thread(target=self._drip, daemon=True) for _ in range(count)]
        for thread in self.threads:
            thread.start()

    def _drip(self) -> None:
        data = frame(HELLO, hello_payload())
        while not self.stop_event.is_set():
            try:
                sock = connect(self.port, self.source)
            except OSError:
                self.stop_event.wait(0.5)
                continue
            with sock:
                for byte in data:
                    if self.stop_event.wait(self.every):
                        return
                    try:
                        sock.sendall(bytes([byte]))
                    except OSError:
                        break
                    ready = selectors.DefaultSelector()
                    ready.register(sock, selectors.EVENT_READ)
                    if ready.select(0):
                        self.cuts[_words(reply(sock, 1.0)[0])] += 1
                        break

    def stop(self) -> None:
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=5)


def _source(address: str) -> str | None:
    """ADDRESS as a source on loopback where this host lets one bind it (Linux routes all of 127/8 to lo)."""
    try:
        with socket.socket() as probe:
            probe.bind((address, 0))
        return address
    except OSError:
        return None


def part_handshake(opts) -> bool:
    token = "hostile-" + secrets.token_hex(12)
    rng = random.Random(opts.seed)
    base = capture_hello()
    serve = Serve(token)
    print(
        f"# part 2: {opts.handshakes} hostile handshakes against serve on 127.0.0.1:{serve.port} (pid {serve.proc.pid})"
    )
    sections = ", ".join(f"{key} version {version} ({len(fields)} B)" for key, version, fields in base.sections)
    print(
        f"HELLO captured from run --peer {shlex.join(LEGIT_ARGV)}: client {base.client.decode()!r}, hugepages code "
        f"{base.hugepages}, a plan of {len(plan_json(base.plan))} B as JSON, sections {sections or 'none'}"
    )
    try:
        rss_before = serve.rss_kb()
        hostile = Hostile(serve.port, rng)
        # Each absurd HELLO once, to show what serve says of it: each must be refused, in words naming its fault.
        print(f"\n{'absurd HELLO':<34} what serve answered")
        absurd = {name: hostile.absurd_hello(name) for name in ABSURD_HELLOS}
        for name, outcome in absurd.items():
            print(f"{name:<34} {outcome[:160]}")
        drippers = Drippers(serve.port, 2, _source("127.0.0.2"))
        tally: dict[str, Counter] = {kind: Counter() for kind in Hostile.KINDS}
        started = time.monotonic()
        order: list[str] = []
        for _ in range(opts.handshakes):
            if not order:
                order = list(Hostile.KINDS)
                rng.shuffle(order)
            kind = order.pop()
            try:
                outcome = getattr(hostile, kind)()
            except OSError as exc:
                outcome = f"could not connect: {exc.strerror or exc}"
            tally[kind][_words(outcome)] += 1
        elapsed = time.monotonic() - started
        drippers.stop()
        alive = serve.alive()
        rss_after = serve.rss_kb() if alive else 0
        legit = legit_client(serve.port, token) if alive else None
    finally:
        serve.stop()
    print(f"\n{'kind':<20} {'sent':>5}  what serve did (most common first)")
    unexpected = []
    for kind, outcomes in tally.items():
        if not outcomes:
            continue
        said = "; ".join(f"{n}x {words}" for words, n in outcomes.most_common(3))
        more = f"; +{len(outcomes) - 3} other kinds" if len(outcomes) > 3 else ""
        print(f"{kind:<20} {sum(outcomes.values()):>5}  {said}{more}")
        want = EXPECTED.get(kind)
        for words, n in outcomes.items():
            silent = re.search(r"(^|: )timeout($|,)", words)  # serve never answered (not its "bad --timeout")
            if silent or "could not connect" in words or (want and not words.startswith(want)):
                unexpected.append(f"{kind}: {n}x {words}")
    unexpected += [f"absurd HELLO {name}: {said}" for name, said in absurd.items() if not said.startswith("refused")]
    cuts = "; ".join(f"{n}x {w}" for w, n in drippers.cuts.most_common()) or "none yet (the run was shorter)"
    print(f"slow drippers (a byte every 0.5 s, from 127.0.0.2) cut by serve: {cuts}")
    print(f"{opts.handshakes} handshakes in {elapsed:.1f} s; serve: {serve.log_faults()}")
    if unexpected:
        print("unexpected:\n  " + "\n  ".join(unexpected))
    ran = legit is not None and legit.returncode == 0
    if legit is not None and not ran:
        print(f"the token holder's run exited {legit.returncode}: {legit.stderr.strip()[:300]!r}")
    line = (
        f"{opts.handshakes} hostile handshakes: serve {'alive' if alive else 'DEAD'}, RSS {rss_before} -> "
        f"{rss_after} kB, a token holder then ran: {'yes' if ran else 'no'}"
    )
    print("\n" + line)
    SUMMARY.append(line)
    return alive and ran and not unexpected


class SilentHolder:
    """N silent connections to serve, four from each loopback address, each reopened as soon as serve cuts it."""

    def __init__(self, port: int, count: int, reopen_delay: float):
        self.port, self.count, self.reopen_delay = port, count, reopen_delay
        first = _source("127.0.0.2")
        self.sources = [f"127.0.0.{2 + i // 4}" if first else None for i in range(count)]
        self.cut: Counter = Counter()
        self.open_now = 0
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._hold, daemon=True)
        self.thread.start()

    def _open(self, selector, slot: int) -> None:
        while not self.stop_event.is_set():
            try:
                sock = connect(self.port, self.sources[slot], timeout=5)
            except OSError:
                self.stop_event.wait(0.1)
                continue
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, slot)
            return

    def _hold(self) -> None:
        selector = selectors.DefaultSelector()
        for slot in range(self.count):
            self._open(selector, slot)
        while not self.stop_event.is_set():
            self.open_now = len(selector.get_map())
            for key, _ in selector.select(0.2):
                sock = key.fileobj
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                words = "closed"
                if len(data) > HEADER.size + 2 and data[:4] == MAGIC:
                    size = struct.unpack("!H", data[HEADER.size : HEADER.size + 2])[0]
                    words = data[HEADER.size + 2 : HEADER.size + 2 + size].decode(errors="replace")
                self.cut[_words(words)] += 1
                selector.unregister(sock)
                sock.close()
                if self.reopen_delay:
                    self.stop_event.wait(self.reopen_delay)
                self._open(selector, key.data)
        for key in list(selector.get_map().values()):
            key.fileobj.close()

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=10)


def part_silent(opts) -> bool:
    token = "silent-" + secrets.token_hex(12)
    serve = Serve(token)
    print(
        f"# part 3: {opts.silent} silent sockets held open to serve on 127.0.0.1:{serve.port} while "
        f"{opts.clients} token holders run --peer, one after another"
    )
    admitted, tries, failures, took = 0, 0, [], []
    try:
        holder = SilentHolder(serve.port, opts.silent, opts.reopen_delay)
        deadline = time.monotonic() + 10
        while holder.open_now < opts.silent and time.monotonic() < deadline:
            time.sleep(0.05)
        held_at_start = holder.open_now
        started = time.monotonic()
        for i in range(opts.clients):
            began = time.monotonic()
            result = legit_client(serve.port, token)
            took.append(time.monotonic() - began)  # the whole run: its Python's start, handshake, 20 iterations
            tries += 1 + result.stderr.count("evicted our handshake")
            if result.returncode == 0:
                admitted += 1
            else:
                failures.append(f"client {i + 1}: exit {result.returncode}: {result.stderr.strip()[:200]!r}")
        elapsed = time.monotonic() - started
        held_at_end = holder.open_now
        holder.stop()
        alive = serve.alive()
    finally:
        serve.stop()
    sources = sorted({s for s in holder.sources if s}) or ["127.0.0.1"]
    print(f"silent sockets open: {held_at_start} at the start, {held_at_end} at the end, from {', '.join(sources)}")
    cuts = "; ".join(f"{n}x {w}" for w, n in holder.cut.most_common(4)) or "none"
    print(f"serve cut {sum(holder.cut.values())} silent sockets, each reopened: {cuts}")
    print(f"{opts.clients} clients in {elapsed:.1f} s, {tries} handshakes in all; serve alive: {alive}")
    if took:
        ordered = sorted(took)
        print(
            f"each client's run --peer, start to exit: min {ordered[0]:.2f} s, median "
            f"{ordered[len(ordered) // 2]:.2f} s, max {ordered[-1]:.2f} s ({', '.join(f'{t:.2f}' for t in took)})"
        )
    print(f"serve: {serve.log_faults()}")
    for failure in failures:
        print("  " + failure)
    line = f"{admitted} of {opts.clients} legit clients admitted while {opts.silent} silent sockets held"
    print("\n" + line)
    SUMMARY.append(line)
    return admitted == opts.clients and alive


SUMMARY: list[str] = []


# --- Part 4: what reaches the terminal, and a console that fails -------------------------------------------------

HOSTILE_TEXT = "\x1b[2J\x1b[31mred\nfabricbench: error: forged"  # clears the screen, recolours, forges a line
CONSOLE = {  # what the shell does to a small run's stdout (or stderr), and the exit code the README gives it
    "| head -1": 141,
    "> /dev/full": 1,
    ">&-": 1,
    "2>&-": 0,  # a closed stderr: the run goes on, what it would say goes nowhere
}


def _console_case(redirect: str, code: int, where: Path) -> list[str]:
    out = where / "run"
    command = shlex.join([PYTHON, "-m", "fabricbench", "run", "-k", "latency", "-m", "1:8", "-i", "20", "-x", "2"])
    command += f" --format table --out {shlex.quote(str(out))} {redirect}"
    script = f"{command}; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, env=clean_env())
    problems = [f"exit {done.returncode}, expected {code}"] if done.returncode != code else []
    lines = done.stderr.strip().splitlines()
    if len(lines) > 1 or "Traceback" in done.stderr:
        problems.append(f"{len(lines)} lines on stderr")
    try:
        meta = json.loads((out / "metadata.json").read_text())
        rows = (out / "results.csv").read_text().count("\n") - 1
    except (OSError, ValueError) as exc:
        return [*problems, f"no table: {exc}"]
    if not (meta.get("complete") and rows == meta.get("rows") == 4 and (out / "results.parquet").exists()):
        problems.append(f"{rows} rows on disk, metadata {meta.get('complete')}, {meta.get('rows')}")
    return problems


def _escape_case(command: str, where: Path) -> list[str]:
    run = _run_copy(where, "escapes-run")
    meta = json.loads((run / "metadata.json").read_text())
    meta.update(label=HOSTILE_TEXT, mpi_vendor=HOSTILE_TEXT)
    (run / "metadata.json").write_text(json.dumps(meta))
    argv = [command, str(run), str(EXAMPLE)] if command == "compare" else [command, str(run)]
    done = subprocess.run([PYTHON, "-m", "fabricbench", *argv], capture_output=True, timeout=120, env=clean_env())
    problems = [] if done.returncode == 0 else [f"exit {done.returncode}"]
    if b"\x1b" in done.stdout + done.stderr:
        problems.append("an ESC byte reached the terminal")
    if any(line.startswith(b"fabricbench: error: forged") for line in done.stdout.splitlines()):
        problems.append("a newline from the file made a line of its own")
    return problems


def _ipv6_case(where: Path) -> list[str]:
    with socket.socket() as probe:  # a port free now, on loopback
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    proc = subprocess.Popen(
        [PYTHON, "-m", "fabricbench", "serve", "--address", "::1", "--port", port],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=clean_env(),
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=8)
    except subprocess.TimeoutExpired:
        try:
            socket.create_connection(("::1", int(port)), timeout=5).close()
            return []  # it listens on IPv6
        except OSError as exc:
            return [f"running, but ::1 port {port} refuses: {exc}"]
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lines = err.decode(errors="replace").strip().splitlines()
    if len(lines) == 1 and "ipv6" in lines[0].lower() and proc.returncode == 2:
        return []
    return [f"exit {proc.returncode}: {lines!r}"[:200]]


def _report_case(command: str, where: Path) -> list[str]:
    """A report printed to a full stdout: its files written first, then one line and exit 1, no traceback."""
    (where / "good.toml").write_text(THRESHOLDS["good.toml"])
    argv = {
        "compare": ["compare", str(EXAMPLE), "--out", "out"],
        "model": ["model", str(EXAMPLE), "--out", "out"],
        "check": ["check", "good.toml", str(EXAMPLE)],
        "doctor": ["doctor"],
    }[command]
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [PYTHON, "-m", "fabricbench", *argv], stdout=full, stderr=subprocess.PIPE, cwd=where, timeout=120
        )
    said = [line for line in done.stderr.decode(errors="replace").splitlines() if not line.startswith("# wrote")]
    problems = [] if done.returncode == 1 else [f"exit {done.returncode}"]
    if said != ["fabricbench: error: cannot write to stdout: No space left on device"]:
        problems.append(f"{len(said)} lines on stderr: {said[:1]!r}"[:160])
    expected = {"compare": ["comparison.csv"], "model": ["model.csv", "projection.csv"]}.get(command, [])
    problems += [f"no {name}" for name in expected if not (where / "out" / name).is_file()]
    return problems


def _glyph_case(where: Path) -> list[str]:
    """compare --out of a label holding ESC, BEL and a character the font lacks: no byte of it, and no
    matplotlib warning, reaches the terminal."""
    run = _run_copy(where, "glyph-run")
    meta = json.loads((run / "metadata.json").read_text())
    (run / "metadata.json").write_text(json.dumps(meta | {"label": "x\x1b[31m\u4e2d\x07"}))
    argv = ["compare", str(run), str(EXAMPLE), "--out", str(where / "out")]
    done = subprocess.run([PYTHON, "-m", "fabricbench", *argv], capture_output=True, timeout=120, env=clean_env())
    problems = [] if done.returncode == 0 else [f"exit {done.returncode}"]
    if b"\x1b" in done.stdout + done.stderr or b"\x07" in done.stdout + done.stderr:
        problems.append("an ESC or BEL byte reached the terminal")
    if b"Glyph" in done.stderr:
        problems.append("matplotlib's glyph warning reached the terminal")
    return problems


def _bracketed_case(where: Path) -> list[str]:
    """serve --address [::1], as --peer writes an IPv6 address: it listens there (or refuses naming IPv6)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [PYTHON, "-m", "fabricbench", "serve", "--address", "[::1]", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=clean_env(),
        start_new_session=True,
    )
    try:
        first = proc.stderr.readline().decode(errors="replace")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if f"listening on [::1]:{port} (" in first or f"cannot listen on [::1]:{port}: IPv6" in first:
        return []
    return [f"said {first.strip()!r}"[:160]]


def _killed_case(where: Path) -> list[str]:
    """A self-launched run whose rank 1 is killed as the OOM killer kills: one line naming it, exit 137, the rows
    kept and marked incomplete, hydra's banner kept out of the console table."""
    out = where / "run"
    argv = ["run", "-k", "latency", "-m", "1:4M", "-i", "3000", "-x", "10", "--out", str(out)]
    proc = subprocess.Popen(
        [PYTHON, "-m", "fabricbench", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
        start_new_session=True,
    )
    try:
        for _ in range(3):  # the two header lines and the first row: rank 0 has written the metadata
            proc.stdout.readline()
        pid = json.loads((out / "metadata.json").read_text())["ranks"][1]["pid"]
        os.kill(pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    lines = stderr.decode(errors="replace").strip().splitlines()
    problems = [] if proc.returncode == 137 else [f"exit {proc.returncode}"]
    if len(lines) != 1 or not lines[0].startswith(f"fabricbench: error: rank 1 (pid {pid}) was killed by signal 9"):
        problems.append(f"{len(lines)} lines on stderr: {lines[:1]!r}"[:160])
    if b"BAD TERMINATION" in stdout:
        problems.append("hydra's banner in the console table")
    meta = json.loads((out / "metadata.json").read_text())
    if meta.get("complete") is not False:
        problems.append("metadata does not say incomplete")
    return problems


def part_streams(opts) -> bool:
    cases = {f"run ... {r}": (lambda w, r=r, c=c: _console_case(r, c, w)) for r, c in CONSOLE.items()}
    cases |= {f"{c} of a hostile label": (lambda w, c=c: _escape_case(c, w)) for c in ("compare", "model")}
    cases |= {f"{c} > /dev/full": (lambda w, c=c: _report_case(c, w)) for c in ("compare", "model", "check", "doctor")}
    cases["compare --out of a label without glyphs"] = _glyph_case
    cases["serve --address ::1"] = _ipv6_case
    cases["serve --address [::1]"] = _bracketed_case
    cases["a rank killed by SIGKILL"] = _killed_case
    print(f"# part 4: {len(cases)} cases of what reaches the terminal and a console that fails")
    failed = 0
    for name, check in cases.items():
        with tempfile.TemporaryDirectory(prefix="fb-hostile-") as tmp:
            problems = check(Path(tmp))
        failed += bool(problems)
        print(f"{'ok  ' if not problems else 'FAIL'} [{name}] {'; '.join(problems)}", flush=True)
    line = f"{len(cases) - failed} of {len(cases)} terminal and console cases: clean text, every row on disk"
    print("\n" + line)
    SUMMARY.append(line)
    return not failed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=["cli", "handshake", "silent", "streams", "all"], default="all")
    parser.add_argument("--only", metavar="PATTERN", help="part 1: only the cases whose id matches this regex")
    parser.add_argument("--list", action="store_true", help="part 1: list the cases and their commands, run none")
    parser.add_argument("--jobs", type=int, default=1, help="part 1: cases run at once (default 1: one by one)")
    parser.add_argument("--timeout", type=float, default=60.0, help="part 1: seconds a case may take (default 60)")
    parser.add_argument("--verbose", action="store_true", help="part 1: a line per case, passed ones too")
    parser.add_argument("--handshakes", type=int, default=2000, metavar="K", help="part 2: hostile handshakes")
    parser.add_argument("--seed", type=int, default=20261201, help="part 2: seed of the hostile bytes")
    parser.add_argument("--silent", type=int, default=32, metavar="N", help="part 3: silent sockets held open")
    parser.add_argument("--clients", type=int, default=10, metavar="M", help="part 3: token holders run in turn")
    parser.add_argument(
        "--reopen-delay", type=float, default=0.005, help="part 3: seconds before a cut silent socket is reopened"
    )
    opts = parser.parse_args()
    if not EXAMPLE.is_dir():
        raise SystemExit(f"the example run {EXAMPLE} is missing")
    parts = ["cli", "handshake", "silent", "streams"] if opts.part == "all" else [opts.part]
    if opts.list and parts != ["cli"]:
        parts = ["cli"]
    ok = True
    for part in parts:
        ok &= {"cli": part_cli, "handshake": part_handshake, "silent": part_silent, "streams": part_streams}[part](opts)
        print()
    if len(SUMMARY) > 1:
        print("# closing note figures")
        for line in SUMMARY:
            print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
