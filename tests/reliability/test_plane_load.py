"""Many trials' events interleaved through the ledger path (``dualtrack/local/plane_load.py``, at 1,000 trials in
``bench/bench_plane_load.py``): every run's cost converges to what its events say it used, no trial is stopped by
limits it stays inside, and no partition key carries more than its own trial's share of the DynamoDB requests."""

from __future__ import annotations

from typing import Any

from dualtrack.local.plane_load import simulate


def test_interleaved_trials_converge_and_spread_over_their_partitions(aws: dict[str, Any]) -> None:
    figures = simulate(aws, trials=6, teams=3, duplicate_share=0.2)
    assert figures.mismatches == [] and figures.converged == figures.runs == 12
    assert figures.stopped == 0
    # Each trial's events touch its own keys (its trial item, its runs' ledger partitions); the busiest key is one
    # trial's item, read and written by both its runs' events: well under 2/6 of the trials table's requests.
    (_, key), share = figures.hottest("trials")
    assert key.startswith("load-") and share < 2 / 6
    assert figures.hottest("ledger")[1] < 1 / 6
