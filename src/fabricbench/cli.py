"""Command line: one small function per subcommand, plain argparse."""

from __future__ import annotations

import argparse
import datetime
import os
import secrets
import socket
import sys

# numpy's OpenBLAS starts a thread per core that spins for a while after import. fabricbench
# never calls BLAS, and on a small node that thread steals the CPU of the rank being timed,
# right when the first sizes run. Set before numpy is first imported; a user's own setting
# wins, and the metadata records it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from fabricbench import __version__, transports
from fabricbench.argtypes import names, port_number, seconds, whole_number
from fabricbench.errors import FabricbenchError, UsageError
from fabricbench.kernels import KERNELS, get_kernel
from fabricbench.orchestrate import RUN_ID_VAR
from fabricbench.plan import Plan, Step, kernel_sizes, parse_size_range
from fabricbench.transports import TRANSPORTS, check_transport, preflight, supported_kernels

DEFAULT_SUITE_MAX_TIME = 0.2  # seconds per size keep the default sweep (transports.default_suite) to about a minute
DEFAULT_SERVE_PORT = 18600


class _Parser(argparse.ArgumentParser):
    """argparse, but bad input is one line and exit 2, on every rank alike."""

    def error(self, message: str):
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fabricbench", description="Measure what an interconnect really delivers.")
    parser.add_argument("--version", action="version", version=f"fabricbench {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run kernels and write a tidy table")
    run.add_argument("-t", "--transport", type=names, help=f"comma list of: {', '.join(TRANSPORTS)}")
    run.add_argument("-k", "--kernel", type=names, help=f"comma list of: {', '.join(KERNELS)}")
    run.add_argument(
        "-m",
        "--message-size",
        type=parse_size_range,
        metavar="[MIN:]MAX",
        help="message sizes, powers of two from MIN to MAX (e.g. 0:4M)",
    )
    run.add_argument("-i", "--iterations", type=whole_number("iterations", 1), help="timed iterations per size")
    run.add_argument("-x", "--warmup", type=whole_number("warm-up", 0), help="untimed iterations per size")
    run.add_argument(
        "-W", "--window", type=whole_number("window", 1), default=64, help="messages in flight (default 64)"
    )
    run.add_argument("--max-time", type=seconds("--max-time"), help="seconds per size; lowers the iteration count")
    run.add_argument("-c", "--validate", action="store_true", help="check received data outside the timed region")
    run.add_argument("--out", help="results directory (default results/RUN_ID)")
    run.add_argument("--label", default="", help="a name for this run in tables and plots")
    run.add_argument(
        "--format",
        dest="output_format",
        choices=["table", "osu", "none"],
        default="table",
        help="console output: readable table, OSU's text layout, or nothing",
    )
    run.add_argument(
        "--timeout",
        type=seconds("--timeout"),
        default=120.0,
        help="seconds without progress before giving up (default 120)",
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
        default=2,
        help="local ranks to start when run outside a launcher (default 2)",
    )
    run.add_argument(
        "--loop",
        choices=["auto", "c", "python"],
        default="auto",
        help="time the kernels in C (no interpreter cost per call) or in Python (like-for-like with mpi4py), "
        "for the transports that have both, on every rank; auto: C where every rank has it (default)",
    )
    run.add_argument("--peer", metavar="HOST:PORT", help="run as rank 0 against `fabricbench serve` there, without MPI")
    transports.add_arguments(run, "run")
    run.set_defaults(func=cmd_run)

    serve = sub.add_parser("serve", help="be rank 1 for `fabricbench run --peer` clients, one at a time, without MPI")
    serve.add_argument("--address", default="0.0.0.0", help="address to listen on (default: all)")
    serve.add_argument(
        "--port", type=port_number, default=DEFAULT_SERVE_PORT, help=f"port (default {DEFAULT_SERVE_PORT})"
    )
    serve.add_argument(
        "--timeout",
        type=seconds("--timeout"),
        default=30.0,
        help="seconds to wait for a client's handshake (default 30); a session then uses the client's --timeout",
    )
    transports.add_arguments(serve, "serve")
    serve.set_defaults(func=cmd_serve)

    compare = sub.add_parser("compare", help="put finished runs side by side: ratios to the first, CSV and plots")
    compare.add_argument("runs", nargs="+", metavar="RUN", help="result directories or CSV/Parquet tables; first = A")
    compare.add_argument("--out", help="directory for comparison.csv and the PNG plots")
    compare.add_argument(
        "--metric",
        type=names,
        help="comma list of columns to compare, e.g. p50,p99,bw,busbw (default: p50 latency, bw, busbw)",
    )
    compare.set_defaults(func=cmd_compare)

    doctor = sub.add_parser("doctor", help="what can run here: every transport, the MPI, the C loops, the devices")
    doctor.add_argument("--json", action="store_true", help="one JSON object for scripts instead of the table")
    doctor.set_defaults(func=cmd_doctor)
    return parser


