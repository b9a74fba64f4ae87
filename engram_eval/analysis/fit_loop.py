"""The training loop ``train-reranker`` and ``train-encoder`` share.

:func:`run_training` seeds every generator (``transformers.set_seed``), asks torch for
deterministic algorithms, hands the caller the trainer arguments both commands use (epochs or
``max_steps``, batch size, learning rate, warm-up share, seed and data seed, a loss logged
every step, no checkpoint, no report, CPU, no data-loader workers) and a callback that stops
training after ``time_budget_s`` and, with ``log``, prints one line per ~5% of the steps
instead of a progress bar; the caller builds the model, data and sentence-transformers
trainer (the model after the seeding, so a new head is seeded too), and gets back the
trainer after training and the card's ``training`` record: steps, planned steps, whether the
budget stopped it, the loss curve.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from typing import Any


def run_training(name: str, s: Any, log: Any,
                 build: Callable[[dict[str, Any], list[Any]], Any]) -> tuple[Any, dict[str, Any]]:
    """See the module docstring. ``s``: the command's settings (``seed``, ``epochs``,
    ``max_steps``, ``batch_size``, ``learning_rate``, ``warmup_ratio``, ``time_budget_s``);
    ``build(args, callbacks)`` returns the trainer."""
    try:
        import torch
        from transformers import TrainerCallback, set_seed
    except ImportError as e:  # pragma: no cover - core dependencies
        from engram_eval.errors import ConfigError

        raise ConfigError(f"{name} needs sentence-transformers, datasets and torch ({e}); "
                          "pip install 'engram-eval'") from None
    set_seed(s.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    budget = s.time_budget_s
    started = time.time()

    class Progress(TrainerCallback):  # type: ignore[misc]
        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            if budget and time.time() - started > budget:
                control.should_training_stop = True
            if log is not None and state.max_steps and (
                    state.global_step % max(1, state.max_steps // 20) == 0):
                loss = next((h["loss"] for h in reversed(state.log_history) if "loss" in h),
                            None)
                log(f"{name}: step {state.global_step}/{state.max_steps}, "
                    f"{time.time() - started:.0f} s"
                    + (f", loss {loss:.4f}" if loss is not None else ""))
            return control

    with tempfile.TemporaryDirectory(prefix=f"engram-{name}-") as scratch:
        args = {"output_dir": scratch, "num_train_epochs": s.epochs,
                "max_steps": s.max_steps or -1, "per_device_train_batch_size": s.batch_size,
                "learning_rate": s.learning_rate, "warmup_ratio": s.warmup_ratio,
                "seed": s.seed, "data_seed": s.seed, "logging_steps": 1,
                "save_strategy": "no", "report_to": [], "disable_tqdm": log is not None,
                "use_cpu": True, "dataloader_num_workers": 0}
        trainer = build(args, [Progress()])
        if log is not None:  # one line per ~5% of the steps (Progress), not one per step
            from transformers.trainer_callback import PrinterCallback

            trainer.remove_callback(PrinterCallback)
        trainer.train()
        state = trainer.state
    losses = [{"step": int(h["step"]), "loss": float(h["loss"])}
              for h in state.log_history if "loss" in h]
    return trainer, {"steps": int(state.global_step), "max_steps": int(state.max_steps),
                     "stopped_by_budget": bool(budget and state.global_step < state.max_steps),
                     "loss_curve": losses}
