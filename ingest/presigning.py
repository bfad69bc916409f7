"""URLs that let clients reach the bucket without passing a byte through Cascade: presigned GETs
of a run's files (ingest.downloads), presigned PUTs and multipart uploads of a simulation
(ingest.uploads).

A presigned URL is local computation (an HMAC per URL from the credentials), no request to S3,
whatever the number of keys. Each is signed for `CASCADE_S3_PUBLIC_ENDPOINT_URL` when that is
set: the host is part of the signature, so a URL signed for the address the server reaches the
bucket at cannot be rewritten to the one clients reach it at. Signature Version 4 always (the
storage's client config says so): AWS no longer accepts version 2 in most regions.

GETs are django-storages' `url()`; PUTs, parts and the multipart requests are the storage's
boto3 client's, django-storages having no call for them.

What an upload through the API answers for each file (`upload_target`: a PUT, or a multipart
upload's parts) and how its multipart uploads are completed (`multipart_finish`) are one here
for a simulation's upload (ingest.uploads) and a run's push (ingest.pushes).
"""

from collections.abc import Iterable

from botocore.exceptions import ClientError
from django.conf import settings
from storages.utils import clean_name

from ingest.storage import TraceStorage, client, traces
from traces.signals import UploadRefused

MAX_PARTS = 10_000  # S3's limit on a multipart upload's parts
# What S3 says of a completion the client got wrong: a 400 naming it, never a 500.
CLIENT_PART_ERRORS = ("NoSuchUpload", "InvalidPart", "InvalidPartOrder", "EntityTooSmall", "MalformedXML")


def signing(*, public: bool = True) -> TraceStorage:
    """The storage that signs: for CASCADE_S3_PUBLIC_ENDPOINT_URL with `public`, when set."""
    return traces().reached_at(settings.CASCADE_S3_PUBLIC_ENDPOINT_URL if public else None)


def presigned_gets(
    keys: Iterable[str], seconds: int, *, etags: Iterable[str | None] | None = None, public: bool = True
) -> list[str]:
    """A presigned GET URL for each key, valid `seconds` from now.

    With `etags`, each URL is pinned to its object's ETag: `If-Match` is a signed header, so S3
    answers only a GET that sends it with that value, and 412 (before any byte of the body)
    once the object was replaced."""
    keys = list(keys)
    if not keys:
        return []
    etags = list(etags) if etags is not None else [None] * len(keys)
    storage = signing(public=public)
    urls = []
    for key, etag in zip(keys, etags, strict=True):
        # The storage signs the name it normalises (`a/./b` as `a/b`): another object's.
        if clean_name(key) != key:
            raise ValueError(f"{key!r} is not a key django-storages signs as it is")
        urls.append(storage.url(key, parameters={"IfMatch": etag} if etag else None, expire=seconds))
    return urls


def presigned_put(key: str, size: int, seconds: int) -> str:
    """A presigned PUT of exactly `size` bytes (Content-Length is signed: S3 refuses another
    length)."""
    return _signer().generate_presigned_url(
        "put_object", Params={"Bucket": _bucket(), "Key": key, "ContentLength": size}, ExpiresIn=seconds
    )


def presigned_parts(key: str, upload_id: str, sizes: list[int], seconds: int) -> list[str]:
    """A presigned UploadPart PUT for each part (numbered from 1), each of exactly its size."""
    s3, bucket = _signer(), _bucket()
    return [
        s3.generate_presigned_url(
            "upload_part",
            Params={
                "Bucket": bucket,
                "Key": key,
                "UploadId": upload_id,
                "PartNumber": number,
                "ContentLength": size,
            },
            ExpiresIn=seconds,
        )
        for number, size in enumerate(sizes, 1)
    ]


def multipart_start(key: str) -> str:
    """CreateMultipartUpload (one request to S3): the upload's id."""
    return client().create_multipart_upload(Bucket=_bucket(), Key=key)["UploadId"]


