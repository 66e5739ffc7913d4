"""Timing of GPU work with CUDA events on one stream, as nccl-tests and nvbandwidth do it.

Two modes, and the row's ``sample`` column says which:

- ``loop`` (nccl-tests): an event before the first launch and one after the
  last, one wait; every iteration gets the mean. Percentiles are then flat.
- ``iteration``: an event after every launch, so each iteration has its own
  duration and the percentiles mean something; an event record per launch is
  the cost.

With ``graph`` the launches of one run (the warm-up's too) are captured into a
CUDA graph once per iteration count, and the graph is launched instead, so
the host's cost per launch leaves the small-message figure.
"""

from __future__ import annotations

from collections.abc import Callable

from fabricbench.measure.kernels import SAMPLE_LABELS

TIMINGS = ("loop", "iteration")


def sample_name(kernel_sample: str, timing: str) -> str:
    """The ``sample`` column: the kernel's word, with "(loop mean)" where every iteration got the loop's mean."""
    base = SAMPLE_LABELS[kernel_sample]
    return base if timing == "iteration" else f"{base} (loop mean)"


class EventTimer:
    """Runs ``launch`` (which enqueues one iteration's work on ``stream``) and writes each iteration's ns."""

    def __init__(self, cupy, stream, launch: Callable[[], None], timing: str, graph: bool):
        self.cupy, self.stream, self.launch = cupy, stream, launch
        self.timing, self.graph = timing, graph
        self.events: list = []  # preallocated per-iteration events, grown once to the largest count
        self.graphs: dict[int, object] = {}  # launches captured per iteration count

    def _event(self, index: int):
        while len(self.events) <= index:
            self.events.append(self.cupy.cuda.Event())
        return self.events[index]

    def _graph(self, launches: int):
        """``launches`` iterations captured on the stream (work is recorded, not run)."""
        if launches not in self.graphs:
            with self.stream:
                self.stream.begin_capture()
                for _ in range(launches):
                    self.launch()
                self.graphs[launches] = self.stream.end_capture()
        return self.graphs[launches]

    def run(self, iterations: int, times) -> None:
        if iterations <= 0:
            return
        stream = self.stream
        if self.timing == "loop":
            start, end = self._event(0), self._event(1)
            graph = self._graph(iterations) if self.graph else None
            with stream:
                start.record(stream)
                if graph is not None:
                    graph.launch(stream)
                else:
                    launch = self.launch
                    for _ in range(iterations):
                        launch()
                end.record(stream)
            end.synchronize()
            mean_ns = int(self.cupy.cuda.get_elapsed_time(start, end) * 1e6 / iterations)
            for i in range(iterations):
                times[i] = mean_ns
            return
        events = [self._event(i) for i in range(iterations + 1)]  # allocated before the timed region
        graph = self._graph(1) if self.graph else None
        with stream:
            events[0].record(stream)
            if graph is not None:
                launch_graph = graph.launch
                for i in range(iterations):
                    launch_graph(stream)
                    events[i + 1].record(stream)
            else:
                launch = self.launch
                for i in range(iterations):
                    launch()
                    events[i + 1].record(stream)
        events[iterations].synchronize()
        elapsed = self.cupy.cuda.get_elapsed_time
        for i in range(iterations):
            times[i] = int(elapsed(events[i], events[i + 1]) * 1e6)

    def close(self) -> None:
        self.graphs.clear()
        self.events.clear()
