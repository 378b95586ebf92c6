"""``ingest``: one source file -> a self-contained dataset folder (``Sample`` rows or preference pairs).

Every problem is reported with the file, the row and the field, and nothing is written unless all rows convert.

Inputs can neither delete nor leak data:

* the data set is built in a staging folder and published with one rename (``rubricflow.util.io.staged_dir``); a
  non-empty ``DIR`` is replaced only when it is a previous rubricflow data set (its ``manifest.json`` names an
  adapter or a generator) or with ``force``. Never, not even with ``force``: ``DIR`` holding the current directory,
  the source's folder, ``DIR`` holding the source file or the image root, or ``DIR`` a non-empty folder that is
  not a data set inside the source's folder or the image root (it may hold source images);
* an image path must be relative and resolve (symlinks followed) inside the image root; every image is decoded;
* ids are unique, there is at least one record, and unreadable files (truncated parquet, non-UTF-8 JSON) are
  reported by name.
"""

from __future__ import annotations

import json
from pathlib import Path

from rubricflow.data.adapters.images import store_image
from rubricflow.data.adapters.records import IngestError, UniqueIds
from rubricflow.data.adapters.reward_benchmarks import mmrewardbench, vlrewardbench
from rubricflow.data.adapters.rl_prompts import mathverse, virl39k
from rubricflow.data.pairs import PreferencePair, write_pairs
from rubricflow.data.schema import MANIFEST, write_dataset
from rubricflow.util.io import staged_dir

FORMATS = ("virl39k", "mathverse", "vlrewardbench", "mmrewardbench")


def _is_dataset_output(d: Path) -> bool:
    """Whether ``d`` holds a data set written by rubricflow (its manifest names the adapter or generator)."""
    try:
        man = json.loads((d / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(man, dict) and ("n_samples" in man or "n_pairs" in man) and (
        man.get("adapter") in FORMATS or "generator" in man
    )


def _inside(child: Path, parent: Path) -> bool:
    return child == parent or child.is_relative_to(parent)


def check_destination(src: Path, out: Path, root: Path, force: bool = False) -> Path:
    """The resolved output folder, or an IngestError saying why writing there could lose data."""
    if str(out) in (".", "") or _inside(Path.cwd().resolve(), out.resolve()):
        raise IngestError(
            f"--out {out}: refusing to write into the current directory or a folder holding it (ingest replaces "
            "the whole folder); name a new folder, e.g. --out data/<name>"
        )
    out_r, src_r, root_r = out.resolve(), src.resolve(), root.resolve()
    if out_r.parent == out_r:
        raise IngestError(f"--out {out}: refusing to replace the file-system root; name a new folder")
    if _inside(src_r, out_r) or out_r == src_r.parent:
        raise IngestError(
            f"--out {out}: the source {src} is inside the output folder, which ingest replaces; "
            "choose an output folder outside the source's folder"
        )
    if _inside(root_r, out_r):
        raise IngestError(
            f"--out {out}: the image root {root} is inside the output folder, which ingest replaces; "
            "choose an output folder outside it"
        )
    if out_r.exists() and not out_r.is_dir():
        raise IngestError(f"--out {out}: exists and is not a folder")
    if out_r.is_dir() and any(out_r.iterdir()) and not _is_dataset_output(out_r):
        near = [f"{name} {p}" for name, p in (("source's folder", src_r.parent), ("image root", root_r)) if _inside(out_r, p)]
        if near:
            raise IngestError(
                f"--out {out}: folder is not empty, is not a rubricflow data set and lies inside the {near[0]} "
                f"(it may hold source data of {src}); refusing to replace it even with --force. Use a new folder"
            )
        if not force:
            raise IngestError(
                f"--out {out}: folder is not empty and is not a rubricflow data set (no {MANIFEST} written by "
                "ingest or a generator); refusing to replace it. Use an empty or new folder, or pass --force"
            )
    return out_r


def ingest(
    fmt: str,
    src: str | Path,
    out_dir: str | Path,
    split: str = "test",
    image_root: str | Path | None = None,
    force: bool = False,
):
    """Convert ``src`` into a dataset at ``out_dir``; returns the number of records written.

    ``out_dir`` is replaced atomically, and only when it is empty, a previous rubricflow data set, or ``force``
    (see the module docstring for what is refused even then)."""
    src, out = Path(src), Path(out_dir)
    root = Path(image_root) if image_root else src.parent
    if fmt not in FORMATS:
        raise IngestError(f"--format: unknown format {fmt!r}; expected one of {FORMATS}")
    if not root.is_dir():
        raise IngestError(f"--image-root {root}: not a folder")
    out = check_destination(src, out, root, force)
    with staged_dir(out) as staging:
        if fmt in ("virl39k", "mathverse"):
            fn = virl39k if fmt == "virl39k" else mathverse
            samples = list(fn(src, staging, split, root))
            write_dataset(staging, samples, manifest={"adapter": fmt, "src": str(src)})
            n = len(samples)
        else:
            fn = vlrewardbench if fmt == "vlrewardbench" else mmrewardbench
            pairs, ids = [], UniqueIds(src)
            for k, rec in enumerate(fn(src, root)):
                field_name = rec.pop("image_field")
                ids.add(rec["id"], k)
                where = f"{src}: record {k} (id {rec['id']}) field `{field_name}`"
                rel = store_image(root, rec.pop("image"), staging, rec["id"], where)
                pairs.append(PreferencePair(images=[rel], split=split, **rec))
            write_pairs(staging, pairs, manifest={"adapter": fmt, "src": str(src)})
            n = len(pairs)
    return n
