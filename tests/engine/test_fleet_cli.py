"""``python -m engine.fleet``: a trace routed over replicas prints each replica's load and the fleet's
metrics and writes them with each request's replica; bad input is one line and exit status 2."""

from __future__ import annotations

import json

import pytest

from engine.fleet.__main__ import main
from engine.fleet.workload import mooncake_requests, read_mooncake

FLEET = ["--deployment", "llama-3.1-8b@h100-sxm", "--enable-prefix-caching"]


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, out.out, out.err


def last_line(err: str) -> str:
    """The error: loading the model may print its progress bar before it, never after."""
    return err.strip().splitlines()[-1]


def test_a_mooncake_trace_over_a_fleet_reports_each_replica_and_writes_the_metrics(tiny_llama, tmp_path, capsys):
    metrics, records = tmp_path / "m.json", tmp_path / "r.jsonl"
    code, out, err = run(capsys, "--trace", "mooncake-synth", "--duration-s", "4", "--num-replicas", "3",
                         "--router", "dynamo", "--model", tiny_llama, "--metrics-json", str(metrics),
                         "--records", str(records), "--block-size", "16", *FLEET)
    assert code == 0, err
    m = json.loads(metrics.read_text())
    assert m["router"] == "dynamo" and m["num_replicas"] == 3 and len(m["replicas"]) == 3
    assert {"request_throughput", "median_ttft_ms", "ttft_ms_p99", "prefix_reuse_ratio"} <= set(m)
    assert sum(r["num_requests"] for r in m["replicas"]) == len(m["requests"]) > 0
    assert {r["replica"] for r in m["requests"]} <= {0, 1, 2}
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    routes = [rec for rec in lines if rec["kind"] == "route"]
    assert len(routes) == len(m["requests"])
    assert all(rec["decision"]["why"] and len(rec["decision"]["candidates"]) == 3 for rec in routes)
    assert [rec["decision"]["replica"] for rec in routes] == [r["replica"] for r in m["requests"]]
    assert "router dynamo over 3 replicas" in out and "prefix reuse" in out


def test_requests_drawn_at_a_rate_and_sessions_sharing_system_prompts(tiny_llama, tmp_path, capsys):
    for load in (["--rate", "3", "--cv", "2"], ["--shared-prefix", "--num-prefixes", "2", "--prefix-tokens", "32"]):
        metrics = tmp_path / "m.json"
        code, _, err = run(capsys, *load, "--duration-s", "3", "--num-replicas", "2", "--model", tiny_llama,
                           "--block-size", "16", "--metrics-json", str(metrics), *FLEET)
        assert code == 0, err
        m = json.loads(metrics.read_text())
        shared = load[0] == "--shared-prefix"
        assert len(m["requests"]) > 0 and (m["prefix_reuse_ratio"] > 0) == shared, (load, m["prefix_reuse_ratio"])


def test_one_command_serves_a_trace_disaggregated_and_aggregated_and_says_which_wins(tiny_llama, capsys):
    code, out, err = run(capsys, "--trace", "mooncake-conv", "--duration-s", "6", "--num-replicas", "3",
                         "--num-prefill-replicas", "1", "--model", tiny_llama, "--block-size", "16",
                         "--versus-aggregated", "--slo-ttft-ms", "3000", "--slo-tpot-ms", "50", *FLEET)
    assert code == 0, err
    assert "prefill" in out and "GB of KV over ib-ndr" in out and "transfer" in out
    table = out.split("either way")[1].splitlines()[2:]
    assert [line.split()[0] for line in table] == ["TTFT", "TTFT", "ITL", "ITL", "TPOT", "E2E", "requests/s", "goodput"]
    assert all(line.split()[-1] in ("aggregated", "disaggregated", "same") for line in table)


