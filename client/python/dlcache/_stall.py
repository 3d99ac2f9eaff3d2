"""The stall each job sees (issue 34): how long the training loop waits
for its next batch, against the time it spends between batches.

A loader wraps the batches it hands to the training loop in StallMeter:
`wait` is the time inside next() until the batch is handed over, `step`
the time from that hand-over to the loop's next call of next() (the loop's
own work: forward, backward, optimizer, logging). wait / (wait + step) is
the share of the loop's time lost to data loading. The meter sums both and
reports them through a callback about once a second and when the pass
ends; dlcached exports them per dataset and plan (docs/monitoring.md).

Measuring costs two perf_counter() calls per batch; a report is one C call
(dlc_report_stall) that waits for no answer and, but for a pass's last
one, for no other writer of the connection. Not thread-safe: one meter per
iterator, used by the thread that iterates.
"""

import time
from typing import Any, Callable, Iterator, Optional

__all__ = ["StallMeter"]

# Seconds between reports while batches flow.
REPORT_EVERY_S = 1.0

# report(wait_s, step_s, batches, final) -> None; final: the pass's last
# report (no batch waits: it may wait for the connection). May raise (a
# report that fails is dropped with a warning once, never failing the
# loader).
Reporter = Callable[[float, float, int, bool], Any]


class StallMeter:
    """Measures the training loop's wait and step around next().

    Use wrap(iterator) for a plain iterator, or call begin() at the start
    of __next__ and handed() just before it returns a batch. end() after
    the last batch of a pass (or when the loop stops iterating early)
    reports what is left; the time after the last hand-over is not counted
    (what the loop does between passes is no batch's step)."""

    def __init__(self, reporter: Optional[Reporter],
                 every_s: float = REPORT_EVERY_S,
                 clock: Callable[[], float] = time.perf_counter):
        self._reporter = reporter
        self._every = float(every_s)
        self._clock = clock
        self._wait = 0.0
        self._step = 0.0
        self._batches = 0
        self._asked: Optional[float] = None    # this next() began
        self._handed: Optional[float] = None   # the last batch went out
        self._last_report = clock()
        self._warned = False
        # Totals since the meter was made (tests, benchmarks).
        self.total_wait = 0.0
        self.total_step = 0.0
        self.total_batches = 0

    def begin(self) -> None:
        now = self._clock()
        if self._handed is not None:
            self._step += now - self._handed
            self._handed = None
        self._asked = now

    def handed(self) -> None:
        now = self._clock()
        if now - self._last_report >= self._every:
            # Reported before this batch is counted, so that the report's
            # own time is the loop's wait (it is inside next()), as the
            # loop itself sees it.
            self.flush(now)
            now = self._clock()
        if self._asked is not None:
            self._wait += now - self._asked
            self._asked = None
        self._batches += 1
        self._handed = now

    def end(self) -> None:
        """The pass ended (StopIteration) or was abandoned: the wait of a
        next() that found no batch counts; nothing after the last
        hand-over does."""
        now = self._clock()
        if self._asked is not None:
            self._wait += now - self._asked
            self._asked = None
        self._handed = None
        self.flush(now, final=True)

    def flush(self, now: Optional[float] = None,
              final: bool = False) -> None:
        self._last_report = self._clock() if now is None else now
        wait, step, batches = self._wait, self._step, self._batches
        if not batches and not wait and not step:
            return
        self._wait = self._step = 0.0
        self._batches = 0
        self.total_wait += wait
        self.total_step += step
        self.total_batches += batches
        if self._reporter is None:
            return
        try:
            self._reporter(wait, step, batches, final)
        except Exception as e:  # never fail the training loop for it
            if not self._warned:
                self._warned = True
                import warnings
                warnings.warn("dlcache: stall report failed (%s); the "
                              "loader goes on without it" % (e,),
                              stacklevel=2)

    def wrap(self, it: Iterator[Any]) -> Iterator[Any]:
        """Yields it's items, measured. A generator: end() runs when the
        pass ends, and when the loop drops it (close() / garbage)."""
        try:
            while True:
                self.begin()
                try:
                    item = next(it)
                except StopIteration:
                    return
                self.handed()
                yield item
        finally:
            self.end()


def client_reporter(get_client: Callable[[], Any], dataset: str,
                    plan: Callable[[], Optional[str]]) -> Reporter:
    """A Reporter through dlcache.Client.report_stall: `get_client()` the
    process's Client (opened on first report), `plan()` the name of the
    epoch plan the loader reads as, if any."""

    def report(wait: float, step: float, batches: int, final: bool) -> None:
        get_client().report_stall(dataset, plan() or "", wait, step, batches,
                                  final)

    return report
