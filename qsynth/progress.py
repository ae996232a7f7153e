"""Progress display for the long steps (synthesis, sweeps, proving the cache, kernel tests): a rich
progress bar or spinner on stderr when stderr is a terminal, nothing otherwise (a pipe or a log file
gets only the results, and an error stays one line)."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator


def _console():
    from rich.console import Console
    return Console(stderr=True)


def interactive() -> bool:
    return sys.stderr.isatty()


def track(items: Iterable, total: int | None, description: str) -> Iterator:
    """Yield ``items`` while a bar counts them (``total`` of them) on a terminal."""
    if not interactive():
        yield from items
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=_console(), transient=True, redirect_stdout=False, redirect_stderr=False) as bar:
        task = bar.add_task(description, total=total)
        for item in items:
            yield item
            bar.advance(task)


@contextlib.contextmanager
def spinner(description: str):
    """A spinner with ``description`` and the elapsed time while the block runs, on a terminal."""
    if not interactive():
        yield
        return
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=_console(),
                  transient=True, redirect_stdout=False, redirect_stderr=False) as bar:
        bar.add_task(description, total=None)
        yield
