"""Command line: one small function per subcommand, plain argparse."""

from __future__ import annotations

import argparse
import contextlib
import errno
import io
import os
import sys

# numpy's OpenBLAS starts a thread per core that spins for a while after import. fabricbench
# never calls BLAS, and on a small node that thread steals the CPU of the rank being timed,
# right when the first sizes run. Set before numpy is first imported; a user's own setting
# wins, and the metadata records it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from fabricbench import __version__, transports
from fabricbench.argtypes import (
    MAX_COUNT,
    MIN_TIMEOUT,
    bounded_decimal,
    byte_size,
    host_and_port,
    masked_command_line,
    masked_text,
    names,
    nonempty,
    port_number,
    seconds,
    secret,
    secrets_given,
    whole_number,
)
from fabricbench.errors import ConsoleFailed, FabricbenchError, UsageError
from fabricbench.measure.kernels import KERNELS
from fabricbench.measure.plan import (
    MAX_REPEAT,
    MAX_WINDOW,
    OUTPUT_FORMATS,
    Plan,
    parse_rank_counts,
    parse_size_range,
)
from fabricbench.run.patterns import every_pattern
from fabricbench.terminal import LINE, printable
from fabricbench.transports import TRANSPORTS

DEFAULT_SERVE_PORT = 18600
DEFAULT_NP = 2  # local ranks a run outside a launcher starts without --np


