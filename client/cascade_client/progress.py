"""A pull's or a push's progress on stderr (a sweep's: sweep.Bar, with the same `bar`): one bar redrawn on a terminal, plain lines otherwise
(a log or CI reads one line per file, never carriage returns)."""

import sys
import threading
import time


def size(n: float) -> str:
    """Bytes in binary units (KiB, MiB, GiB of 1,024), one decimal: the admin's rule too."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def bar(share: float, width: int = 30) -> str:
    """`[#########.....................]`: `share` (0 to 1) of `width` filled."""
    filled = int(width * min(max(share, 0.0), 1.0))
    return f"[{'#' * filled}{'.' * (width - filled)}]"


class Progress:
    def __init__(
        self,
        files: int,
        total: int,
        stream=None,
        *,
        bar: bool | None = None,
        verbs: tuple[str, str] = ("downloaded", "already here"),
    ):
        self.stream = stream or sys.stderr
        self.verbs = verbs  # what a file's line says of it: done now, or found done
        self.bar = self.stream.isatty() if bar is None else bar
        self.files, self.total = files, total
        self.done_files = self.done = 0
        self.started = time.monotonic()
        self._drawn = 0.0
        self._lock = threading.Lock()

    def advance(self, n: int) -> None:
        with self._lock:
            self.done += n
            if self.bar and time.monotonic() - self._drawn > 0.1:
                self._draw()

    def file_done(self, path: str, n: int, *, skipped: bool = False) -> None:
        with self._lock:
            self.done_files += 1
            if skipped:
                self.done += n
            if self.bar:
                self._draw()
            else:
                what = self.verbs[1] if skipped else self.verbs[0]
                print(f"{what} {path} ({size(n)})", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar:
            with self._lock:
                self._draw()
                print(file=self.stream, flush=True)

    def _draw(self) -> None:
        self._drawn = time.monotonic()
        share = self.done / self.total if self.total else 1.0
        rate = self.done / max(self._drawn - self.started, 1e-6)
        line = (
            f"\r{bar(share)} {share:4.0%}  "
            f"{self.done_files}/{self.files} files  {size(self.done)}/{size(self.total)}  {size(rate)}/s"
        )
        self.stream.write(line)
        self.stream.flush()


class Silent:
    def advance(self, n: int) -> None:
        pass

    def file_done(self, path: str, n: int, *, skipped: bool = False) -> None:
        pass

    def close(self) -> None:
        pass
