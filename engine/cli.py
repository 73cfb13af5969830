"""What every command line here shares: one-line errors, a flag per knob read as links read values,
and the output files' checks."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TextIO, TypeVar

from engine.knobs import Knob
from engine.values import parse

T = TypeVar("T")


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, no usage dump: the message already names the flag."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_knob_flags(group, rows: tuple[Knob, ...]) -> None:
    """A flag per row of a knob table: ``num_gpu_blocks`` becomes ``--num-gpu-blocks``."""
    for knob in rows:
        help_text = f"{knob.help} (default: {knob.default})"
        # SUPPRESS: an unset knob stays out of the namespace, so the config supplies its default.
        if knob.type is bool:
            group.add_argument(flag(knob.name), action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                               help=help_text)
        else:
            group.add_argument(flag(knob.name), type=_reader(knob.annotation), default=argparse.SUPPRESS,
                               metavar=knob.name.upper(), help=help_text)


def _reader(hint: object):
    """A flag's value read as the link and CSV read it (engine.values), so 'none' and '0.1' mean the same."""
    def read(text: str) -> object:
        try:
            return parse(text, hint)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return read


class InputError(Exception):
    """Bad input from the user: reported as one line, exit status 2."""


def write_json(path: Path, data: dict, prog: str) -> None:
    try:
        path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise SystemExit(f"{prog}: error: --metrics-json: cannot write {path} ({exc.strerror})") from None


def check_writable(path: Path) -> None:
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK):
        raise InputError(f"--metrics-json: cannot write {path} (" + (
            "it is a folder" if path.is_dir() else "no such folder" if not folder.is_dir() else "not writable") + ")")




def open_records(path: Path | None) -> TextIO | None:
    """The --records file, opened for writing now (a bad path is said before anything runs)."""
    try:
        return path.open("w", encoding="utf-8") if path else None
    except OSError as exc:
        raise InputError(f"--records: cannot write {path} ({exc.strerror})") from None


def run_to_end(run: Callable[[], T], records: TextIO | None) -> T:
    """run(), closing the records file either way; Ctrl-C ends the program with one line and status 130."""
    try:
        return run()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    finally:
        if records:
            records.close()
