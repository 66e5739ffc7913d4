"""Rank 0's sink for rows: the table on disk, the console and progress."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import sys
from pathlib import Path

from fabricbench.errors import ConsoleClosed
from fabricbench.measure.results import (
    ResultsError,
    TableWriter,
    earlier_runs,
    write_json,
    write_metadata,
    write_parquet,
)
from fabricbench.measure.schema import PREVIOUS_RUNS
from fabricbench.report import congestion, console, osu
from fabricbench.run.patterns import PLACEMENT_KEY, pattern_of


class Reporter:
    """The table on disk and the console, for rank 0.

    Creating it raises ResultsError when the table cannot be started. Later a
    failure to write is kept in ``failure`` instead of raised, and nothing
    more is written: the runner hands it to every rank at the next size, so
    all ranks stop together and rank 0 says why.
    """

    def __init__(self, plan, out_dir: Path, metadata: dict, ranks: int, stream=None):
        self.plan = plan
        self.out_dir = out_dir
        self.metadata = metadata
        self.ranks = ranks
        self.stream = stream or sys.stdout
        self.failure: ResultsError | None = None
        previous = earlier_runs(out_dir)  # an --append folder keeps every run's metadata
        if previous:
            self.metadata[PREVIOUS_RUNS] = previous
        self.writer = TableWriter(out_dir)
        self.failed_validation = 0
        self.pair_rows: list[dict] = []  # the all-pairs kernels' rows, for the verdict at the end
        self.congestion_rows: list[dict] = []  # the congestion kernel's rows, for the key results at the end
        self._osu_columns = osu.Columns.from_plan(plan)
        try:
            write_metadata(out_dir, metadata | {"complete": False})
        except ResultsError:
            self.writer.discard()
            raise
        self._progress = None
        if plan.progress:
            from tqdm import tqdm

            total = sum(len(entry.step.sizes) for entry in plan.schedule())
            self._progress = tqdm(total=total, unit="size", file=sys.stderr, leave=False)

    def _print(self, text: str) -> None:
        if self.plan.output_format == "none":
            return
        try:
            if self._progress:
                self._progress.write(text, file=self.stream)
            else:
                print(text, file=self.stream, flush=True)
        except BrokenPipeError:
            # Nothing more can be shown; the rows so far are on disk. Later writes go nowhere.
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.stream.fileno())
            gone = f"the reader of the console table went away; the rows so far are in {self.out_dir}/"
            raise ConsoleClosed(gone) from None

    def _fail(self, exc: ResultsError) -> None:
        self.failure = ResultsError(f"{exc} ({self.writer.rows} rows written before it are kept)")

    def add_transport(self, name: str, metadata: dict) -> None:
        """A transport's own facts (devices, settings), written to metadata.json at once."""
        self._add_metadata("transports", {**self.metadata.get("transports", {}), name: metadata})

    def _add_metadata(self, key: str, value) -> None:
        """One more entry of metadata.json, written at once."""
        self.metadata[key] = value
        if self.failure:
            return
        try:
            write_metadata(self.out_dir, self.metadata | {"complete": False})
        except ResultsError as exc:
            self._fail(exc)

    def start_step(self, step, repeat: int = 0, ranks: int | None = None) -> None:
        """A step's header; ``repeat`` (0-based) is named when the plan repeats, ``ranks`` when a subset runs it."""
        ranks = ranks or self.ranks
        if self.plan.output_format == "osu":
            pairs = ranks // 2 if step.kernel == "msgrate" else 1
            self._print(osu.header(step.transport, step.kernel, self.plan.window, pairs, self._osu_columns))
        else:
            title = f"{self.metadata.get('mpi_vendor', '')} {self.plan.label}".strip()
            if self.plan.repeat > 1:
                title = f"{title}, repeat {repeat + 1} of {self.plan.repeat}".lstrip(", ")
            row_columns = pattern_of(step.kernel_def).columns
            self._print(console.header(step.transport, step.kernel, ranks, title, row_columns))
        if self._progress:
            self._progress.set_description(f"{step.transport} {step.kernel}")

    def row(self, row: dict) -> None:
        if self.failure:
            return
        placement = row.pop(PLACEMENT_KEY, None)
        if placement is not None:  # where the congestion kernel put its canaries and congestors
            self._add_metadata("congestion", placement)
        try:
            self.writer.append(row)
        except ResultsError as exc:
            self._fail(exc)
            return
        self.failed_validation += row.get("validation") == "fail"
        if row.get("src_rank") not in (None, ""):
            self.pair_rows.append(row)
        if row.get("kernel") == "congestion":
            self.congestion_rows.append(row)
        self._print(osu.line(row, self._osu_columns) if self.plan.output_format == "osu" else console.line(row))

    def advance(self, sizes: int) -> None:
        if self._progress:
            self._progress.update(sizes)

    def close(self, complete: bool = True) -> None:
        """The final metadata, then the Parquet copy; after a failure to write, only the metadata, if it fits."""
        if self._progress:
            self._progress.close()
            self._progress = None
        self.writer.close()
        finished = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        meta = self.metadata | {
            "complete": complete and not self.failure,
            "finished_utc": finished,
            "rows": self.writer.rows,
        }
        if self.failure:
            with contextlib.suppress(ResultsError):
                write_metadata(self.out_dir, meta)
            return
        try:
            write_metadata(self.out_dir, meta)
            parquet = write_parquet(self.out_dir, meta)
        except ResultsError as exc:
            self._fail(exc)
            return
        if self.pair_rows:
            self._pairs_verdict()
        for line in congestion.key_results(self.congestion_rows):
            self._print(line)
        if self.failed_validation:
            print(f"fabricbench: validation failed in {self.failed_validation} rows", file=sys.stderr)
        if self.plan.output_format != "none":
            files = ", ".join(p.name for p in (self.writer.csv_path, parquet) if p)
            print(f"# {self.writer.rows} rows in {self.out_dir}/ ({files}, metadata.json)", file=sys.stderr)

    def _pairs_verdict(self) -> None:
        """The all-pairs verdict: verdict.json beside the table, the closing list on the console, or (--json) the
        verdict itself on stdout."""
        from fabricbench.measure.verdict import VERDICT_NAME, summary_lines, verdict

        pairs = self.plan.pairs
        found = verdict(self.pair_rows, pairs.outlier_z, self.plan.run_id, pairs.outlier_floor)
        try:
            write_json(self.out_dir / VERDICT_NAME, found)
        except ResultsError as exc:
            self._fail(exc)
            return
        if pairs.json:
            print(json.dumps(found, indent=2), file=self.stream, flush=True)
        else:
            for line in summary_lines(found):
                self._print(line)