def _steps(args) -> list[Step]:
    if not args.transport and not args.kernel:
        pairs = transports.default_suite()
    elif not args.transport:
        pairs = [(transports.natural_transport(k), [k]) for k in args.kernel]
    else:
        pairs = [(t, args.kernel or sorted(supported_kernels(t))) for t in args.transport]
    steps = []
    for transport, kernels in pairs:
        check_transport(transport)
        for name in kernels:
            steps.append(Step(transport, name, kernel_sizes(get_kernel(name), args.message_size)))
    return steps


def build_plan(args, ranks: int) -> Plan:
    """Everything that can be checked before a byte moves; raises UsageError."""
    steps = _steps(args)
    default_suite = not args.transport and not args.kernel
    for step in steps:
        if step.kernel in supported_kernels(step.transport):
            step.spec.check_ranks(ranks)
    options = transports.transport_options(args, "run")
    for transport in dict.fromkeys(step.transport for step in steps):
        preflight(transport, options)
    # A self-launching parent names the run once; its ranks keep that name (RUN_ID_VAR).
    run_id = os.environ.get(RUN_ID_VAR) or (
        f"{datetime.datetime.now():%Y%m%d-%H%M%S}-{socket.gethostname()}-{secrets.token_hex(2)}"
    )
    progress = args.progress if args.progress is not None else os.environ.get("FABRICBENCH_PROGRESS") == "1"
    return Plan(
        steps=steps,
        iterations=args.iterations,
        warmup=args.warmup,
        window=args.window,
        max_time=args.max_time or (DEFAULT_SUITE_MAX_TIME if default_suite else None),
        validate=args.validate,
        timeout=args.timeout,
        out_dir=args.out or os.path.join("results", run_id),
        run_id=run_id,
        label=args.label,
        output_format=args.output_format,
        progress=progress,
        transport_options=options,
    )


def cmd_compare(args, argv: list[str]) -> int:
    from fabricbench.report.compare import compare

    return compare(args.runs, out=args.out, metric_names=args.metric)


def cmd_run(args, argv: list[str]) -> int:
    from fabricbench import launch, orchestrate

    if args.peer:  # no launcher and no MPI: this process is rank 0 of two
        from fabricbench.control import peer

        args.transport = args.transport or [peer.default_transport()]
        return peer.run_client(build_plan(args, 2), args.peer, args.hugepages)
    who = launch.launcher()
    if who is None:
        progress = sys.stderr.isatty() and args.progress is not False
        return orchestrate.self_launch(build_plan(args, args.np), argv, args.np, bool(args.out), progress)
    return orchestrate.run_ranks(lambda ranks: build_plan(args, ranks), who, args.hugepages)


def cmd_serve(args, argv: list[str]) -> int:
    from fabricbench.control import peer

    return peer.serve(args.address, args.port, args.timeout, transports.transport_options(args, "serve"))


def cmd_doctor(args, argv: list[str]) -> int:
    from fabricbench import doctor

    return doctor.doctor(as_json=args.json)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        parser = build_parser()
        args, extra = parser.parse_known_args(argv)
        if extra and args.func is cmd_compare and not any(e.startswith("-") for e in extra):
            args.runs += extra  # `compare A --out DIR B`: runs on both sides of an option
        elif extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        return args.func(args, argv)
    except FabricbenchError as exc:
        from fabricbench.launch import env_rank

        if env_rank() == 0:  # every rank sees the same bad input; one says so
            print(f"fabricbench: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("fabricbench: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader (head, less) went away: stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