class _Parser(argparse.ArgumentParser):
    """argparse, but bad input is one line and exit 2, on every rank alike, and no option is abbreviated.

    argparse would take ``--tok SECRET`` for ``--token SECRET``: an abbreviation no masking by spelling can know.
    Subparsers are made of this class too (``parser_class``), so every parser refuses them.
    """

    def __init__(self, *args, **kwargs):
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def error(self, message: str):
        raise UsageError(message)

    def parse_args(self, args=None, namespace=None):
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            self.refuse_unrecognized(parsed, extra)
        return parsed

    def refuse_unrecognized(self, parsed: argparse.Namespace, extra: list[str], where: str = "") -> None:
        """Raise the one line for what argparse did not take. Unknown options are named without their values:
        the word after a misspelt ``--token``, or after its '=', is the secret. An abbreviation is named with
        the options it abbreviates."""
        command = getattr(self, "commands", {}).get(getattr(parsed, "command", None), self)
        known = [option for option in command._option_string_actions if option.startswith("--")]
        options = [word.partition("=")[0] for word in extra if word.startswith("-") and word != "-"]
        words = []
        for name in options or masked_command_line(extra):  # a stray word may be the token's value
            meant = sorted(option for option in known if name.startswith("--") and option.startswith(name))
            words.append(f"{name} (options are not abbreviated: {' or '.join(meant)})" if meant else name)
        raise UsageError(f"unrecognized arguments{where}: {' '.join(words)}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fabricbench", description="Measure what an interconnect really delivers.")
    parser.add_argument("--version", action="version", version=f"fabricbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    parser.commands = sub.choices  # {name: subparser}: refuse_unrecognized names the options of the one given

    run = sub.add_parser("run", help="run kernels and write a tidy table")
    run.add_argument(
        "-t",
        "--transport",
        type=names("transport"),
        help=f"comma list of: {', '.join(TRANSPORTS)}; without -k, every kernel of each but congestion",
    )
    run.add_argument("-k", "--kernel", type=names("kernel"), help=f"comma list of: {', '.join(KERNELS)}")
    run.add_argument(
        "-m",
        "--message-size",
        type=parse_size_range,
        metavar="[MIN:]MAX",
        help="message sizes, powers of two from MIN to MAX (e.g. 0:4M)",
    )
    run.add_argument(
        "-i", "--iterations", type=whole_number("iterations", 1, MAX_COUNT), help="timed iterations per size"
    )
    run.add_argument("-x", "--warmup", type=whole_number("warm-up", 0, MAX_COUNT), help="untimed iterations per size")
    run.add_argument(
        "-W",
        "--window",
        type=whole_number("window", 1, MAX_WINDOW),
        default=Plan.window,
        help=f"messages in flight (default {Plan.window})",
    )
    run.add_argument("--max-time", type=seconds("--max-time"), help="seconds per size; lowers the iteration count")
    run.add_argument("-c", "--validate", action="store_true", help="check received data outside the timed region")
    run.add_argument(
        "--repeat",
        type=whole_number("--repeat", 1, MAX_REPEAT),
        default=Plan.repeat,
        help="run the whole plan R times, every step once per repeat (rows carry the repeat index); "
        "compare then gives medians with 95%% intervals and marks each ratio significant or not",
    )
    run.add_argument(
        "--ranks",
        type=parse_rank_counts,
        metavar="N,N,...",
        help="run the collectives on the first N of the launched ranks, for each N (e.g. 2,4,8): "
        "a row per N, and compare draws the scaling; other kernels run on all ranks",
    )
    run.add_argument("--out", help="results directory (default results/RUN_ID)")
    run.add_argument(
        "--append",
        action="store_true",
        help="add this run's rows to the table already in --out DIR, keeping every run's metadata",
    )
    run.add_argument("--label", default=Plan.label, help="a name for this run in tables and plots")
    run.add_argument(
        "--topology",
        metavar="FILE",
        help="where each host hangs in the fabric: Slurm's topology.conf, or a TOML map (FILE.toml) of "
        "[switches.NAME] hosts and group; inside a Slurm job with topology/tree, scontrol's by default",
    )
    run.add_argument(
        "--format",
        dest="output_format",
        choices=OUTPUT_FORMATS,
        default=Plan.output_format,
        help="console output: readable table, OSU's text layout, nccl-tests' text layout (collectives), or nothing",
    )
    osu_columns = run.add_argument_group("OSU's optional columns (--format osu; as OSU's -f, -z, -T; -c is -c)")
    osu_columns.add_argument(
        "--osu-full", action="store_true", help="Min/Max latency and Iterations columns of a collective (OSU's -f)"
    )
    osu_columns.add_argument(
        "--osu-percentiles",
        type=_percentiles,
        metavar="LIST",
        help="tail latency columns, e.g. 50,90,99 (OSU's -z; from 50, 90, 99, 99.9)",
    )
    osu_columns.add_argument(
        "--osu-no-rate",
        action="store_true",
        help="leave out the Messages/s column of a message-rate kernel (OSU's osu_mbw_mr -R 0)",
    )
    osu_columns.add_argument(
        "--osu-datatype",
        metavar="TYPE",
        type=nonempty("--osu-datatype", "give OSU's -T type, e.g. MPI_CHAR"),
        help="OSU's -T: the datatype line; what a reduction sums on mpi (MPI_CHAR, MPI_INT or MPI_FLOAT)",
    )
    run.add_argument(
        "--timeout",
        type=seconds("--timeout", MIN_TIMEOUT),
        default=Plan.timeout,
        help=f"seconds without progress before giving up (default {Plan.timeout:g}, at least {MIN_TIMEOUT:g})",
    )
    run.add_argument(
        "--hugepages",
        choices=["on", "off"],
        help="numpy's madvise of huge pages for large buffers (default: numpy's own)",
    )
    run.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress on stderr (default: when stderr is a terminal)",
    )
    run.add_argument(
        "-n",
        "--np",
        type=whole_number("--np", 1),
        help=f"local ranks to start when run outside a launcher (default {DEFAULT_NP}; at most 8 a core, and what the "
        "descriptor and task limits allow)",
    )
    run.add_argument(
        "--oversubscribe",
        action="store_true",
        help="allow --np above 8 ranks a core (mpirun's word for more ranks than slots)",
    )
    run.add_argument(
        "--peer",
        type=host_and_port,
        metavar="HOST:PORT",
        help="run as rank 0 against `fabricbench serve` there, without MPI",
    )
    run.add_argument(
        "--max-memory",
        type=byte_size("--max-memory"),
        metavar="SIZE",
        help="memory one rank may use (default: this host's available memory shared among its ranks)",
    )
    run.add_argument(
        "--token", type=secret, help="the shared secret of a `serve --token` (default: $FABRICBENCH_TOKEN)"
    )
    for pattern in every_pattern():  # each pattern's own option group
        pattern.add_arguments(run)
    transports.add_arguments(run, "run")
    run.set_defaults(func=cmd_run)

    serve = sub.add_parser("serve", help="be rank 1 for `fabricbench run --peer` clients, one at a time, without MPI")
    serve.add_argument(
        "--address",
        default="127.0.0.1",
        type=_unbracketed,
        help="address to listen on: 127.0.0.1 (default: this host only, IPv4), ::1 (this host, IPv6), an "
        "interface's address, 0.0.0.0 (every IPv4 interface) or :: (every interface, IPv4 and IPv6 alike)",
    )
    serve.add_argument(
        "--port", type=port_number, default=DEFAULT_SERVE_PORT, help=f"port (default {DEFAULT_SERVE_PORT})"
    )
    serve.add_argument(
        "--handshake-timeout",
        "--timeout",
        dest="handshake_timeout",
        type=seconds("--handshake-timeout"),
        default=10.0,
        help="seconds a client has for its whole handshake (default 10; --timeout is its former name); "
        "a session then uses the client's --timeout",
    )
    serve.add_argument(
        "--token",
        type=secret,
        help="a shared secret clients must prove they hold (never sent); default: $FABRICBENCH_TOKEN, which, "
        "unlike this option, other users cannot read in the process list",
    )
    caps = serve.add_argument_group("what a client may ask for (a run over a cap is refused, naming it)")
    # Every cap is above 0 (a cap of 0 would start a server that refuses every run); --max-timeout is at least
    # the least --timeout a client may give.
    caps.add_argument(
        "--max-timeout", type=seconds("--max-timeout", MIN_TIMEOUT), default=300.0, help="--timeout (default 300 s)"
    )
    caps.add_argument(
        "--max-iterations",
        type=whole_number("--max-iterations", 1, MAX_COUNT),
        default=1_000_000,
        help="-i (default 1000000)",
    )
    caps.add_argument(
        "--max-warmup", type=whole_number("--max-warmup", 1, MAX_COUNT), default=100_000, help="-x (default 100000)"
    )
    caps.add_argument(
        "--max-window", type=whole_number("--max-window", 1, MAX_WINDOW), default=1024, help="-W (default 1024)"
    )
    caps.add_argument(
        "--max-bytes",
        type=byte_size("--max-bytes", 1),
        default=512 * 1024**2,
        metavar="SIZE",
        help="one rank's buffers for one size: message size x window x directions (default 512M)",
    )
    caps.add_argument(
        "--max-session",
        type=seconds("--max-session"),
        default=7200.0,
        help="a session's budget: its plan's length on a slow link (100 us an exchange, 5 us a message, 100 MB/s), "
        "counting the iterations --max-time allows, four times, plus its --timeout; a session child still running "
        "after its budget is killed (default 7200 s)",
    )
    transports.add_arguments(serve, "serve")
    serve.set_defaults(func=cmd_serve)

    compare = sub.add_parser("compare", help="put finished runs side by side: ratios to the first, CSV and plots")
    compare.add_argument("runs", nargs="+", metavar="RUN", help="result directories or CSV/Parquet tables; first = A")
    compare.add_argument("--out", help="directory for comparison.csv and the PNG plots")
    compare.add_argument(
        "--metric",
        type=names("metric"),
        help="comma list of columns to compare, e.g. p50,p99,bw,busbw (default: p50 latency, bw, busbw)",
    )
    compare.add_argument(
        "--max-input",
        type=byte_size("--max-input"),
        metavar="SIZE",
        help="the largest table or metadata file to read (default 1G)",
    )
    compare.set_defaults(func=cmd_compare)

    doctor = sub.add_parser("doctor", help="what can run here: every transport, the MPI, the C loops, the devices")
    doctor.add_argument("--json", action="store_true", help="one JSON object for scripts instead of the table")
    doctor.set_defaults(func=cmd_doctor)

    shims = sub.add_parser(
        "osu-shims",
        help="write osu_latency, osu_bw, osu_allreduce, ... into DIR: OSU's options and text, run by fabricbench",
    )
    shims.add_argument(
        "dir",
        metavar="DIR",
        type=nonempty("osu-shims DIR", "give the folder to write the shims into"),
        help="folder for the shims (made if missing); put it on PATH",
    )
    shims.set_defaults(func=cmd_osu_shims)

    check = sub.add_parser(
        "check",
        help="hold a run to a thresholds file (TOML): one line per failing row, pair or host; exit 0 pass, 1 fail",
    )
    check.add_argument(
        "--junit",
        metavar="FILE",
        help="also write the verdict as a JUnit XML report: a test case per threshold and row it covers, a failure "
        "saying the row (link, kernel, size), its measured and its allowed figure; give it before THRESHOLDS",
    )
    check.add_argument("thresholds", metavar="THRESHOLDS", help="the thresholds file (TOML, [[threshold]] tables)")
    check.add_argument(
        "target",
        nargs=argparse.REMAINDER,
        metavar="RUN | -- run ARGS",
        help="a finished run's folder (or table), or -- run and its options to start one and check it",
    )
    check.set_defaults(func=cmd_check)

    model = sub.add_parser("model", help="fit Hockney's alpha + n/beta to runs and project allreduce to 100,000 ranks")
    model.add_argument("runs", nargs="+", metavar="RUN", help="finished runs' folders or tables")
    model.add_argument(
        "--size",
        type=byte_size("--size"),
        default=1024**3,
        metavar="SIZE",
        help="the allreduce message size to project, e.g. 1G (default 1G: a 1 GiB gradient)",
    )
    model.add_argument(
        "--project-ranks",
        type=names("--project-ranks"),
        metavar="LIST",
        help="comma list of rank counts to project (default 2, 4, ..., 65536 and 100000)",
    )
    model.add_argument(
        "--statistic",
        choices=["typical", "best"],
        default="typical",
        help="fit the typical figures (p50 latency, average bw; default) or the best (min latency, peak window)",
    )
    model.add_argument(
        "--hosts-per-switch",
        type=whole_number("--hosts-per-switch", 1),
        metavar="K",
        help="hosts under a leaf of the projected fat-tree (default: the most under one switch in the run's topology)",
    )
    model.add_argument(
        "--oversubscription",
        type=bounded_decimal("--oversubscription", 0, 1e6, above=True),
        metavar="S",
        help="a leaf's host links over its uplinks, e.g. 3 for 3:1 (default: measured, same-switch beta over "
        "cross-switch beta of an all-pairs run by tier)",
    )
    model.add_argument("--out", help="directory for model.csv, projection.csv and the PNG plots")
    model.add_argument(
        "--seed", type=whole_number("--seed", 0), default=0, help="seed of the bootstrap resampling (default 0)"
    )
    model.set_defaults(func=cmd_model)
    return parser


