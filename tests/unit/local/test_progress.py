"""The rehearsal's closing lines: one per run, with what the report says of it."""

from __future__ import annotations

import io
from types import SimpleNamespace

from dualtrack.local.progress import Progress


def test_the_closing_line_gives_each_runs_compile_cache_outcome_and_compile_seconds() -> None:
    stream = io.StringIO()
    report = {"tracks": {
        "gpu": {"status": "succeeded", "backend": "cpu", "stand_in": True, "steps_completed": 12, "attempts": 1,
                "compile": {"cache": "none", "total_s": 0.0}, "cost": {"total_usd": "1.25"}},
        "trn2": {"status": "succeeded", "backend": "compiled", "stand_in": True, "steps_completed": 12,
                 "attempts": 2, "compile": {"cache": "miss", "total_s": 35.44}, "cost": {"total_usd": "0.5"}}},
        "comparison": {"verdict": "inconclusive"}}
    Progress(stream).summary(SimpleNamespace(trial_id="t-1", status="SUCCEEDED", wall_s=63.2, report=report, files=[],
                                             out_dir="out"))
    lines = stream.getvalue().splitlines()
    gpu = next(line for line in lines if line.strip().startswith("gpu"))
    trn2 = next(line for line in lines if line.strip().startswith("trn2"))
    assert "compile cache none, cost 1.25 USD" in gpu
    assert "2 attempt(s), compile cache miss (35.4 s compiling), cost 0.5 USD" in trn2


def test_a_compile_says_so_while_it_runs() -> None:
    stream = io.StringIO()
    progress = Progress(stream)
    progress.job("t-1-trn2", {"event": "compiling", "step": 1, "cached_files": 0})
    progress.job("t-1-trn2", {"event": "compiling", "step": 5, "cached_files": 12})
    first, warm = stream.getvalue().splitlines()
    assert first.endswith("trn2         compiling the training step (first time, about a minute)")
    assert "the cache holds earlier graphs" in warm


def test_a_terminal_gets_a_bar_per_run_and_a_pipe_gets_plain_lines() -> None:
    from rich.console import Console

    from dualtrack.local.progress import TerminalProgress, progress_for

    screen = io.StringIO()
    bars = TerminalProgress(screen, max_steps=12, console=Console(file=screen, force_terminal=True, width=100))
    bars.job("t-1-trn2", {"event": "compiling", "step": 1, "cached_files": 0})
    for step in range(1, 13):
        bars.job("t-1-gpu", {"event": "step", "step": step, "loss": 2.0 - step / 10})
    bars.job("t-1-trn2", {"event": "step", "step": 6, "loss": 1.5})
    bars.close()
    shown = screen.getvalue()
    assert "12/12" in shown and "6/12" in shown and "compiling the training step" in shown
    assert "step 5/12" not in shown  # the bar replaces the step lines
    assert type(progress_for(io.StringIO())) is Progress  # not a terminal: plain lines


def test_the_bars_show_tokens_per_second_and_the_compile_row_stops_at_the_stages_end() -> None:
    from rich.console import Console

    from dualtrack.local.progress import TerminalProgress

    screen = io.StringIO()
    bars = TerminalProgress(screen, max_steps=12, console=Console(file=screen, force_terminal=True, width=120))
    bars.job("t-1-trn2-compile", {"event": "compiling", "step": 1, "cached_files": 0})
    bars.job("t-1-trn2-compile", {"event": "compiled", "steps": 3, "compile_s": 4.0, "cache": "miss"})
    stage = bars.bars.tasks[bars.tasks["trn2-compile"]]
    assert stage.finished and stage.stop_time is not None  # its spinner and elapsed time stop with the stage
    bars.job("t-1-gpu", {"event": "step", "step": 3, "loss": 1.75, "tokens_per_s": 1234.4})
    gpu = bars.bars.tasks[bars.tasks["gpu"]]
    assert gpu.fields["note"] == "loss 1.7500 1,234 tok/s" and gpu.stop_time is None
    bars.job("t-1-gpu", {"event": "done", "status": "succeeded"})
    assert gpu.stop_time is not None and gpu.fields["note"] == "succeeded"
    bars.close()


def test_a_scaling_run_is_known_by_its_job_name_and_gets_a_row_of_its_own() -> None:
    """A job is named ``<trial_id>-<run>``; a scaling run's (``-gpu-n1``) is not the gpu run's."""
    from rich.console import Console

    from dualtrack.local.progress import TerminalProgress, run_of

    assert run_of("t-1-gpu-n1") == "gpu-n1" and run_of("my-trial-trn2-n4") == "trn2-n4"
    assert [run_of(f"t-1-{run}") for run in ("gpu", "trn2", "gpu-fallback", "trn2-compile")] == [
        "gpu", "trn2", "gpu-fallback", "trn2-compile"]
    screen = io.StringIO()
    bars = TerminalProgress(screen, max_steps=12, console=Console(file=screen, force_terminal=True, width=120))
    bars.job("t-1-gpu", {"event": "step", "step": 4, "loss": 1.5})
    bars.job("t-1-gpu-n1", {"event": "step", "step": 2, "loss": 1.75})
    bars.close()
    assert list(bars.tasks) == ["gpu", "gpu-n1"]
    assert bars.bars.tasks[bars.tasks["gpu-n1"]].completed == 2 and bars.bars.tasks[bars.tasks["gpu"]].completed == 4
