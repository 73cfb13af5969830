"""Plotly figure builders: pure functions from StepRecords to go.Figure, one module per view.

    blocks.figure(record, previous)         KV block map (GPU pool, CPU swap space)
    queues.figure(records)                  waiting / running / swapped / finished lanes
    budget.figure(record)                   this step's forward pass against its limits
    timeline.requests_figure(records, n)    one row per request across steps
    timeline.metrics_figure(records, n)     gauges over time
    timeline.latency_figure(records)        TTFT and inter-token latency per request
    replay.figure(records)                  the whole history as a Plotly animation
"""