def _unbracketed(address: str) -> str:
    """serve --address: an IPv6 address in brackets, as --peer takes it ([::1]), is the address without them."""
    return address[1:-1] if address.startswith("[") and address.endswith("]") else address


def _percentiles(text: str) -> tuple[float, ...]:
    from fabricbench.report.osu import parse_percentiles

    return parse_percentiles(text)


def _no_glyph_warnings() -> None:
    """A name the font has no glyph for (ESC from a label, a CJK host name) is drawn as a box; matplotlib's warning
    for it would put the character itself and a source path on the terminal, once a glyph and picture."""
    import warnings

    warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font")


def cmd_compare(args, argv: list[str]) -> int:
    from fabricbench.analysis import load
    from fabricbench.analysis.compare import compare

    _no_glyph_warnings()

    if args.max_input is not None:
        load.max_input_bytes = args.max_input
    return compare(args.runs, out=args.out, metric_names=args.metric)


def cmd_run(args, argv: list[str]) -> int:
    from fabricbench.launch import launcher as launch
    from fabricbench.launch import orchestrate
    from fabricbench.measure.results import check_reuse

    if args.append and not args.out:
        raise UsageError("--append adds to the table in an earlier run's folder: give it with --out DIR")
    from fabricbench.run.planner import build_plan

    if args.peer:  # no launcher and no MPI: this process is rank 0 of two
        from fabricbench.launch import peer

        if args.ranks:
            raise UsageError("--ranks takes sub-communicators of MPI ranks; a --peer run has two ranks and no MPI")
        args.transport = args.transport or [peer.default_transport()]
        plan = build_plan(args, 2)
        check_reuse(plan.out_dir, args.append, TRANSPORTS)  # before the server is reached
        return peer.run_client(plan, args.peer, args.hugepages, peer.token_from(args.token))
    if args.token is not None:
        raise UsageError("--token is for --peer runs (and serve)")
    who = launch.launcher()
    if who is None:
        ranks = DEFAULT_NP if args.np is None else args.np
        # First: the plan is sized by --np.
        launch.check_ranks(ranks, launch.host_limits(), args.oversubscribe, given=args.np is not None)
        progress = sys.stderr.isatty() and args.progress is not False
        plan = build_plan(args, ranks)
        return orchestrate.self_launch(plan, argv, ranks, bool(args.out), progress, args.append)
    launch.check_launched()
    if who != launch.SRUN:  # srun's own check comes before MPI_Init (orchestrate.run_ranks)
        launch.check_foreign_launch()
    make_plan = launch.explain_world_of_one(lambda ranks: build_plan(args, ranks))
    # A kernel that calls MPI from several threads (latency-mt) needs MPI_THREAD_MULTIPLE from MPI_Init on.
    threaded = any(KERNELS[name].mpi_threads for name in args.kernel or [] if name in KERNELS)
    return orchestrate.run_ranks(make_plan, who, args.hugepages, args.append, "multiple" if threaded else None)


