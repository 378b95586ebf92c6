"""The plots declared in ``dvc.yaml``, rendered with matplotlib: PNG for Prefect/MLflow, an offline HTML page.

``dvc plots show`` writes HTML that loads vega, vega-lite and vega-embed from a CDN, so it is blank offline. No
installed Python package ships those scripts, and committing downloaded third-party JS needs a licence review, so
rubricflow renders the *same plot definitions* itself (``rubricflow plots``): each plot of ``dvc.yaml`` (stage
``plots:`` and the top-level ``plots:`` section, with their ``x``/``y``/``title`` properties) becomes a PNG and an
inline SVG in one self-contained HTML file with no ``<script>`` at all. Image plots (``.png``/``.svg``/``.jpg``
outputs such as ``reports/rucl/curriculum.png``) are embedded as they are.

Data files: JSON (a list of row dicts, or a dict holding one such list) and CSV/TSV, like DVC accepts.
"""

from __future__ import annotations

import base64
import csv
import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rubricflow.util.io import figure_bytes


IMAGE_SUFFIXES = {".png", ".svg", ".jpg", ".jpeg", ".gif"}


@dataclass
class PlotSpec:
    """One plot: its data file(s), the x column and the y columns (``y`` empty = every numeric column but x)."""

    id: str
    files: list[str]
    x: str | None = None
    y: list[str] = field(default_factory=list)
    title: str | None = None
    stage: str | None = None
    template: str | None = None  # DVC template name: linear/simple/smooth/scatter (lines), bar_horizontal* (bars)

    @property
    def is_image(self) -> bool:
        return all(Path(f).suffix.lower() in IMAGE_SUFFIXES for f in self.files)


def _as_list(v) -> list[str]:
    if v is None:
        return []
    return [str(x) for x in v] if isinstance(v, list) else [str(v)]


def plot_specs(dvc_stages: dict | None = None, top_level: list | dict | None = None) -> list[PlotSpec]:
    """Every plot of dvc.yaml, stage plots first (in stage order), then the top-level ``plots`` section."""
    if dvc_stages is None and top_level is None:
        doc = _dvc_doc()
        dvc_stages, top_level = doc.get("stages") or {}, doc.get("plots") or []
    specs: list[PlotSpec] = []
    for stage, spec in (dvc_stages or {}).items():
        for item in spec.get("plots") or []:
            if isinstance(item, str):
                specs.append(PlotSpec(item, [item], stage=stage))
            elif isinstance(item, dict):
                for path, props in item.items():
                    props = props if isinstance(props, dict) else {}
                    specs.append(PlotSpec(str(path), [str(path)], props.get("x"), _as_list(props.get("y")),
                                          props.get("title"), stage, props.get("template")))
    items = top_level.items() if isinstance(top_level, dict) else [
        next(iter(i.items())) if isinstance(i, dict) else (i, None) for i in (top_level or [])
    ]
    for pid, props in items:
        if not isinstance(props, dict):
            specs.append(PlotSpec(str(pid), [str(pid)]))
            continue
        y = props.get("y")
        files: list[str] = []
        ycols: list[str] = []
        if isinstance(y, dict):  # {file: col or [cols]}
            for f, cols in y.items():
                files.append(str(f))
                ycols += [c for c in _as_list(cols) if c not in ycols]
        else:
            ycols = _as_list(y)
        x = props.get("x")
        if isinstance(x, dict):  # {file: col}: one x column name is enough for our files
            x = next(iter(x.values()), None)
        specs.append(PlotSpec(str(pid), files or [str(pid)], x, ycols, props.get("title"), None, props.get("template")))
    return specs


def _dvc_doc(path: str | Path = "dvc.yaml") -> dict:
    import yaml

    p = Path(path)
    if not p.exists():
        return {}
    return yaml.safe_load(p.read_text()) or {}


