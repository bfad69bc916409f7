"""A pull's downloads: files from the bucket through presigned links, several at once, each
into `<file>.part` and renamed once its size and (where the ETag is one) its MD5 match the
listing; never more bytes than listed; `If-Match` with the listed ETag. The module `pull` says
what a pull does with them.
"""

import hashlib
import os
import re
import threading
from pathlib import Path

import httpx

from cascade_client.errors import BadAnswer, CascadeError, FileChanged, Unreachable

MD5_ETAG = re.compile(r'^"([0-9a-fA-F]{32})"$')  # multipart ETags carry "-<parts>": no MD5
CHUNK = 64 * 1024  # a stop (a failure elsewhere, Ctrl-C) is seen within a chunk


def expected_md5(etag: str | None, headers=None) -> str | None:
    """The MD5 an ETag is: a quoted 32-hex one, of an object that is not encrypted with KMS or
    a customer's key (S3 says so in the GET's headers; those objects' ETags are no MD5s)."""
    if headers is not None and (
        headers.get("x-amz-server-side-encryption", "").startswith("aws:kms")
        or "x-amz-server-side-encryption-customer-algorithm" in headers
    ):
        return None
    match = MD5_ETAG.match(etag or "")
    return match.group(1).lower() if match else None


def file_md5(path: Path) -> str:
    digest = hashlib.md5()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def complete(path: Path, entry: dict) -> bool:
    """Already pulled: the size the listing says, and its MD5 where the ETag is one."""
    if not path.is_file() or path.stat().st_size != entry["bytes"]:
        return False
    md5 = expected_md5(entry.get("etag"))
    return md5 is None or file_md5(path) == md5


def download_all(client, entries, dest, local, jobs, progress, result) -> None:
    """`entries` into `dest`, `jobs` at a time, on daemon threads: the first failure stops the
    others at their next chunk, and so does Ctrl-C, at once (a thread stuck in a read is left
    behind, never waited for), leaving `.part` files for the next run to fetch again."""
    todo = []
    for entry in entries:
        path = dest / local(entry["path"])
        if complete(path, entry):
            result.skipped += 1
            progress.file_done(entry["path"], entry["bytes"], skipped=True)
        else:
            todo.append((entry, path))
    if not todo:
        return
    stop = threading.Event()
    queue = list(reversed(todo))
    lock = threading.Lock()
    failures: list[BaseException] = []
    finished = threading.Semaphore(0)

    def work(http: httpx.Client) -> None:
        try:
            while not stop.is_set():
                with lock:
                    if not queue:
                        return
                    entry, path = queue.pop()
                try:
                    _download(http, entry, path, progress, stop)
                except BaseException as error:  # noqa: BLE001  handed to the caller's thread
                    with lock:
                        failures.append(error)
                    stop.set()
        finally:
            finished.release()

    # No token and no base URL: the links are the bucket's, signed for anyone who holds them.
    http = httpx.Client(timeout=httpx.Timeout(60.0), transport=client.transport, follow_redirects=True)
    workers = [
        threading.Thread(target=work, args=(http,), daemon=True, name=f"cascade-pull-{n}")
        for n in range(max(1, min(jobs, len(todo))))
    ]
    try:
        for worker in workers:
            worker.start()
        for _ in workers:
            finished.acquire()
    except BaseException:  # Ctrl-C: the threads stop at their next chunk; none is waited for
        stop.set()
        raise
    http.close()
    if failures:
        raise failures[0]
    result.downloaded += len(todo)
    result.bytes += sum(entry["bytes"] for entry, _ in todo)


def _download(http: httpx.Client, entry: dict, path: Path, progress, stop: threading.Event) -> None:
    """One file into `<path>.part`, renamed once whole: never more bytes than listed (a longer
    body is cut off at once), `If-Match` with the listed ETag (the link is signed for it: a
    replaced object answers 412 before any byte), then its MD5 where the ETag is one."""
    if stop.is_set():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(path.name + ".part")
    listed = entry["bytes"]
    digest, written = hashlib.md5(), 0
    headers = {"If-Match": entry["etag"]} if entry.get("etag") else {}
    try:
        with http.stream("GET", entry["url"], headers=headers) as response:
            status = response.status_code
            if status == 412:  # If-Match failed: S3 sends no byte of the new object
                raise FileChanged(
                    f"{entry['path']} changed in the bucket since the listing (412: its ETag is no "
                    "longer the listed one); run the pull again"
                )
            if status in (403, 404):
                raise FileChanged(
                    f"{entry['path']}: the bucket answered {status} for its link: the file "
                    "changed or went since the listing, or the link expired; run the pull again"
                )
            if status >= 400:
                raise CascadeError(f"{entry['path']}: the bucket answered {status}")
            announced = response.headers.get("content-length")
            if announced is not None and announced.strip().isdigit() and int(announced) != listed:
                raise FileChanged(
                    f"{entry['path']} changed in the bucket since the listing ({int(announced)} bytes, "
                    f"listed {listed}); run the pull again"
                )
            md5 = expected_md5(entry.get("etag"), response.headers)
            with part.open("wb") as out:
                for chunk in response.iter_raw(CHUNK):  # the bytes as stored, never decoded
                    if stop.is_set():
                        return  # the .part stays, for the next pull to fetch again
                    if written + len(chunk) > listed:
                        raise FileChanged(
                            f"{entry['path']} is longer in the bucket than listed ({listed} bytes): cut off "
                            "there; run the pull again"
                        )
                    out.write(chunk)
                    digest.update(chunk)
                    written += len(chunk)
                    progress.advance(len(chunk))
    except FileChanged:
        part.unlink(missing_ok=True)
        raise
    except httpx.TooManyRedirects:
        raise BadAnswer(f"{entry['path']}: the bucket's link redirects in a loop") from None
    except httpx.TransportError as error:
        raise Unreachable(
            f"{entry['path']}: cannot reach the bucket: {error or type(error).__name__}"
        ) from None
    if written != listed or (md5 is not None and digest.hexdigest() != md5):
        part.unlink(missing_ok=True)
        what = f"{written} bytes, listed {listed}" if written != listed else "its MD5 differs from its ETag"
        raise FileChanged(
            f"{entry['path']} changed in the bucket since the listing ({what}); run the pull again"
        )
    os.replace(part, path)
    progress.file_done(entry["path"], written)