def cmd_serve(args, argv: list[str]) -> int:
    from fabricbench.launch import peer

    caps = peer.Caps(
        args.max_timeout, args.max_iterations, args.max_warmup, args.max_window, args.max_bytes, args.max_session
    )
    options = transports.transport_options(args, "serve")
    return peer.serve(args.address, args.port, options, args.handshake_timeout, caps, peer.token_from(args.token))


def cmd_doctor(args, argv: list[str]) -> int:
    from fabricbench.launch import doctor

    return doctor.doctor(as_json=args.json)


def _run_out(words: list[str]) -> str | None:
    """The --out of ``fabricbench run WORDS``, for check's ``-- run``: words run would refuse are refused now."""
    parser = build_parser()
    parsed, extra = parser.parse_known_args(["run", *words])
    if extra:
        parser.refuse_unrecognized(parsed, extra, " for run")  # names no value: one may be a --token's
    return parsed.out


def _junit_among(target: list[str], junit: str | None) -> tuple[list[str], str | None]:
    """check's words after THRESHOLDS (argparse leaves them all to the target) without a --junit FILE among them,
    and that FILE: ``check T.toml RUN --junit F`` as ``check --junit F T.toml RUN``. Words after ``--`` are run's."""
    end = target.index("--") if "--" in target else len(target)
    words, rest = list(target[:end]), target[end:]
    for at, word in enumerate(words):
        if word == "--junit" or word.startswith("--junit="):
            given = word.partition("=")[2] if "=" in word else (words[at + 1] if at + 1 < len(words) else None)
            if junit is not None:
                raise UsageError("check --junit is given twice; give one FILE")
            if not given:
                raise UsageError("check --junit needs a FILE")
            del words[at : at + (1 if "=" in word else 2)]
            return words + rest, given
    return target, junit


