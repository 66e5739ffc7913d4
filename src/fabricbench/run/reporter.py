"""Rank 0's sink for rows: the table on disk, the console and progress."""

from __future__ import annotations

import contextlib
import datetime
import errno
import os
import sys
from pathlib import Path

from fabricbench.errors import ConsoleClosed, ConsoleFailed, FabricbenchError
from fabricbench.launch.metadata import SharedKernel
from fabricbench.measure.kernels import get_kernel
from fabricbench.measure.plan import NCCL_FORMAT, NO_FORMAT, OSU_FORMAT
from fabricbench.measure.results import (
    CSV_SIZE_ROWS,
    PartSpool,
    ResultsError,
    TableWriter,
    earlier_runs,
    write_metadata,
    write_parquet,
)
from fabricbench.measure.rows import RowBatch
from fabricbench.measure.schema import CSV_NAME, PARQUET_NAME, PARQUET_ONLY_ROWS, PREVIOUS_RUNS
from fabricbench.report import nccl, osu
from fabricbench.run.patterns import METADATA, every_pattern, pattern_of, row_pattern
from fabricbench.transports.placement import in_place_flags

CONSOLE_SIZE_ROWS = 1024  # more rows than this in a size (all pairs of 33 ranks up): one line, not one a row


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
        self._console_errno = 0 if self.stream else errno.EBADF  # sys.stdout is None where fd 1 was closed
        previous = earlier_runs(out_dir)  # an --append folder keeps every run's metadata
        if previous:
            self.metadata[PREVIOUS_RUNS] = previous
        self.writer = TableWriter(out_dir)
        self.spool = PartSpool(out_dir)  # the rows of sizes too large for the CSV (CSV_SIZE_ROWS)
        self.failed_validation = 0
        self.kept: dict[type, list[dict]] = {}  # {pattern: the rows it keeps for its end-of-run step}
        self._shared_kernel = SharedKernel.of(metadata)  # a row between hosts of one kernel says so in its note
        self._osu_columns = osu.Columns.from_plan(plan)
        self._osu_pending_header = ""  # a neighbourhood collective's OSU header, said with its first row
        self._osu_step: tuple | None = None  # the OSU step under way: (kernel, ranks, its rows' validations)
        self._nccl_step: nccl.Step | None = None  # --format nccl's step under way: its lines as its rows arrive
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

    def say(self, text: str) -> None:
        """A line on the console, unless the plan prints none."""
        if self.plan.output_format == NO_FORMAT or self._console_errno:
            return
        try:
            if self._progress:
                self._progress.write(text, file=self.stream)
            else:
                print(text, file=self.stream, flush=True)
        except OSError as exc:
            # The console is only a view of the table: the run goes on, and console_failure says so at the end.
            # What is left in the stream's buffer, and any later write, goes nowhere.
            self._console_errno = exc.errno or errno.EIO
            with contextlib.suppress(OSError, ValueError):
                null = os.open(os.devnull, os.O_WRONLY)
                os.dup2(null, self.stream.fileno())
                os.close(null)

    def console_failure(self) -> FabricbenchError | None:
        """After close(): a console that could not be written, as the error the run ends with (None when it could).
        A reader gone (EPIPE) ends silently, exit 141; a full disk or a closed stdout in one line, exit 1."""
        if not self._console_errno:
            return None
        if self._console_errno == errno.EPIPE:
            return ConsoleClosed("")
        reason = os.strerror(self._console_errno)
        return ConsoleFailed(
            f"cannot write to stdout: {reason}; the run finished: {self.written} rows in {self.out_dir}/"
        )

    @property
    def written(self) -> int:
        """The rows on disk: the CSV's and the Parquet parts'."""
        return self.writer.rows + self.spool.rows

    def fail(self, exc: ResultsError) -> None:
        """Keep a failure to write: nothing more is written, and every rank stops at the next size."""
        self.failure = ResultsError(f"{exc} ({self.written} rows written before it are kept)")

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
            self.fail(exc)

    def start_step(self, step, repeat: int = 0, ranks: int | None = None) -> None:
        """A step's header; ``repeat`` (0-based) is named when the plan repeats, ``ranks`` when a subset runs it."""
        ranks = ranks or self.ranks
        self._osu_step_ends()
        self._nccl_step_ends()
        if self.plan.output_format == NCCL_FORMAT:
            placements = len(in_place_flags(self.plan.transport_options))  # a size's rows: its placements
            args = (self.metadata, self.plan, step.sizes, ranks, placements)
            lines, self._nccl_step = nccl.start(step.kernel_def, step.transport, *args)
            self.say("\n".join(lines))
        elif self.plan.output_format == OSU_FORMAT:
            self._osu_step = (step.kernel, ranks, [])
            pairs = pattern_of(step.kernel_def).pairs(step.kernel_def, ranks)
            text = osu.header(step.transport, step.kernel, self.plan.window, pairs, self._osu_columns)
            if osu.prints_topology(step.kernel):  # OSU's lines about the graph come first: said with the first row
                self._osu_pending_header = text
            else:
                self.say(text)
        else:
            title = f"{self.metadata.get('mpi_vendor', '')} {self.plan.label}".strip()
            if self.plan.repeat > 1:
                title = f"{title}, repeat {repeat + 1} of {self.plan.repeat}".lstrip(", ")
            self.say(pattern_of(step.kernel_def).header(step.transport, step.kernel, ranks, title))
        if self._progress:
            self._progress.set_description(f"{step.transport} {step.kernel}")

    def row(self, row: dict) -> None:
        if self.failure:
            return
        for key, value in row.pop(METADATA, {}).items():  # what a pattern records once per run (a placement)
            self._add_metadata(key, value)
        if self._shared_kernel:
            self._shared_kernel.mark(row)
        try:
            self.writer.append(row)
        except ResultsError as exc:
            self.fail(exc)
            return
        self.failed_validation += row.get("validation") == "fail"
        pattern = row_pattern(row)
        if pattern.keeps(row):
            self.kept.setdefault(pattern, []).append(row)
        if self._osu_pending_header:
            self.say(osu.with_topology(self._osu_pending_header, row))
            self._osu_pending_header = ""
        if self._osu_step:
            self._osu_step[2].append(row.get("validation", ""))
        if self.plan.output_format == NCCL_FORMAT:
            for text in self._nccl_step.row(row) if self._nccl_step else []:
                self.say(text)
            return
        self.say(osu.line(row, self._osu_columns) if self.plan.output_format == OSU_FORMAT else pattern.line(row))

    def batch(self, batch: RowBatch) -> None:
        """Some of a size's rows as columns (a pattern that hands them on phase by phase): into the CSV with the
        others, or, where the size has more than CSV_SIZE_ROWS rows, into the Parquet spool alone; on the console
        a line a row where the size has at most CONSOLE_SIZE_ROWS, else one line once its last rows are in."""
        if self.failure:
            return
        if self._shared_kernel:
            self._shared_kernel.mark_batch(batch)
        pattern = pattern_of(get_kernel(batch.columns["kernel"]))
        apart = batch.size_rows > CSV_SIZE_ROWS
        rows = [] if apart else batch.rows()
        try:
            if apart:
                self.spool.append(batch)
                if batch.last:
                    self.spool.flush()
            else:
                self.writer.append_many(rows)
        except ResultsError as exc:
            self.fail(exc)
            return
        self.kept.setdefault(pattern, [])  # its end-of-run step reads them back from the table
        self.failed_validation += batch.column("validation").count("fail")
        if batch.size_rows <= CONSOLE_SIZE_ROWS:
            for row in rows:
                self.say(pattern.line(row))
        elif batch.last:
            where = PARQUET_NAME if apart else CSV_NAME
            self.say(
                f"# {batch.size_rows:,} rows at {batch.columns['size_B']} B, one a pair, are in {where}: "
                f"more than {CONSOLE_SIZE_ROWS:,} are not printed one by one"
            )

    def _osu_step_ends(self) -> None:
        """What OSU prints after a table (the atomic programs' validation summary with -c), once its rows are in."""
        if self._osu_step:
            kernel, ranks, validations = self._osu_step
            self._osu_step = None
            footer = osu.validation_summary(kernel, self._osu_columns, validations, ranks)
            if footer:
                self.say(footer)

    def _nccl_step_ends(self) -> None:
        """nccl-tests' footer after a collective's lines (a size cut short first)."""
        if self._nccl_step:
            step, self._nccl_step = self._nccl_step, None
            self.say("\n".join(step.finish()))

    def advance(self, sizes: int) -> None:
        if self._progress:
            self._progress.update(sizes)

    def close(self, complete: bool = True) -> None:
        """The final metadata, then the Parquet copy; after a failure to write, only the metadata, if it fits."""
        if self._progress:
            self._progress.close()
            self._progress = None
        if not self.failure:
            self._osu_step_ends()
            self._nccl_step_ends()
            try:
                self.spool.flush()  # what is waiting reaches a part, even when the run was cut
            except ResultsError as exc:
                self.fail(exc)
        self.writer.close()
        finished = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        meta = self.metadata | {
            "complete": complete and not self.failure,
            "finished_utc": finished,
            "rows": self.written,
        }
        if self.spool.rows:
            meta[PARQUET_ONLY_ROWS] = self.spool.rows
        if self.failure:
            with contextlib.suppress(ResultsError):
                write_metadata(self.out_dir, meta)
            return
        try:
            write_metadata(self.out_dir, meta)
            parquet = write_parquet(self.out_dir, meta)
        except ResultsError as exc:
            self.fail(exc)
            return
        for pattern in every_pattern():  # each pattern's end-of-run step: the all-pairs verdict, key results
            if pattern in self.kept:
                pattern.finish(self.kept[pattern], self)
        if self.failed_validation:
            print(f"fabricbench: validation failed in {self.failed_validation} rows", file=sys.stderr)
        if self.plan.output_format != NO_FORMAT:
            files = ", ".join(p.name for p in (self.writer.csv_path, parquet) if p)
            earlier = self.writer.earlier_rows  # --append: the table holds them too
            added = f"{self.written:,} added; " if earlier else ""
            rows = earlier + self.written
            print(f"# {rows:,} rows in {self.out_dir}/ ({added}{files}, metadata.json)", file=sys.stderr)
