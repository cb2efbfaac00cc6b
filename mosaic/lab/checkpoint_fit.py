"""Whether a checkpoint's state is one this run can be in, checked before anything is loaded.

``checkpoint.json`` is the record every other file of a checkpoint is checked against, so it is
not digested itself, and its non-tensor state (the optimizer's ``param_groups``, the LR schedule,
the EMA settings) is plain JSON: an edit there (``"lr": 1e9``, ``"lr": "x"``, ``"decay": 0.5``) was
loaded as it stood, and the run trained on with it (NaN losses, exit 0) or stopped in
``optimizer.step`` with a TypeError traceback. The loaded state is compared here with the objects
this run's config has just built (:func:`state_problem`): every setting the config fixes must be the
same value of the same JSON type; what training changes (the learning rate a schedule gives, step
counters, moments) must be of its type and within its bounds, and every tensor the shape of the
parameter it belongs to. ``trainer_state.json`` (digested, but by the same record) likewise
(:func:`trainer_state_problem`).
"""

from __future__ import annotations

import math
from typing import Any

import torch


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same type, all the way down (``True`` is not ``1``, ``(0.9,)`` not ``[0.9]``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype
    return a == b


def _shown(x: Any) -> str:
    return repr(x)[:60]


def _optimizer_problem(got: Any, fresh: dict, shapes: list[tuple]) -> str | None:
    if not isinstance(got, dict) or set(got) != set(fresh) or not isinstance(got.get("param_groups"), list) \
            or not isinstance(got.get("state"), dict):
        return "optimizer: not an optimizer state of this run (keys state and param_groups)"
    if len(got["param_groups"]) != len(fresh["param_groups"]):
        return f"optimizer.param_groups: {len(got['param_groups'])} groups, this run's optimizer has {len(fresh['param_groups'])}"
    for i, (g, f) in enumerate(zip(got["param_groups"], fresh["param_groups"])):
        if not isinstance(g, dict) or set(g) != set(f):
            return f"optimizer.param_groups[{i}]: other settings than this run's optimizer has"
        top = f.get("initial_lr", f["lr"])
        for k, v in g.items():
            if k == "lr":
                if not _number(v) or not 0 <= v <= top:
                    return f"optimizer.param_groups[{i}].lr is {_shown(v)}, not a learning rate in [0, {top}] (the config's lr)"
            elif not _same(v, f[k]):
                return f"optimizer.param_groups[{i}].{k} is {_shown(v)}, but this run's config gives {_shown(f[k])}"
    for key, entry in got["state"].items():
        if type(key) is not int or not 0 <= key < len(shapes) or not isinstance(entry, dict):
            return f"optimizer.state holds an entry {_shown(key)} for no parameter of this model"
        for name, t in entry.items():
            if not (isinstance(t, torch.Tensor) and (t.shape == shapes[key] or (name == "step" and t.numel() == 1))):
                return f"optimizer.state[{key}].{name} is not a tensor of parameter {key}'s shape {list(shapes[key])}"
    return None


def _scheduler_problem(got: Any, fresh: dict) -> str | None:
    if not isinstance(got, dict) or set(got) != set(fresh):
        return "scheduler: not the learning-rate schedule of this run's config"
    top = max(fresh.get("base_lrs") or [0])
    for k, v in got.items():
        if k in ("last_epoch", "_step_count"):
            if type(v) is not int or v < 0:
                return f"scheduler.{k} is {_shown(v)}, not a step count"
        elif k == "_last_lr":
            if not isinstance(v, list) or len(v) != len(fresh[k]) or not all(_number(x) and 0 <= x <= top for x in v):
                return f"scheduler._last_lr is {_shown(v)}, not learning rates in [0, {top}] (the config's lr)"
        elif k in ("base_lrs", "lr_lambdas"):  # what the config gives; the rest is the schedule's own bookkeeping
            if not _same(v, fresh[k]):
                return f"scheduler.{k} is {_shown(v)}, but this run's config gives {_shown(fresh[k])}"
        elif type(v) is not type(fresh[k]):
            return f"scheduler.{k} is {_shown(v)}, not a {type(fresh[k]).__name__}"
    return None


def _ema_problem(got: Any, fresh: dict) -> str | None:
    if not isinstance(got, dict) or set(got) != set(fresh):
        return "ema: not the EMA state of this run's config"
    for k, v in got.items():
        if k == "optimization_step":
            if type(v) is not int or v < 0:
                return f"ema.optimization_step is {_shown(v)}, not a step count"
        elif k == "shadow_params":
            f = fresh[k]
            if not isinstance(v, list) or len(v) != len(f) or not all(
                    isinstance(t, torch.Tensor) and t.shape == s.shape and t.dtype == s.dtype for t, s in zip(v, f)):
                return "ema.shadow_params are not tensors of this model's parameters' shapes"
        elif not _same(v, fresh[k]):
            return f"ema.{k} is {_shown(v)}, but this run's config gives {_shown(fresh[k])}"
    return None


def _schedule_problem(got: dict, scheduler: Any) -> str | None:
    """The learning rates a checkpoint's schedule reached (``_last_lr`` at ``last_epoch``) against what
    this run's schedule gives at that step: ``lr_lambdas`` hold functions, which a state dict cannot
    compare, so a run folder whose config was edited in its warm-up, ``lr_schedule`` or ``steps`` would
    resume on a schedule its first steps never followed."""
    inner = getattr(scheduler, "scheduler", scheduler)  # accelerate wraps the schedule
    lambdas, bases = getattr(inner, "lr_lambdas", None), getattr(inner, "base_lrs", None)
    if not lambdas or not bases or not all(callable(f) for f in lambdas):
        return None
    step = got["last_epoch"]
    want = [b * f(step) for b, f in zip(bases, lambdas)]
    if any(not math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-12) for x, y in zip(got["_last_lr"], want)):
        return (f"scheduler._last_lr is {_shown(got['_last_lr'])} at step {step}, but this run's config gives {_shown(want)} there "
                "(another warm-up, lr_schedule or number of steps)")
    return None


