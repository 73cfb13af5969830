"""Workload files: JSON Lines (one object per line) or CSV with a header row.

Both hold the fields of WorkloadItem (FIELDS), and ``dump_workload`` writes what
``parse_workload`` reads. A bad file never half-loads: the first problem raises
WorkloadError naming the line and the field, so the lab can show it and keep the
workload it had.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from pathlib import Path

from engine.limits import MAX_REQUESTS
from engine.values import parse, parse_json
from engine.workload.item import FIELDS, ITEM_TYPES, WorkloadError, WorkloadItem, known_fields, shown

FORMATS = ("jsonl", "csv")


def _item(values: dict, line: int) -> WorkloadItem:
    """Build an item from one line's fields, naming the line in any complaint."""
    for name in values:
        if name not in FIELDS:
            raise WorkloadError(f"unknown field; {known_fields(name, 'fields')}", line, name)
    if "prompt" not in values:
        raise WorkloadError("missing: every request needs a prompt", line, "prompt")
    try:
        return WorkloadItem(**values)
    except WorkloadError as exc:
        raise WorkloadError(exc.reason, line, exc.field) from None


# A workload file's format, told by its name's suffix (for the CLI and the lab's upload alike).
FORMAT_OF_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".csv": "csv"}


def format_of(file_name: str) -> str | None:
    """'jsonl' or 'csv' for a workload file's name; None where the suffix says neither."""
    return FORMAT_OF_SUFFIX.get(Path(file_name).suffix.lower())


def parse_workload(text: str, fmt: str) -> list[WorkloadItem]:
    """Read a workload file's text; fmt is 'jsonl' or 'csv'. Blank lines are skipped."""
    if fmt not in FORMATS:
        raise WorkloadError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")
    text = text.removeprefix("\ufeff")  # a byte-order mark, as spreadsheet programs write
    items = _parse_jsonl(text) if fmt == "jsonl" else _parse_csv(text)
    if not items:
        expected = "one JSON object per line" if fmt == "jsonl" else "a header row, then one request per row"
        raise WorkloadError(f"the workload is empty: no requests found (expected {expected})")
    return items


def _check_count(items: list[WorkloadItem], line: int) -> None:
    if len(items) >= MAX_REQUESTS:
        raise WorkloadError(f"more than {MAX_REQUESTS} requests; a lab workload holds at most {MAX_REQUESTS}", line)


def _parse_jsonl(text: str) -> list[WorkloadItem]:
    items: list[WorkloadItem] = []
    # Split on "\n" only: JSON leaves characters such as U+2028 unescaped, and
    # str.splitlines() would break a prompt holding one.
    for number, raw in enumerate(text.split("\n"), start=1):
        line = raw.removesuffix("\r")
        if not line.strip():
            continue
        try:
            values = parse_json(line)
        except ValueError as exc:
            raise WorkloadError(str(exc), number) from None
        if not isinstance(values, dict):
            raise WorkloadError(f'expected a JSON object such as {{"prompt": "ROMEO:"}}, got '
                                f"{type(values).__name__}", number)
        _check_count(items, number)
        items.append(_item(values, number))
    return items


# Text kept as written, spaces and line breaks included (a stop token may be a line break).
VERBATIM = ("prompt", "stop_token")


def _given(name: str, cell: str) -> bool:
    """An empty cell leaves an optional field at its default; the prompt is never optional (its rule
    names an empty one), and a verbatim field's blank text is still text."""
    return bool(cell.strip()) or name == "prompt" or (name in VERBATIM and cell != "")


def _from_cell(name: str, cell: str) -> object:
    """Turn a CSV cell into its field's type, read as a link or a flag is (engine.values). A cell
    that does not convert stays text, and the field's rule then rejects it with the same message
    a JSON file gets."""
    if name in VERBATIM:
        return cell
    try:
        return parse(cell, ITEM_TYPES[name])
    except ValueError:
        return cell


def _parse_csv(text: str) -> list[WorkloadItem]:
    reader = csv.reader(io.StringIO(text, newline=""))
    items: list[WorkloadItem] = []
    header: list[str] | None = None
    start = 1  # the physical line a row starts on (a quoted prompt may span several)
    try:
        for row in reader:
            number, start = start, reader.line_num + 1
            if not any(cell.strip() for cell in row):
                continue
            if header is None:
                header = [cell.strip() for cell in row]
                _check_header(header, number)
                continue
            if len(row) != len(header):
                raise WorkloadError(f"has {len(row)} cells but the header has {len(header)} columns "
                                    f"({', '.join(header)})", number)
            _check_count(items, number)
            values = {name: _from_cell(name, cell) for name, cell in zip(header, row, strict=True)
                      if _given(name, cell)}
            items.append(_item(values, number))
    except csv.Error as exc:
        raise WorkloadError(f"not valid CSV: {exc}", start) from None
    return items


def _check_header(header: list[str], line: int) -> None:
    unknown = [name for name in header if name not in FIELDS]
    if unknown:
        raise WorkloadError(f"the header row names unknown column(s) {', '.join(map(shown, unknown[:5]))}; "
                            f"{known_fields(unknown[0], 'columns')} (a CSV workload must start with a header row)",
                            line)
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise WorkloadError(f"the header row repeats column(s) {', '.join(map(repr, repeated))}", line)
    if "prompt" not in header:
        raise WorkloadError(f"the header row has no 'prompt' column (it has: {', '.join(header)})", line)


def dump_workload(items: list[WorkloadItem], fmt: str) -> str:
    """Write items as a file's text, every field spelled out, that parse_workload reads back."""
    if fmt == "jsonl":
        return "".join(json.dumps(asdict(item), ensure_ascii=False) + "\n" for item in items)
    if fmt == "csv":
        out = io.StringIO(newline="")
        # RFC 4180's "\r\n" line ends: the writer then quotes any prompt holding "\r" or "\n".
        writer = csv.writer(out)
        writer.writerow(FIELDS)
        for item in items:
            writer.writerow([str(v).lower() if isinstance(v, bool) else v for v in asdict(item).values()])
        return out.getvalue()
    raise WorkloadError(f"format must be one of {', '.join(FORMATS)}; got {fmt!r}")