def cmd_check(args, argv: list[str]) -> int:
    from fabricbench.analysis.thresholds import check

    target, junit = _junit_among(args.target, args.junit)
    return check(args.thresholds, target, _run_out, junit)


def cmd_model(args, argv: list[str]) -> int:
    from fabricbench.analysis.model import model

    _no_glyph_warnings()
    return model(
        args.runs,
        args.size,
        args.project_ranks,
        out=args.out,
        seed=args.seed,
        statistic=args.statistic,
        per_switch=args.hosts_per_switch,
        oversubscription=args.oversubscription,
    )


def cmd_osu_shims(args, argv: list[str]) -> int:
    from fabricbench.launch.osu_shims import write_shims

    written = write_shims(args.dir)
    folder = os.path.abspath(args.dir)
    print(f"{len(written)} OSU stand-ins in {folder}/: {' '.join(p.name for p in written)}")
    print(f'put them on PATH: export PATH="{folder}:$PATH"')
    return 0


def _report_after(command, args, argv: list[str]) -> int:
    """``command`` with its stdout held until it returns: a report's files are written before a line of it is
    printed, and a stdout that cannot take it (``> /dev/full``, ``>&-``) is one line and exit 1, not a traceback.
    What it printed before an error is still printed, before the error's own line."""
    from fabricbench.launch.launcher import write_all

    def put(text: str) -> None:
        if not text:
            return
        if sys.stdout is None:  # started with fd 1 closed: a file opened since may hold its number
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        try:
            fd = sys.stdout.fileno()
        except io.UnsupportedOperation:  # a stream with no descriptor (in memory): nothing below it to fail
            sys.stdout.write(text)
            return
        sys.stdout.flush()  # then straight to the descriptor: no text is left in a buffer to fail again at exit
        write_all(fd, text.encode(sys.stdout.encoding or "utf-8", "backslashreplace"))

    held = io.StringIO()
    try:
        with contextlib.redirect_stdout(held):
            code = command(args, argv)
    except BaseException:
        with contextlib.suppress(OSError, ValueError):
            put(held.getvalue())
        raise
    try:
        put(held.getvalue())
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise ConsoleFailed(f"cannot write to stdout: {exc.strerror or exc}") from None
    return code


