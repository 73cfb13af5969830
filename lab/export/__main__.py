"""Offline pages from the command line:

    python -m lab.export lesson 4 lesson4.html     # a lesson (its number or its id), its run recorded
    python -m lab.export run run.jsonl run.html    # a run saved from the lab (Share / export: Run (JSONL))

Each writes one HTML file that steps through the run in any current browser, from file://, offline.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.export.lesson_page import lesson_page
from lab.export.player import run_page
from lab.export.runfile import load_run
from lab.lessons import LessonError, load_lessons
from lab.recording import Recording


def _lesson(name: str):
    lessons = load_lessons()
    found = [x for x in lessons if name in (x.id, str(x.number), f"{x.number:02d}")]
    if not found:
        raise ValueError(f"no lesson {name!r}; the lessons are {', '.join(str(x.number) for x in lessons)}")
    return found[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.export", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("what", choices=("lesson", "run"))
    parser.add_argument("source", help="the lesson's number or id, or the saved run file")
    parser.add_argument("out", type=Path, help="the HTML file to write")
    args = parser.parse_args(argv)
    try:
        if args.what == "lesson":
            page = lesson_page(_lesson(args.source))
        else:
            path = Path(args.source)
            recording = Recording(load_run(path.read_text(encoding="utf-8")), path.name)
            page = run_page(recording, "Scheduler Loop Lab", f"{path.name}: {len(recording.records)} steps recorded")
        args.out.write_text(page, encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError, LessonError) as exc:
        print(f"python -m lab.export: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
