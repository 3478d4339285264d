"""Trainer overhead, measured side by side in one process on the same tiny model and data:

  (a) a bare PyTorch loop (forward, backward, clip, AdamW, LR schedule: nothing else),
  (b) this trainer with metrics, progress lines, evals and checkpoints on (its train phase, which excludes
      checkpoint and eval time, is what is compared),
  (c) the Hugging Face ``Trainer`` with the same batch, accumulation, optimizer, schedule and clipping.

Each variant runs ``--repeats`` times, interleaved, with the order rotated every repeat (a run is slower right
after another variant's, so each must follow each other equally often: use a multiple of 3). Two figures per
variant: steps/s over the whole loop (best run), and 1 / median optimizer-step time over all runs, which other load
on the machine disturbs far less. Prints both and the ratios trainer/bare (target >= 0.97) and trainer/HF
(target >= 1.0), plus a paired figure: the median over repeats of each repeat's own ratio, the one least moved by
load that drifts between repeats.
``--backend cuda`` runs all three on an NVIDIA GPU in the spec's precision (bf16 autocast); the bare loop then
synchronizes once at the end of its loop, so its per-step times are host dispatch times.
Usage: .venv/bin/python bench/bench_trainer.py [--steps 40] [--repeats 12] [--threads 1] [--backend cpu|cuda]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "containers")]
os.environ.setdefault("DUALTRACK_METRICS", "off")


def _spec(steps: int, workdir: Path) -> Path:
    trial = json.loads((ROOT / "examples" / "trial-rehearsal.json").read_text())
    trial.pop("fault_injection", None)
    trial["data"]["train_uri"] = str(ROOT / "examples/data/train.jsonl")
    trial["data"]["validation_uri"] = str(ROOT / "examples/data/validation.jsonl")
    trial.update({"max_steps": steps, "checkpoint_interval_steps": max(1, steps // 3)})
    trial["evaluation"] = {"interval_steps": steps, "prompts": [], "max_new_tokens": 1}
    path = workdir / "spec.json"
    path.write_text(json.dumps(trial))
    return path


Result = tuple[float, list[float]]  # (steps/s over the loop, per-step seconds)


def bare_loop(spec_path: Path, backend: str) -> Result:
    import contextlib as ctx

    import torch
    from trainer.data import BatchPlan, SampleStream, TokenisedSet, loss_tokens, read_rows
    from trainer.modeling import build_model, build_tokenizer, token_loss_sum, trainable_parameters
    from trainer.runner import lr_lambda

    from lambdas.domain.trial.layout import gradient_accumulation_steps, track_layout
    from lambdas.domain.trial.rules import parse_trial

    spec = parse_trial(spec_path.read_text(), allow_local_paths=True)
    layout = track_layout(spec, "gpu")
    plan = BatchPlan(spec.micro_batch_size, layout.data_parallel, gradient_accumulation_steps(spec, layout))
    tok = build_tokenizer(spec)
    model = build_model(spec, tok)
    device = torch.device("cuda" if backend == "cuda" else "cpu")
    model.to(device)
    bf16 = backend == "cuda" and spec.precision == "bf16"
    stream = SampleStream(TokenisedSet.build(read_rows(spec.data.train_uri), tok, spec.sequence_length),
                          spec.data.shuffle_seed)
    params = trainable_parameters(model)
    opt = torch.optim.AdamW(params, lr=spec.learning_rate, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(spec.max_steps))
    started = time.perf_counter()
    times = []
    for step in range(spec.max_steps):
        t = time.perf_counter()
        ids, labels = stream.take(step * plan.global_batch, plan.global_batch)
        norm = float(loss_tokens(labels))
        for mids, mlabels in plan.micro_batches(ids.to(device), labels.to(device)):
            with torch.autocast("cuda", dtype=torch.bfloat16) if bf16 else ctx.nullcontext():
                loss = token_loss_sum(model, mids, mlabels) / norm
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t)
    if backend == "cuda":
        torch.cuda.synchronize()
    return spec.max_steps / (time.perf_counter() - started), times


def this_trainer(spec_path: Path, workdir: Path, index: int, backend: str) -> Result:
    from trainer.config import RunConfig
    from trainer.runner import run

    run_dir = workdir / f"trainer-{index}"
    cfg = RunConfig(spec_uri=str(spec_path), track="gpu", run_dir=str(run_dir), backend=backend, trial_id="bench",
                    run="gpu", attempt=1, progress=True)
    with contextlib.redirect_stdout(io.StringIO()):  # progress lines are produced, just not shown
        assert run(cfg) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    records = [json.loads(line) for line in (run_dir / "attempt-1" / "metrics.jsonl").read_text().splitlines()]
    times = [r["step_time_s"] for r in records if r["kind"] == "step"]
    return summary["steps_this_attempt"] / summary["phases"]["train_s"], times


def hf_trainer(spec_path: Path, workdir: Path, index: int, backend: str) -> Result:
    import torch
    from trainer.data import TokenisedSet, read_rows
    from trainer.modeling import build_model, build_tokenizer
    from transformers import Trainer, TrainerCallback, TrainingArguments

    times: list[float] = []

    class StepTimes(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            self.t = time.perf_counter()

        def on_step_end(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            times.append(time.perf_counter() - self.t)

    from lambdas.domain.trial.rules import parse_trial

    spec = parse_trial(spec_path.read_text(), allow_local_paths=True)
    tok = build_tokenizer(spec)
    model = build_model(spec, tok)
    data = TokenisedSet.build(read_rows(spec.data.train_uri), tok, spec.sequence_length)
    rows = [{"input_ids": data.input_ids[i], "labels": data.labels[i]} for i in range(len(data))]
    args = TrainingArguments(
        output_dir=str(workdir / f"hf-{index}"), per_device_train_batch_size=spec.micro_batch_size,
        gradient_accumulation_steps=spec.effective_batch_size // spec.micro_batch_size, max_steps=spec.max_steps,
        learning_rate=spec.learning_rate, weight_decay=0.0, max_grad_norm=1.0, lr_scheduler_type="linear",
        warmup_steps=max(1, spec.max_steps // 10), save_strategy="no", eval_strategy="no", report_to=[],
        logging_steps=spec.max_steps, use_cpu=backend != "cuda", bf16=backend == "cuda" and spec.precision == "bf16",
        dataloader_num_workers=0, seed=spec.seed,
        disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=rows,
                      data_collator=lambda b: {k: torch.stack([r[k] for r in b]) for k in b[0]},
                      callbacks=[StepTimes()])
    output = trainer.train()
    return spec.max_steps / float(output.metrics["train_runtime"]), times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (0: torch's default); 1 is far steadier on a shared 2-core VM")
    parser.add_argument("--backend", choices=("cpu", "cuda"), default="cpu",
                        help="cpu (the stand-in, fp32) or cuda (an NVIDIA GPU, the spec's precision)")
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)

    workdir = Path(tempfile.mkdtemp(prefix="bench-trainer-"))
    spec = _spec(args.steps, workdir)
    results: dict[str, list[Result]] = {"bare": [], "trainer": [], "hf": []}
    variants = {"bare": lambda i: bare_loop(spec, args.backend),
                "trainer": lambda i: this_trainer(spec, workdir, i, args.backend),
                "hf": lambda i: hf_trainer(spec, workdir, i, args.backend)}
    names = list(variants)
    for i in range(args.repeats):
        # Rotate the order each repeat: a run is slower right after another variant's (its garbage, its caches),
        # so each variant must follow each other one equally often.
        for name in names[i % 3:] + names[:i % 3]:
            gc.collect()
            results[name].append(variants[name](i))
    best = {k: max(r[0] for r in v) for k, v in results.items()}
    # The first step of each run pays one-off set-up in every variant; medians skip it.
    median = {k: 1.0 / statistics.median([t for r in v for t in r[1][1:]]) for k, v in results.items()}
    device = torch.cuda.get_device_name() if args.backend == "cuda" else "CPU (stand-in, fp32)"
    print(f"torch {torch.__version__}, {device}, {torch.get_num_threads()} threads, {args.steps} steps x "
          f"{args.repeats} repeats, tiny Llama + LoRA (examples/trial-rehearsal.json)")
    for name, values in results.items():
        print(f"  {name:8s} best {best[name]:7.2f} steps/s  median-step {median[name]:7.2f} steps/s   "
              f"runs: {', '.join(f'{v[0]:.2f}' for v in values)}")
    # Paired: each repeat's three runs sit side by side in time, so a repeat's ratio sees the same machine load;
    # the median over repeats discards the repeats a neighbour disturbed.
    def step_s(kind: str, repeat: int) -> float:
        return statistics.median(results[kind][repeat][1][1:])

    paired = {other: statistics.median(step_s(other, i) / step_s("trainer", i) for i in range(args.repeats))
              for other in ("bare", "hf")}
    for label, figures in (("best run", best), ("median step", median)):
        print(f"{label:12s} trainer / bare loop  = {figures['trainer'] / figures['bare']:.3f}  "
              f"(target >= 0.97, checkpointing excluded)")
        print(f"{label:12s} trainer / HF Trainer = {figures['trainer'] / figures['hf']:.3f}  (target >= 1.0)")
    print(f"{'paired':12s} trainer / bare loop  = {paired['bare']:.3f}  (median over repeats of the per-repeat "
          f"median-step ratio; target >= 0.97)")
    print(f"{'paired':12s} trainer / HF Trainer = {paired['hf']:.3f}  (target >= 1.0)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
