"""A scenario (what a link restores, and the run it stands for) and its query parameters."""

from lab.link.params import decode_scenario, encode_scenario
from lab.link.scenario import (
    LINK_LIST,
    Scenario,
    changed_knobs,
    open_scenario,
    scenario_changes,
    scenario_config,
    scenario_of,
    scenario_workload,
)

__all__ = ["LINK_LIST", "Scenario", "changed_knobs", "decode_scenario", "encode_scenario", "open_scenario",
           "scenario_changes", "scenario_config", "scenario_of", "scenario_workload"]