@pytest.mark.parametrize("argv, message", [
    (["--trace", "mooncake-conv", "--num-replicas", "0"], "--num-replicas: num_replicas must be an integer in [1, 64]"),
    (["--trace", "mooncake-conv", "--num-replicas", "10000"], "--num-replicas: num_replicas must be"),
    (["--trace", "mooncake-conv", "--router", "random"], "--router: router must be one of 'round_robin'"),
    (["--trace", "mooncake-conv", "--prefill-load-scale", "-1"], "--prefill-load-scale: prefill_load_scale must be"),
    (["--trace", "mooncake-conv", "--overlap-score-credit", "nan"], "--overlap-score-credit"),
    (["--trace", "mooncake-conv", "--shared-prefix"], "give one load"),
    (["--trace", "mooncake-conv", "--block-tokens", "0"], "--block-tokens: block_tokens must be an integer in [1,"),
    (["--trace", "mooncake-conv", "--rate", "-2"], "rate must be a number of requests/s"),
    (["--trace-file", "/nonexistent/t.jsonl"], "--trace-file: /nonexistent/t.jsonl: no such file"),
    (["--trace", "mooncake-conv", "--num-replicas", "2", "--num-prefill-replicas", "2"],
     "--num-prefill-replicas: num_prefill_replicas must leave at least one decode replica"),
    (["--trace", "mooncake-conv", "--kv-link", "carrier-pigeon"], "--kv-link: kv_link must be one of 'nvlink-4'"),
    (["--trace", "mooncake-conv", "--non-cached-tokens", "-5"], "--non-cached-tokens: non_cached_tokens must be"),
    (["--trace", "mooncake-conv", "--versus-aggregated"], "--versus-aggregated compares a disaggregated fleet"),
])
def test_bad_input_is_one_line_and_exit_status_2(capsys, argv, message):
    code, _, err = run(capsys, *argv, *FLEET)
    assert code == 2 and message in last_line(err) and "Traceback" not in err, err


def test_a_fleet_without_a_deployment_says_why(capsys):
    code, _, err = run(capsys, "--trace", "mooncake-conv")
    assert code == 2 and "a fleet needs a deployment" in last_line(err)


@pytest.mark.parametrize("line, message", [
    ('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [0]', "line 2: not valid JSON"),
    ('[1, 2]', "line 2: must be a JSON object"),
    ('{"timestamp": -5, "input_length": 10, "output_length": 2, "hash_ids": [0]}', "line 2: timestamp must be"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 2, "hash_ids": [0]}', "line 2: input_length must be"),
    ('{"timestamp": 0, "input_length": 9, "output_length": true, "hash_ids": [0]}', "line 2: output_length must"),
    ('{"timestamp": 0, "input_length": 9, "output_length": 2, "hash_ids": [-1]}', "line 2: hash_ids must be"),
    ('{"timestamp": 0, "input_length": 9, "output_length": 2, "hash_ids": []}', "line 2: hash_ids must be"),
])
def test_a_malformed_trace_line_is_named(tmp_path, capsys, line, message):
    good = '{"timestamp": 0, "input_length": 600, "output_length": 20, "hash_ids": [0, 1]}'
    path = tmp_path / "t.jsonl"
    path.write_text(good + "\n" + line + "\n")
    code, _, err = run(capsys, "--trace-file", str(path), *FLEET)
    assert code == 2 and message in last_line(err) and f"--trace-file: {path}" in last_line(err), err
    assert "Loading" not in err  # named before the model loads


def test_equal_hash_ids_are_equal_token_blocks_so_requests_share_real_pages():
    rows = read_mooncake('{"timestamp": 0, "input_length": 1024, "output_length": 64, "hash_ids": [7, 8]}\n'
                         '{"timestamp": 500, "input_length": 1500, "output_length": 32, "hash_ids": [7, 8, 9]}\n')
    a, b = mooncake_requests("mine", 300, rows=rows, block_tokens=16)
    assert a.token_ids == b.token_ids[:32] and len(b.token_ids) == round(1500 * 16 / 512)
    assert (a.max_tokens, b.max_tokens, b.arrival_ms, a.length_scale) == (2, 1, 500.0, 16 / 512)
    c, = mooncake_requests("mine", 300, rows=rows[:1], block_tokens=8)
    assert c.token_ids != a.token_ids[:16]  # a block stands for other tokens at another scale
