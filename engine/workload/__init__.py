"""Workloads: the requests a run replays, from a file, a preset, a generator, a trace or a rate.

    item.py       WorkloadItem, one future add_request call, and the rules its fields meet
    files.py      JSON Lines and CSV files, read and written
    presets.py    the built-in workloads
    generator.py  a seeded random workload in engine steps
    load.py       load in time: a real trace, or requests drawn at a rate
    source.py     where a run's requests come from (WorkloadSource), and submit()
"""

from engine.workload.files import FORMATS, dump_workload, format_of, parse_workload
from engine.workload.generator import GeneratorSpec, generate_workload
from engine.workload.item import FIELDS, WorkloadError, WorkloadItem
from engine.workload.presets import PRESETS
from engine.workload.source import WorkloadSource, submit, synthetic_prompt

__all__ = ["FIELDS", "FORMATS", "PRESETS", "GeneratorSpec", "WorkloadError", "WorkloadItem", "WorkloadSource",
           "dump_workload", "format_of", "generate_workload", "parse_workload", "submit", "synthetic_prompt"]
