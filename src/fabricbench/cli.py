"""Command line: one small function per subcommand, plain argparse."""

from __future__ import annotations

import argparse
import datetime
import os
import secrets
import socket
import sys

# numpy's OpenBLAS starts a thread per core that spins for a while after import. fabricbench
# never calls BLAS, and on a small node that thread steals the CPU of the rank being timed
# (measured: about 0.1 s of spinning per rank, right when the first sizes run). Set before
# numpy is first imported; a user's own setting wins, and the metadata records it.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from fabricbench import __version__, rdma
from fabricbench.argtypes import names, seconds, whole_number
from fabricbench.errors import FabricbenchError, UsageError
from fabricbench.kernels import KERNELS, get_kernel
from fabricbench.plan import Plan, Step, kernel_sizes, parse_size_range
from fabricbench.transports import TRANSPORTS, check_transport, preflight, supported_kernels

# The main job: what `fabricbench run` measures when told nothing.
DEFAULT_SUITE = [
    ("mpi", ["latency", "bw", "bibw", "allreduce", "allgather", "alltoall", "bcast", "reduce_scatter", "barrier"]),
    ("mpi-rma", ["put", "get", "put-bw"]),
    ("tcp", ["latency", "bw", "allreduce"]),
]
DEFAULT_SUITE_MAX_TIME = 0.2  # seconds per size keep the default sweep to about a minute
DEFAULT_SERVE_PORT = 18600
RUN_ID_VAR = "FABRICBENCH_RUN_ID"
NATURAL_TRANSPORT = {"put": "mpi-rma", "get": "mpi-rma", "put-bw": "mpi-rma", "get-bw": "mpi-rma"}


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
    run.add_argument(
        "--method",
        default="persistent",
        choices=["persistent", "blocking"],
        help="MPI point-to-point loop: persistent requests (default) or plain blocking calls",
    )
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
    run.add_argument("--peer", metavar="HOST:PORT", help="run as rank 0 against `fabricbench serve` there, without MPI")
    _add_tcp_options(run)
    run.add_argument(
        "--tcp-loop",
        choices=["auto", "c", "python"],
        default="auto",
        help="tcp latency/bw/msgrate: time them in the C loop (no interpreter cost per message) or in Python "
        "(like-for-like with mpi4py), on every rank; auto: C where it was built (default)",
    )
    rdma.add_arguments(run)
    run.set_defaults(func=cmd_run)

    serve = sub.add_parser("serve", help="be rank 1 for `fabricbench run --peer` clients, one at a time, without MPI")
    serve.add_argument("--address", default="0.0.0.0", help="address to listen on (default: all)")
    serve.add_argument("--port", type=_port, default=DEFAULT_SERVE_PORT, help=f"port (default {DEFAULT_SERVE_PORT})")
    serve.add_argument(
        "--timeout",
        type=seconds("--timeout"),
        default=30.0,
        help="seconds to wait for a client's handshake (default 30); a session then uses the client's --timeout",
    )
    _add_tcp_options(serve)
    rdma.add_serve_arguments(serve)
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
    return parser


def _port(text: str) -> int:
    value = whole_number("port", 0)(text)
    if value > 65535:
        raise UsageError(f"port must be at most 65535, got {value}")
    return value


def _add_tcp_options(parser: argparse.ArgumentParser) -> None:
    tcp = parser.add_argument_group("tcp transport")
    tcp.add_argument("--tcp-address", help="address to bind and advertise for data connections (default: all)")
    tcp.add_argument("--tcp-interface", help="bind to this interface's IPv4 address instead, e.g. eth0")
    tcp.add_argument("--tcp-port", type=_port, help="listening port for data; rank r uses PORT+r (default: any free)")


def tcp_options(args) -> dict:
    """The tcp transport's settings from the command line, as Plan.transport_options['tcp']."""
    from fabricbench.transports.tcp import c_loop_built

    loop = getattr(args, "tcp_loop", "auto")  # a run's choice; serve takes the client's
    if loop == "c" and not c_loop_built():
        raise UsageError("--tcp-loop c: this install has no C loop (it was built without a C compiler)")
    given = {"address": args.tcp_address, "interface": args.tcp_interface, "port": args.tcp_port}
    if loop != "auto":
        given["loop"] = loop
    return {key: value for key, value in given.items() if value is not None}