def main(argv: list[str] | None = None) -> int:
    from fabricbench.launch.launcher import env_rank, hold_fd, say_interrupted, watch_rank

    if sys.stderr is None:  # started with 2>&- (fd 2 closed): a run goes on, and what it would say goes nowhere
        hold_fd(2)
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 - fd 2 for the rest of the process
    argv = sys.argv[1:] if argv is None else argv
    secrets_given(argv)  # before any option is parsed: an earlier option's refusal may quote a --token's value
    rank_watch = watch_rank()
    try:
        if argv[:1] == ["osu"]:  # a shim: OSU's command line, translated to a run (osu_shims)
            from fabricbench.launch.osu_shims import translate

            argv = translate(argv[1:])
            if argv is None:  # --help or -v, answered
                return 0
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra and args.func in (cmd_compare, cmd_model) and not any(e.startswith("-") for e in extra):
            args.runs += extra  # `compare A --out DIR B`: runs on both sides of an option
        elif extra:
            parser.refuse_unrecognized(args, extra)
        if args.func in (cmd_compare, cmd_model, cmd_check, cmd_doctor, cmd_osu_shims):
            return _report_after(args.func, args, argv)
        return args.func(args, argv)
    except FabricbenchError as exc:
        if env_rank() == 0 and str(exc):  # every rank sees the same bad input; one says so, never quoting the token
            # One line whatever the error quotes: a server's refusal, a file's contents (printable).
            print(f"fabricbench: error: {printable(masked_text(str(exc)), LINE)}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:  # outside a run's own handling (runner.execute)
        if rank_watch:
            rank_watch.stop()  # ends every rank
        say_interrupted(env_rank())
        return 130
    except BrokenPipeError:
        # The reader (head, less) went away: stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    finally:
        if rank_watch:
            rank_watch.close()
