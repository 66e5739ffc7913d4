"""Rank 0's sink for rows: the table on disk, the console and progress."""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

from fabricbench.errors import ConsoleClosed
from fabricbench.report import console, osu
from fabricbench.results import TableWriter, write_metadata, write_parquet


class Reporter:
    def __init__(self, plan, out_dir: Path, metadata: dict, ranks: int, stream=None):
        self.plan = plan
        self.out_dir = out_dir
        self.metadata = metadata
        self.ranks = ranks
        self.stream = stream or sys.stdout
        self.writer = TableWriter(out_dir)
        self.failed_validation = 0
        write_metadata(out_dir, metadata | {"complete": False})
        self._progress = None
        if plan.progress:
            from tqdm import tqdm

            total = sum(len(step.sizes) for step in plan.steps)
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

    def add_transport(self, name: str, metadata: dict) -> None:
        """A transport's own facts (devices, settings), written to metadata.json at once."""
        self.metadata.setdefault("transports", {})[name] = metadata
        write_metadata(self.out_dir, self.metadata | {"complete": False})

    def start_step(self, step) -> None:
        if self.plan.output_format == "osu":
            pairs = self.ranks // 2 if step.kernel == "msgrate" else 1
            self._print(osu.header(step.transport, step.kernel, self.plan.window, pairs))
        else:
            title = f"{self.metadata.get('mpi_vendor', '')} {self.plan.label}".strip()
            self._print(console.header(step.transport, step.kernel, self.ranks, title))
        if self._progress:
            self._progress.set_description(f"{step.transport} {step.kernel}")

    def row(self, row: dict) -> None:
        self.writer.append(row)
        self.failed_validation += row.get("validation") == "fail"
        self._print((osu if self.plan.output_format == "osu" else console).line(row))

    def advance(self, sizes: int) -> None:
        if self._progress:
            self._progress.update(sizes)

    def close(self, complete: bool = True) -> None:
        if self._progress:
            self._progress.close()
            self._progress = None
        self.writer.close()
        finished = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        meta = self.metadata | {"complete": complete, "finished_utc": finished, "rows": self.writer.rows}
        write_metadata(self.out_dir, meta)
        parquet = write_parquet(self.out_dir, meta)
        if self.failed_validation:
            print(f"fabricbench: validation failed in {self.failed_validation} rows", file=sys.stderr)
        if self.plan.output_format != "none":
            files = ", ".join(p.name for p in (self.writer.csv_path, parquet) if p)
            print(f"# {self.writer.rows} rows in {self.out_dir}/ ({files}, metadata.json)", file=sys.stderr)
