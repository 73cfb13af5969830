"""tools/classroom.py without a browser: the balancer's configuration, the budgets it hands each
process, and its refusals. (tests/browser/test_browser_balancer.py runs it for real.)"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from lab import budgets
from tools.classroom import COOKIE, balancer_config, heavy_jobs_each, main


def test_every_process_is_a_backend_pinned_by_its_own_cookie(tmp_path):
    config = balancer_config([9001, 9002, 9003], 8501, "127.0.0.1", tmp_path / "s.sock")
    assert "bind 127.0.0.1:8501" in config and f"cookie {COOKIE} insert" in config
    for i, port in enumerate([9001, 9002, 9003]):
        assert f"server p{i} 127.0.0.1:{port} check cookie p{i}" in config
    haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
    path = tmp_path / "haproxy.cfg"
    path.write_text(config)
    checked = subprocess.run([haproxy, "-c", "-f", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr


@pytest.mark.parametrize(("total", "processes", "each"), [(2, 1, 2), (2, 2, 1), (2, 4, 1), (8, 4, 2), (7, 2, 3)])
def test_heavy_jobs_are_shared_out_and_never_exceed_the_total_unless_each_process_needs_one(total, processes, each):
    assert heavy_jobs_each(total, processes) == each
    assert each * processes <= max(total, processes)


@pytest.mark.parametrize(("value", "expected"), [("1", 1), ("5", 5), ("", 2)])
def test_a_process_takes_its_heavy_jobs_from_the_environment(value, expected, monkeypatch):
    monkeypatch.setenv("LAB_HEAVY_JOBS", value)
    assert budgets._count("LAB_HEAVY_JOBS", 2, "sweeps") == expected


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_bad_heavy_jobs_value_is_named(value, monkeypatch):
    monkeypatch.setenv("LAB_HEAVY_JOBS", value)
    with pytest.raises(RuntimeError, match=f"LAB_HEAVY_JOBS={value!r}"):
        budgets._count("LAB_HEAVY_JOBS", 2, "sweeps")


@pytest.mark.parametrize(("args", "named"), [(["--processes", "0"], "--processes 0"),
                                             (["--heavy-jobs", "0"], "--heavy-jobs 0"),
                                             (["--port", "70000"], "--port 70000")])
def test_bad_arguments_are_named_before_anything_starts(args, named, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2 and named in capsys.readouterr().err