def state_problem(objects: dict, fresh: dict, shapes: list[tuple], scheduler: Any = None) -> str | None:
    """Why the decoded checkpoint state ``objects`` (``optimizer``, ``scheduler``, ``ema``) is not
    one this run's freshly built objects (``fresh``: their ``state_dict()``) can load, or None.
    ``shapes``: the shape of each parameter the optimizer holds, in its order; ``scheduler``: this
    run's schedule object, whose learning rate at the checkpoint's step must be the one recorded."""
    if "optimizer" in fresh and (p := _optimizer_problem(objects.get("optimizer"), fresh["optimizer"], shapes)):
        return p
    if "scheduler" in fresh and (p := _scheduler_problem(objects.get("scheduler"), fresh["scheduler"])):
        return p
    if "scheduler" in fresh and scheduler is not None and (p := _schedule_problem(objects["scheduler"], scheduler)):
        return p
    if "ema" in fresh and (p := _ema_problem(objects.get("ema"), fresh["ema"])):
        return p
    return None


def trainer_state_problem(st: dict) -> str | None:
    """Why ``trainer_state.json`` (its ``step`` already checked) is not the loop's own state, or None:
    ``best`` a finite number or null, ``best_step`` a step up to ``step`` or null, ``train_time_s``
    a finite number >= 0, ``val`` a mapping."""
    if st.get("best") is not None and not _number(st["best"]):
        return f"best is {_shown(st['best'])}, not a number"
    b = st.get("best_step")
    if b is not None and (type(b) is not int or not 0 <= b <= st["step"]):
        return f"best_step is {_shown(b)}, not a step up to {st['step']}"
    if "train_time_s" in st and (not _number(st["train_time_s"]) or st["train_time_s"] < 0):
        return f"train_time_s is {_shown(st['train_time_s'])}, not a time"
    if "val" in st and not isinstance(st["val"], dict):
        return f"val is {_shown(st['val'])}, not a mapping"
    return None
