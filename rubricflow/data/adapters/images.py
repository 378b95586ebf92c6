"""Images of ingested records, copied or decoded into ``DIR/images`` so the dataset is self-contained.

An image field may hold a path (relative to the image root), a ``datasets`` image struct (``bytes`` and/or
``path``), raw bytes, a ``data:image/...;base64,`` URL or a bare base64 string of a PNG, JPEG, GIF or WebP file
(recognised by the encoded file signature). Anything else, bytes that do not decode and a missing file are errors
naming file, record and field.

An image path must be relative and resolve (symlinks followed) inside the image root; every image is decoded.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from rubricflow.data.adapters.records import IngestError


def resolve_image(root: Path, rel: Any, where: str) -> Path:
    """The file an image path names, refused unless it is relative and stays inside ``root`` (symlinks followed)."""
    if not isinstance(rel, str) or not rel.strip():
        raise IngestError(f"{where}: image path {rel!r} is not a path; expected a path relative to the image root {root}")
    path = Path(rel)
    if path.is_absolute():
        raise IngestError(f"{where}: image path {rel!r} is absolute; expected a path inside the image root {root}")
    if ".." in path.parts:
        raise IngestError(f"{where}: image path {rel!r} contains `..`; expected a path inside the image root {root}")
    full = (root / path).resolve()
    if not full.is_relative_to(root.resolve()):
        raise IngestError(f"{where}: image path {rel!r} resolves to {full}, outside the image root {root}")
    if not full.is_file():
        raise IngestError(f"{where}: image file not found: {root / path}")
    return full


def _check_decodes(full: Path, where: str) -> None:
    from PIL import Image

    try:
        with Image.open(full) as im:
            im.verify()
        with Image.open(full) as im:  # verify() leaves the image unusable; load() decodes the pixel data
            im.load()
    except Exception as e:  # noqa: BLE001 - any decoder error means the file is unusable
        raise IngestError(f"{where}: {full} is not a readable image ({type(e).__name__}: {e})") from None


def checked_image(root: Path, rel: Any, where: str) -> Path:
    """The file an image path names, refused (``IngestError``, a ``ValueError``, naming ``where``) unless it is
    relative, stays inside ``root`` (symlinks followed) and decodes as an image."""
    full = resolve_image(Path(root), rel, where)
    _check_decodes(full, where)
    return full


def copy_image(src_root: Path, rel: Any, out: Path, new_name: str, where: str) -> str:
    full = resolve_image(src_root, rel, where)
    _check_decodes(full, where)
    dest = Path("images") / f"{new_name}{full.suffix.lower() or '.png'}"
    if (out / dest).exists():
        raise IngestError(f"{where}: two images would be stored as {dest}; ids must be unique")
    (out / dest).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(full, out / dest)
    return dest.as_posix()


# base64 of the first bytes of PNG, JPEG, GIF and WebP (RIFF) files: a bare base64 image string starts with one
_B64_SIGNATURES = ("iVBORw0KGgo", "/9j/", "R0lGOD", "UklGR")


def _decode_b64(text: str, where: str) -> bytes:
    import base64
    import binascii

    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as e:
        raise IngestError(f"{where}: the image's base64 text does not decode ({e})") from None


def _image_bytes(value: Any, where: str) -> bytes | None:
    """The encoded image an image field carries inline, or None when the field names a file (a path)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, dict):
        data, path = value.get("bytes"), value.get("path")
        if data:
            return bytes(data)
        if path:
            return None
        raise IngestError(f"{where}: the image struct has neither `bytes` nor `path`; expected an embedded or a "
                          "referenced image")
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("data:"):
            head, _, data = text.partition(",")
            if not head.startswith("data:image/") or not head.endswith(";base64"):
                raise IngestError(f"{where}: data URL {head[:40]!r}...: expected data:image/<type>;base64,<data>")
            return _decode_b64(data, where)
        if text.startswith(_B64_SIGNATURES) and len(text) > 64:
            return _decode_b64(text, where)
        return None
    raise IngestError(f"{where}: image of type {type(value).__name__}; expected a path, an image struct "
                      "({bytes, path}), bytes or base64 text")


def store_image(root: Path, value: Any, out: Path, new_name: str, where: str) -> str:
    """Write the image a field embeds or names into ``out/images`` (decoded first) and return its relative path."""
    data = _image_bytes(value, where)
    if data is None:  # a path: a plain string or a struct's `path`
        rel = value.get("path") if isinstance(value, dict) else value
        return copy_image(root, rel, out, new_name, where)
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            fmt_name = (im.format or "png").lower()
            im.verify()
        with Image.open(io.BytesIO(data)) as im:
            im.load()
    except Exception as e:  # noqa: BLE001 - any decoder error means the bytes are unusable
        raise IngestError(f"{where}: the embedded image ({len(data)} bytes) does not decode "
                          f"({type(e).__name__}: {e})") from None
    ext = {"jpeg": ".jpg", "mpo": ".jpg"}.get(fmt_name, f".{fmt_name}")
    dest = Path("images") / f"{new_name}{ext}"
    if (out / dest).exists():
        raise IngestError(f"{where}: two images would be stored as {dest}; ids must be unique")
    (out / dest).parent.mkdir(parents=True, exist_ok=True)
    (out / dest).write_bytes(data)
    return dest.as_posix()