def specs_for_stages(stages: list[str]) -> list[PlotSpec]:
    """The plots the given stages produced: their stage-level plots, then the top-level plots that read a file one
    of them declares (outs, metrics or plots), e.g. the RuCL-vs-outcome reward curves after both trainings."""
    doc = _dvc_doc()
    dvc_stages = doc.get("stages") or {}
    wanted = set(stages)
    specs = [s for s in plot_specs(dvc_stages, []) if s.stage in wanted]
    produced = set()
    for name in wanted & set(dvc_stages):
        for kind in ("outs", "metrics", "plots"):
            for item in dvc_stages[name].get(kind) or []:
                produced.update([item] if isinstance(item, str) else [str(k) for k in item])
    top = [s for s in plot_specs({}, doc.get("plots") or []) if produced & set(s.files)]
    covered = {f for s in top for f in s.files}  # a top-level plot (with its x/y) supersedes the bare file plot
    return [s for s in specs if s.is_image or not set(s.files) <= covered] + top


# ----------------------------------------------------------------------------------------------------------------
# data


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a JSON/CSV/TSV plot file. Raises ValueError naming the file when it is not tabular."""
    p = Path(path)
    if p.suffix.lower() == ".json":
        doc = json.loads(p.read_text())
        if isinstance(doc, dict):
            lists = [v for v in doc.values() if isinstance(v, list) and v and isinstance(v[0], dict)]
            if len(lists) != 1:
                raise ValueError(f"{p}: expected a list of rows or a mapping holding exactly one list of rows")
            doc = lists[0]
        if not isinstance(doc, list) or not all(isinstance(r, dict) for r in doc):
            raise ValueError(f"{p}: expected a JSON list of objects (one per step)")
        return doc
    if p.suffix.lower() in (".csv", ".tsv"):
        with open(p, newline="") as f:
            rows = list(csv.DictReader(f, delimiter="\t" if p.suffix.lower() == ".tsv" else ","))
        return [{k: _num(v) for k, v in r.items()} for r in rows]
    raise ValueError(f"{p}: unsupported plot file type {p.suffix!r} (expected .json, .csv or .tsv)")


def _num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return v


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def columns(spec: PlotSpec, rows: list[dict]) -> tuple[str, list[str]]:
    """(x column, y columns) of a data plot; x defaults to ``step`` or the row index (DVC's ``step``)."""
    keys = [k for k in rows[0]] if rows else []
    x = spec.x or ("step" if "step" in keys else None)
    ys = spec.y or [k for k in keys if k != x and any(_is_num(r.get(k)) for r in rows)]
    missing = [c for c in ([x] if x else []) + ys if c not in keys]
    if missing:
        raise ValueError(f"plot {spec.id}: columns {missing} not in {spec.files[0]} (has {keys})")
    return x or "index", ys


def table_rows(spec: PlotSpec, max_rows: int = 60) -> list[dict[str, Any]]:
    """The plotted columns, evenly down-sampled to at most ``max_rows`` rows (first and last kept)."""
    rows = read_rows(spec.files[0])
    x, ys = columns(spec, rows)
    if len(rows) > max_rows:
        idx = sorted({round(i * (len(rows) - 1) / (max_rows - 1)) for i in range(max_rows)})
        rows = [rows[i] for i in idx]
    out = []
    for i, r in enumerate(rows):
        row = {x: r.get(x, i)}
        for y in ys:
            v = r.get(y)
            row[y] = round(v, 5) if isinstance(v, float) else v
        out.append(row)
    return out


# ----------------------------------------------------------------------------------------------------------------
# rendering


def render(spec: PlotSpec, fmt: str = "png") -> bytes:
    """The plot as PNG or SVG bytes (images are returned as stored, converted only when asked for another format)."""
    if spec.is_image:
        return Path(spec.files[0]).read_bytes()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if (spec.template or "").startswith("bar_horizontal"):
        return _render_bars(spec, fmt, plt)
    fig, ax = plt.subplots(figsize=(7, 3.4), dpi=100)
    for f in spec.files:
        rows = read_rows(f)
        x, ys = columns(spec, rows)
        xs = [r.get(x, i) for i, r in enumerate(rows)]
        for y in ys:
            vals = [float(r[y]) if _is_num(r.get(y)) else float("nan") for r in rows]
            label = y if len(spec.files) == 1 else f"{y} ({Path(f).name})"
            if spec.template == "scatter":
                ax.scatter(xs, vals, label=label, s=12)
            else:
                ax.plot(xs, vals, label=label, lw=1.5)
    ax.set_xlabel(spec.x or "step")
    ax.set_title(spec.title or spec.id, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return figure_bytes(fig, fmt)


def _render_bars(spec: PlotSpec, fmt: str, plt) -> bytes:
    """DVC's bar_horizontal templates: one bar per row, ``y`` holds the labels and ``x`` the values."""
    rows = read_rows(spec.files[0])
    if not spec.x or not spec.y:
        raise ValueError(f"plot {spec.id}: template {spec.template} needs x (values) and y (labels)")
    label_col = spec.y[0]
    missing = [c for c in (spec.x, label_col) if rows and c not in rows[0]]
    if missing:
        raise ValueError(f"plot {spec.id}: columns {missing} not in {spec.files[0]} (has {list(rows[0])})")
    pairs = [(str(r[label_col]), float(r[spec.x]) if _is_num(r.get(spec.x)) else float("nan")) for r in rows]
    if spec.template == "bar_horizontal_sorted":
        pairs.sort(key=lambda p: p[1])
    fig, ax = plt.subplots(figsize=(7, max(2.0, 0.28 * len(pairs) + 1)), dpi=100)
    ax.barh([p[0] for p in pairs], [p[1] for p in pairs], color="tab:blue")
    ax.set_xlabel(spec.x)
    ax.set_title(spec.title or spec.id, fontsize=10)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(alpha=0.3, axis="x")
    return figure_bytes(fig, fmt)


def data_uri(png: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(png).decode()}"


def write_offline_html(out: str | Path, specs: list[PlotSpec] | None = None, title: str = "rubricflow plots") -> Path:
    """One self-contained HTML page (inline SVG / data-URI images, no scripts) with every plot that has data.

    Plots whose files do not exist yet are listed by name at the end of the page.
    """
    specs = plot_specs() if specs is None else specs
    out = Path(out)
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
             "<style>body{font-family:sans-serif;margin:2em} figure{margin:1.5em 0} "
             "figcaption{font-weight:bold;margin-bottom:.3em} .missing{color:#a00}</style></head><body>",
             f"<h1>{html.escape(title)}</h1>"]
    missing = []
    for s in specs:
        if not all(Path(f).exists() for f in s.files):
            missing.append(s)
            continue
        caption = html.escape(s.title or s.id) + (f" <small>(stage {html.escape(s.stage)})</small>" if s.stage else "")
        if s.is_image:
            suffix = Path(s.files[0]).suffix.lower()
            mime = "image/svg+xml" if suffix == ".svg" else f"image/{'jpeg' if suffix == '.jpg' else suffix[1:]}"
            body = f"<img alt='{html.escape(s.id)}' src='{data_uri(render(s), mime)}'>"
        else:
            svg = render(s, "svg").decode()
            body = svg[svg.index("<svg"):]  # drop the XML prolog and DOCTYPE of the standalone file
        parts.append(f"<figure id='{html.escape(s.id)}'><figcaption>{caption}</figcaption>{body}</figure>")
    if missing:
        items = "".join(f"<li>{html.escape(s.id)} ({', '.join(map(html.escape, s.files))})</li>" for s in missing)
        parts.append(f"<p class='missing'>Not produced yet:</p><ul class='missing'>{items}</ul>")
    parts.append("</body></html>")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(parts), encoding="utf-8")
    return out