def _steps(args) -> list[Step]:
    if not args.transport and not args.kernel:
        pairs = DEFAULT_SUITE
    elif not args.transport:
        pairs = [(NATURAL_TRANSPORT.get(k, "mpi"), [k]) for k in args.kernel]
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
    verbs_options = rdma.options(args)
    for transport in dict.fromkeys(step.transport for step in steps):
        preflight(transport)
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
        method=args.method,
        timeout=args.timeout,
        out_dir=args.out or os.path.join("results", run_id),
        run_id=run_id,
        label=args.label,
        output_format=args.output_format,
        progress=progress,
        transport_options={"tcp": tcp_options(args), "verbs": verbs_options},
    )


def cmd_compare(args, argv: list[str]) -> int:
    from fabricbench.report.compare import compare

    return compare(args.runs, out=args.out, metric_names=args.metric)


def cmd_run(args, argv: list[str]) -> int:
    from fabricbench import launch
    from fabricbench.results import prepare_out_dir

    if args.peer:  # no launcher and no MPI: this process is rank 0 of two
        from fabricbench import peer

        args.transport = args.transport or ["tcp"]
        return peer.run_client(build_plan(args, 2), args.peer, args.hugepages)
    who = launch.launcher()
    if who is None:
        # Started alone: check what we can here, then start local ranks.
        plan = build_plan(args, args.np)
        prepare_out_dir(plan.out_dir)
        os.environ[RUN_ID_VAR] = plan.run_id
        child_argv = list(argv)
        if not args.out:
            child_argv += ["--out", plan.out_dir]
        return launch.relaunch(child_argv, args.np, progress=sys.stderr.isatty() and args.progress is not False)
    return _run_ranks(args, who)


def _run_ranks(args, who: str) -> int:
    import json

    from mpi4py import MPI

    from fabricbench.control import MPIControl

    ctrl = MPIControl(MPI.COMM_WORLD)
    envelope = None
    if ctrl.rank == 0:
        try:
            from fabricbench.results import prepare_out_dir

            plan = build_plan(args, ctrl.size)
            prepare_out_dir(plan.out_dir)
            envelope = {"plan": json.loads(plan.to_json())}
        except FabricbenchError as exc:
            envelope = {"error": str(exc), "code": exc.exit_code}
    envelope = json.loads(ctrl.bcast_bytes(json.dumps(envelope).encode() if ctrl.rank == 0 else None))
    if "error" in envelope:
        if ctrl.rank == 0:
            print(f"fabricbench: error: {envelope['error']}", file=sys.stderr)
        return int(envelope["code"])
    plan = Plan.from_json(json.dumps(envelope["plan"]).encode())
    return execute_plan(plan, ctrl, who, args.hugepages)


def cmd_serve(args, argv: list[str]) -> int:
    from fabricbench import peer

    host = {"tcp": tcp_options(args), "verbs": rdma.host_options(args)}
    return peer.serve(args.address, args.port, args.timeout, host)


def execute_plan(plan: Plan, ctrl, who: str | None, hugepages: str | None, extra_metadata: dict | None = None) -> int:
    from pathlib import Path

    from fabricbench import env
    from fabricbench.runner import execute

    if hugepages:
        env.set_numpy_hugepages(hugepages == "on")
    ranks = ctrl.gather_json(env.rank_info())
    reporter = None
    if ctrl.rank == 0:
        from fabricbench.report.reporter import Reporter

        metadata = env.run_metadata(plan, ranks, who)
        metadata.update(extra_metadata or {})
        if any(s.transport.startswith("mpi") for s in plan.steps) or who:
            metadata.update(env.mpi_info())
        reporter = Reporter(plan, Path(plan.out_dir), metadata, ctrl.size)
    execute(plan, ctrl, reporter)
    if reporter:
        reporter.close()
        return 1 if reporter.failed_validation else 0
    return 0


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
