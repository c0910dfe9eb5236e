"""A dependency-free progress bar for long fits, written to stderr.

It stays silent for the first ``delay`` seconds, so fast calls print nothing;
after that it redraws one line (``\\r``) at most every ``min_interval``
seconds, which terminals and Jupyter both render in place, and ends the line
on :meth:`Progress.close`.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
  """One-line progress bar: ``desc  12/100 [####......] postfix 8.1s``.

  Args:
    total: number of steps (the bar is full at ``total``).
    desc: label at the start of the line.
    enabled: ``False`` prints nothing.
    delay: seconds before the bar first appears (default 2).
    min_interval: least seconds between redraws (default 0.25).
    stream: where to write (default ``sys.stderr``).

  Example:
    >>> import io
    >>> out = io.StringIO()
    >>> bar = Progress(4, "fit", delay=0.0, min_interval=0.0, stream=out)
    >>> bar.update(2, "err 0.1")
    >>> bar.close("done")
    >>> out.getvalue().split("\\r")[-1].split("]")[0]
    'fit    4/4 [##############################'
  """

  def __init__(
    self,
    total: int,
    desc: str,
    *,
    enabled: bool = True,
    delay: float = 2.0,
    min_interval: float = 0.25,
    stream: TextIO | None = None,
  ):
    self.total = max(int(total), 0)
    self.desc = desc
    self.enabled = enabled
    self.delay = delay
    self.min_interval = min_interval
    self.stream = stream if stream is not None else sys.stderr
    self.start = time.perf_counter()
    self._last = -float("inf")
    self._shown = False
    self._width = 0
    self._closed = False

  def __enter__(self) -> Progress:
    return self

  def __exit__(self, *exc: object) -> None:
    """Ends the line (if shown), also when the block raised."""
    self.close()

  def _line(self, done: int, postfix: str) -> str:
    frac = min(max(done / self.total, 0.0), 1.0) if self.total else 1.0
    bar = "#" * int(round(30 * frac))
    elapsed = time.perf_counter() - self.start
    digits = len(str(self.total))
    return (
      f"{self.desc} {done:>{digits + 3}}/{self.total} [{bar:<30}] {postfix} {elapsed:.1f}s".rstrip()
    )

  def _write(self, line: str, end: str = "") -> None:
    pad = " " * max(self._width - len(line), 0)
    self.stream.write("\r" + line + pad + end)
    self.stream.flush()
    self._width = len(line)

  def update(self, done: int, postfix: str = "") -> None:
    """Redraws the line at ``done`` steps (no-op before ``delay`` or within ``min_interval``)."""
    if not self.enabled or self._closed:
      return
    now = time.perf_counter()
    if now - self.start < self.delay or now - self._last < self.min_interval:
      return
    self._last = now
    self._shown = True
    self._write(self._line(done, postfix))

  def close(self, postfix: str = "", done: int | None = None) -> None:
    """Draws the final state and ends the line (only if the bar was shown or is due; once)."""
    if not self.enabled or self._closed:
      return
    self._closed = True
    if not self._shown and time.perf_counter() - self.start < self.delay:
      return
    self._write(self._line(self.total if done is None else done, postfix), end="\n")
    self._shown = False
