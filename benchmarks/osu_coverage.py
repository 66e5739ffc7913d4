"""How much of OSU Micro-Benchmarks 7.4 fabricbench stands in for: a markdown table of its 77 MPI programs.

    python benchmarks/osu_coverage.py            # the table, on stdout
    python benchmarks/osu_coverage.py --check    # also exit 1 when a shim lacks a kernel or a checked layout

Every cell is read from the registries, never from a list kept here: the programs and their option strings from
``fabricbench.launch.osu_programs.PROGRAMS``, the shims and what each option becomes from
``fabricbench.launch.osu_shims`` (BENCHMARKS, Benchmark.treatment), the kernels from the shim's transport, and the
layouts the test checks against OSU's printf formats from ``tests/test_osu_format.py`` (LAYOUT_OF and the command
lines it runs each shim's layout under).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]

from fabricbench.launch.osu_programs import FAMILY_SIZES, PROGRAMS  # noqa: E402
from fabricbench.launch.osu_shims import BENCHMARKS, HONOURED, NO_EFFECT, REFUSED, Benchmark  # noqa: E402
from fabricbench.measure.kernels import KERNELS  # noqa: E402
from fabricbench.transports import transport_class  # noqa: E402


def layout_checks() -> tuple[dict, dict[str, int]]:
    """The layout test's description of each program (LAYOUT_OF) and how many command lines it checks per shim."""
    import test_osu_format  # the test module: its tables, not a copy of them

    counts: dict[str, int] = {}
    for name, _ in test_osu_format._layout_cases():
        counts[name] = counts.get(name, 0) + 1
    return test_osu_format.LAYOUT_OF, counts


def kernel_of(name: str) -> str:
    """The kernel that runs the program: its shim's, else a kernel named as the program (a shim still to write)."""
    if name in BENCHMARKS:
        bench = BENCHMARKS[name]
        return bench.kernel if bench.kernel in transport_class(bench.transport).kernels else ""
    return name.removeprefix("osu_") if name.removeprefix("osu_") in KERNELS else ""


def options(bench: Benchmark) -> dict[str, list[str]]:
    """The program's option letters by what they become here."""
    kinds: dict[str, list[str]] = {HONOURED: [], NO_EFFECT: [], REFUSED: []}
    for letter in dict.fromkeys(bench.letters):
        kinds[bench.treatment(letter).kind].append(letter)
    return kinds


def table(layouts: dict, checked: dict[str, int]) -> tuple[list[str], dict[str, int]]:
    lines = [
        "| family | program | OSU 7.4 option string (CPU build) | kernel | shim | layout checked | honoured | "
        "no effect | refused |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    totals = {"kernel": 0, "shim": 0, "layout": 0}
    for name, program in PROGRAMS.items():
        kernel = kernel_of(name)
        bench = BENCHMARKS.get(name)
        layout = f"{layouts[name][0]}, {checked.get(name, 0)} command lines" if name in layouts and bench else ""
        kinds = options(bench) if bench else {HONOURED: [], NO_EFFECT: [], REFUSED: []}
        totals["kernel"] += bool(kernel)
        totals["shim"] += bool(bench)
        totals["layout"] += bool(layout and checked.get(name))
        cells = [
            program.family,
            f"`{name}`",
            f"`{program.optstring}`" if program.optstring else "(none)",
            f"`{kernel}`" if kernel else "—",
            "yes" if bench else "—",
            layout or "—",
            " ".join(f"-{c}" for c in kinds[HONOURED]) or "—",
            " ".join(f"-{c}" for c in kinds[NO_EFFECT]) or "—",
            " ".join(f"-{c}" for c in kinds[REFUSED]) or "—",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines, totals


def reasons() -> list[str]:
    """Why each option is refused, or has no effect, in the shims that have it: one line per distinct reason."""
    seen: dict[tuple[str, str, str], list[str]] = {}
    for bench in BENCHMARKS.values():
        for letter in dict.fromkeys(bench.letters):
            treatment = bench.treatment(letter)
            if treatment.kind != HONOURED:
                seen.setdefault((letter, treatment.kind, treatment.text), []).append(bench.name)
    lines = ["| option | | why | programs |", "|---|---|---|---|"]
    for (letter, kind, text), names in sorted(seen.items()):
        shown = "every shim that takes it" if len(names) > 3 else ", ".join(f"`{n}`" for n in names)
        lines.append(f"| -{letter} | {kind} | {text} | {shown} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a shim lacks a kernel or a checked layout")
    args = parser.parse_args(argv)
    layouts, checked = layout_checks()
    lines, totals = table(layouts, checked)
    total = sum(FAMILY_SIZES.values())
    assert total == len(PROGRAMS), f"the manifest holds {len(PROGRAMS)} programs, its families {total}"
    print(f"# OSU Micro-Benchmarks 7.4: {totals['shim']} of {total} MPI programs have a fabricbench shim\n")
    print(
        f"{totals['kernel']} of {total} have a kernel, {totals['shim']} a shim, {totals['layout']} a layout the "
        "test checks against OSU's printf formats.\n"
    )
    print("\n".join(lines))
    print("\n## Options refused, or without effect, and why\n")
    print("\n".join(reasons()))
    lacking = [n for n in BENCHMARKS if not kernel_of(n) or not checked.get(n) or n not in layouts]
    if args.check and lacking:
        print(f"\nshims without a kernel or a checked layout: {', '.join(lacking)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