def multipart_complete(key: str, upload_id: str, parts: list[tuple[int, str]]) -> None:
    """CompleteMultipartUpload with the parts' (number, ETag) in order; S3's ClientError raised
    as it is (NoSuchUpload, InvalidPart, EntityTooSmall: the caller says which)."""
    client().complete_multipart_upload(
        Bucket=_bucket(),
        Key=key,
        UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": number, "ETag": etag} for number, etag in parts]},
    )


def multipart_abort_under(key_prefix: str) -> list[str]:
    """Abort the multipart uploads in progress under `key_prefix` (their parts are stored, and
    billed, until then); the keys they were for."""
    s3, bucket = client(), _bucket()
    aborted = []
    for page in s3.get_paginator("list_multipart_uploads").paginate(Bucket=bucket, Prefix=key_prefix):
        for upload in page.get("Uploads", ()):
            s3.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
            aborted.append(upload["Key"])
    return aborted


def part_sizes(size: int) -> list[int]:
    part = settings.CASCADE_SIM_PART_BYTES
    sizes = [part] * (size // part) + ([size % part] if size % part else [])
    if len(sizes) > MAX_PARTS:
        raise UploadRefused(
            f"{size} bytes is more than {MAX_PARTS} parts of {part} bytes (CASCADE_SIM_PART_BYTES)"
        )
    return sizes


def upload_target(
    key: str, name: str, size: int, seconds: int, *, upload_id: str | None = None, whole: bool = False
) -> dict:
    """One file of an upload through the API, as its answer gives it: a presigned PUT of exactly
    its size (`url`, `headers`), or from CASCADE_SIM_MULTIPART_BYTES up a multipart upload
    (`multipart`: its id, the part size, a presigned PUT per part). `upload_id`: a multipart
    upload of this key already started, continued (its parts already PUT are not asked again)."""
    if upload_id is None and (whole or size < settings.CASCADE_SIM_MULTIPART_BYTES):
        url = presigned_put(key, size, seconds)
        return {"name": name, "size": size, "url": url, "headers": {"Content-Length": str(size)}}
    sizes = part_sizes(size)
    if upload_id is None:
        upload_id = multipart_start(key)
    elif not multipart_exists(key, upload_id):
        raise UploadRefused(f"{name}: no multipart upload {upload_id[:200]!r} is in progress for it")
    urls = presigned_parts(key, upload_id, sizes, seconds)
    parts = [{"part_number": number, "url": url} for number, url in enumerate(urls, 1)]
    multipart = {"upload_id": upload_id, "part_size": settings.CASCADE_SIM_PART_BYTES, "parts": parts}
    return {"name": name, "size": size, "multipart": multipart}


def numbered_parts(name: str, parts: list[dict]) -> list[tuple[int, str]]:
    """The client's parts (`{"part_number", "etag"}`) in order, refused unless numbered 1 to n,
    each once."""
    numbered = sorted((part["part_number"], part["etag"]) for part in parts)
    if [number for number, _ in numbered] != list(range(1, len(numbered) + 1)):
        raise UploadRefused(f"{name}: the parts are numbered 1 to {len(numbered)}, each once")
    return numbered


def multipart_finish(key: str, name: str, upload_id: str, parts: list[dict]) -> None:
    """Complete the multipart upload of `key` from the client's parts (numbered_parts); what S3
    refuses in them is an UploadRefused naming the file."""
    numbered = numbered_parts(name, parts)
    try:
        multipart_complete(key, upload_id, numbered)
    except ClientError as error:
        problem = error.response.get("Error", {})
        code = problem.get("Code", "")
        if code in CLIENT_PART_ERRORS:
            raise UploadRefused(
                f"{name}: S3 refused to complete the upload: {code}: {problem.get('Message', '')}"
            ) from None
        raise


def multipart_exists(key: str, upload_id: str) -> bool:
    """Whether `upload_id` is a multipart upload of `key` still in progress (one ListParts)."""
    try:
        client().list_parts(Bucket=_bucket(), Key=key, UploadId=upload_id, MaxParts=1)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("NoSuchUpload", "404", "InvalidArgument"):
            return False
        raise
    return True


def _signer():
    """This thread's client of the signing storage: it signs, and never sends a request."""
    return signing().connection.meta.client


def _bucket() -> str:
    return traces().bucket_name
