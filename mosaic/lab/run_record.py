"""The parts of a finished run's ``metrics.json`` that describe the run, derived again from the files they come from.

``mosaic report`` puts a run's numeric record into a sweep's ``results.csv`` (``metrics.*`` columns) and a rerun of
``mosaic train`` on a finished run prints it. Edited in ``metrics.json`` alone, these fields were shown as the run's
(attack round 27). :func:`record_problem` compares each with its source:

========================  ==================================================================================
field                     derived from
========================  ==================================================================================
``params``,               the run's exported weights' record (``RUN/final/weights.json``, else ``best/``): the
``train.params``          model's trained parameters counted when the weights were exported (``params``)
``train.best``            the last row of ``RUN/val.jsonl`` marked ``best``: its step and the value of the metric
                          (no metric: no value and no step)
``train.val``             the last row of ``RUN/val.jsonl`` (its metrics)
``train.processes``,      the run's last checkpoint, checked whole (this run's id, every file's digest, its step
``train.device``          the run's ``training.steps``): its ``processes`` and ``device``; ``global_batch`` is
``train.global_batch``    ``training.batch_size x training.grad_accum x processes`` of the run's config
``train.images_per_s``    ``global_batch x steps / train_time_s``
``train.resumed_at``,     an integer step in [0, steps]; the time of the last call at most the run's;
``train.*time*``,         ``mixed_precision`` one of accelerate's (``no``, ``fp16``, ``bf16``, ``fp8``)
``mixed_precision``
``dataset``               the run's copy of its dataset's manifest (``RUN/dataset_manifest.json``): its name,
                          fingerprint, split counts and sha256 (the ``path`` aside: a moved run keeps its record)
========================  ==================================================================================

A source that is gone (weights or checkpoints deleted to save space, a run of a mosaic before 2026-12-06 whose
records lack a field) leaves its fields unchecked; a source that is there and damaged, or disagrees, is a problem.
Numbers are compared without ever converting a JSON integer too large for a float (an OverflowError was a
traceback, attack round 29). Costs the digest of the last checkpoint's files (about 1 s a GB) and a few small files.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from pathlib import Path

from mosaic.errors import MosaicError
from mosaic.io import MAX_JSON_BYTES, loads_json, read_bounded


def numbers_close(a, b, rel: float = 1e-9, abs_tol: float = 1e-12) -> bool:
    """``math.isclose`` that never raises: a JSON integer too large for a float (an OverflowError was a traceback,
    attack round 29) is compared exactly. The one number comparison of the run record, the trial scores and the audit."""
    try:
        return math.isclose(a, b, rel_tol=rel, abs_tol=abs_tol)
    except OverflowError:
        return a == b


def unmeasured(v) -> bool:
    """None or a float NaN: a metric that could not be measured (JSON has no NaN: ``metrics.json`` writes null where
    ``val.jsonl`` and a checkpoint's ``trainer_state.json`` write NaN; a binding run without swap negatives, round 30)."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def _close(a, b, rel: float = 1e-9) -> bool:
    """Equal values of a record: numbers within ``rel`` relative (a bool is no number; integers too large for a float
    compared exactly; None and NaN alike), mappings key by key, anything else equal."""
    if unmeasured(a) and unmeasured(b):
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return numbers_close(a, b, rel)
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_close(a[k], b[k], rel) for k in a)
    return a == b


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _recorded_params(run: Path) -> tuple[int | None, str | None]:
    """``(params, None)`` from the run's exported weights' record (``final/``, else ``best/``), ``(None, None)`` when none
    records them, or ``(None, why)`` when the record is damaged."""
    from mosaic.lab.checkpoint import read_weights_record

    for d in (run / "final", run / "best"):
        try:
            rec = read_weights_record(d)
        except MosaicError as e:
            return None, str(e).splitlines()[0][:200]
        if rec is not None and "params" in rec:
            if not _int(rec["params"]) or rec["params"] < 0:
                return None, f"{d / 'weights.json'} records params {str(rec['params'])[:40]!r}, not a count"
            return rec["params"], None
    return None, None


def _val_rows(run: Path) -> tuple[list[dict] | None, str | None]:
    """``(rows, None)`` of ``RUN/val.jsonl``, ``(None, None)`` when it is not there, ``(None, why)`` when anything else
    stands at its name (a FIFO, a folder) or it cannot be read."""
    p = run / "val.jsonl"
    if not os.path.lexists(p):
        return None, None
    try:
        rows = [loads_json(line) for line in read_bounded(p, 1 << 30).decode("utf-8").splitlines() if line.strip()]
    except (OSError, ValueError) as e:  # FileReadError (a FIFO, a folder, too large) is an OSError
        return None, f"{p} cannot be read ({str(e)[:120]})"
    if not all(isinstance(r, dict) for r in rows):
        return None, f"{p} holds a row that is no JSON object"
    return rows, None


def _checkpoint_problem(run: Path, tr: dict, steps) -> str | None:
    """Why the run's last checkpoint does not give its ``train.processes`` / ``train.device``, or None (the same, or no
    checkpoint left)."""
    from mosaic.lab.checkpoint import read_record
    from mosaic.lab.run_folder import RunFolder

    rf = RunFolder(run)
    try:
        ck = rf.latest_checkpoint()
    except (OSError, ValueError) as e:
        return f"its checkpoints cannot be listed ({str(e)[:120]})"
    if ck is None:
        return None
    try:
        rec = read_record(ck, rf.run_id())  # this run's id, every file's size and sha256: a planted record is refused
    except MosaicError as e:
        return f"its last checkpoint is not whole ({str(e).splitlines()[0][:200]})"
    if _int(steps) and rec.get("step") != steps:
        return f"its last checkpoint ({ck.name}) is of step {str(rec.get('step'))[:20]}, not the run's last step {steps}"
    for k in ("processes", "device"):
        if k in rec and k in tr and not _close(tr[k], rec[k]):
            return f"its train.{k} is {str(tr[k])[:60]!r}, but the run's last checkpoint records {str(rec[k])[:60]!r}"
    try:  # listed in the record with its digest, checked above: where training stood at its last step
        st = loads_json(read_bounded(ck / "trainer_state.json", MAX_JSON_BYTES))
    except (OSError, ValueError) as e:
        return f"its last checkpoint's trainer_state.json cannot be read ({str(e)[:100]})"
    st = st if isinstance(st, dict) else {}
    best = tr.get("best") if isinstance(tr.get("best"), dict) else {}
    pairs = [("train_time_s", tr.get("train_time_s"), st.get("train_time_s")), ("val", tr.get("val"), st.get("val")),
             ("best.value", best.get("value"), st.get("best")), ("best.step", best.get("step"), st.get("best_step"))]
    for name, got, want in pairs:  # forged in metrics.json and val.jsonl together, they were reported (attack round 30)
        if name.split(".")[0] in st or name.startswith("best") and ("best" in st or "best_step" in st):
            if not _close(got, want):
                return f"its train.{name} is {str(got)[:60]}, but the run's last checkpoint records {str(want)[:60]}"
    return None


#: accelerate's mixed-precision modes
PRECISIONS = ("no", "fp16", "bf16", "fp8")


def _train_problem(run: Path, tr: dict, cfg: dict | None) -> str | None:
    """The first field of ``metrics.json``'s ``train`` section its sources contradict (see the module docstring)."""
    training = (cfg or {}).get("training") if isinstance(cfg, dict) else None
    steps = tr.get("steps")
    rows, why = _val_rows(run)
    if why is not None:
        return why
    best = tr.get("best")
    if "best" in tr:
        if not isinstance(best, dict):
            return f"its train.best is {str(best)[:60]!r}, not a record of the best validation"
        if best.get("metric") is None:
            if best.get("value") is not None or best.get("step") is not None:
                return f"its train.best names no metric but records value {str(best.get('value'))[:30]} at step {str(best.get('step'))[:20]}"
        elif not isinstance(best["metric"], str):
            return f"its train.best.metric is {str(best['metric'])[:40]!r}, not a metric's name"
        elif rows is not None:
            marked = [r for r in rows if r.get("best") is True]
            last = marked[-1] if marked else {}
            want = {"metric": best["metric"], "step": last.get("step"), "value": last.get(best["metric"])}
            if not all(_close(best.get(k), v) for k, v in want.items()):
                return (f"its train.best is {json.dumps(best, default=str)[:120]}, but the last best row of its val.jsonl gives step "
                        f"{str(want['step'])[:20]}, value {str(want['value'])[:30]}")
    if "val" in tr:
        if not isinstance(tr["val"], dict):
            return f"its train.val is {str(tr['val'])[:60]!r}, not the metrics of a validation"
        if rows:
            last = {k: v for k, v in rows[-1].items() if k not in ("step", "best")}
            if not _close(tr["val"], last):
                return "its train.val is not the last row of its val.jsonl"
    why = _checkpoint_problem(run, tr, steps)
    if why is not None:
        return why
    if isinstance(training, dict) and "global_batch" in tr and "processes" in tr:
        b, a = training.get("batch_size"), training.get("grad_accum", 1)
        if _int(b) and _int(a) and _int(tr["processes"]) and not _close(tr["global_batch"], b * a * tr["processes"]):
            return (f"its train.global_batch is {str(tr['global_batch'])[:40]}, but its config's batch_size x grad_accum x its "
                    f"processes is {b * a * tr['processes']}")
    g, t = tr.get("global_batch"), tr.get("train_time_s")
    if "images_per_s" in tr and _int(g) and _int(steps) and isinstance(t, (int, float)) and not isinstance(t, bool):
        try:
            want = g * steps / max(float(t), 1e-9)
        except OverflowError:
            want = None
        if want is not None and not _close(tr["images_per_s"], want, rel=1e-6):
            return f"its train.images_per_s is {str(tr['images_per_s'])[:40]}, but global_batch x steps / train_time_s is {want:.6g}"
    if "resumed_at" in tr and not (_int(tr["resumed_at"]) and 0 <= tr["resumed_at"] and (not _int(steps) or tr["resumed_at"] <= steps)):
        return f"its train.resumed_at is {str(tr['resumed_at'])[:40]!r}, not a step of the run (0 to {steps})"
    c = tr.get("train_time_this_call_s")
    if isinstance(c, (int, float)) and isinstance(t, (int, float)) and not isinstance(c, bool) and not isinstance(t, bool):
        try:
            longer = float(c) > float(t) * (1 + 1e-9) + 1e-6
        except OverflowError:
            longer = True
        if longer:
            return f"its train.train_time_this_call_s ({str(c)[:30]}) is longer than the run's train_time_s ({str(t)[:30]})"
    mp = tr.get("mixed_precision")
    if "mixed_precision" in tr and mp not in PRECISIONS:
        return f"its train.mixed_precision is {str(mp)[:40]!r}, not one of {', '.join(PRECISIONS)}"
    asked = training.get("mixed_precision", "auto") if isinstance(training, dict) else None
    if "mixed_precision" in tr and isinstance(asked, str):  # mosaic.lab.loop.resolve_precision: auto is bf16 on a GPU only
        gpu = isinstance(tr.get("device"), str) and not tr["device"].startswith("cpu")
        if (asked != "auto" and mp != asked) or (asked == "auto" and mp != "no" and not (gpu and mp == "bf16")):
            return (f"its train.mixed_precision is {mp!r}, but its config asks {asked!r} on {str(tr.get('device'))[:20]} "
                    "(auto: bf16 on a GPU that supports it, else no)")
    return None


def record_problem(run: Path, metrics: dict, cfg: dict | None) -> tuple[Path, str] | None:
    """``(file, why)`` for the first field of a finished run's ``metrics`` (its ``metrics.json``) that is not what its
    source gives (see the module docstring), or None."""
    run = Path(run)
    mpath = run / "metrics.json"
    tr = metrics.get("train") if isinstance(metrics.get("train"), dict) else {}
    n, why = _recorded_params(run)
    if why is not None:
        return mpath, f"its params cannot be checked: {why}"
    for where, got in (("params", metrics.get("params", n)), ("train.params", tr.get("params", n))):
        if n is not None and not _close(got, n):
            return mpath, f"its {where} is {str(got)[:40]}, but the run's exported weights record {n:,} trained parameters"
    why = _train_problem(run, tr, cfg)
    if why is not None:
        return mpath, why
    ts, c = metrics.get("time_s"), tr.get("train_time_this_call_s")
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (ts, c)):
        try:
            shorter = float(ts) < float(c) - 1e-6
        except OverflowError:
            shorter = True
        if shorter:  # the call's time holds its training (a time_s of 0.001 beside 0.1 s of training was reported, round 30)
            return mpath, f"its time_s ({str(ts)[:30]}) is shorter than the training it holds (train.train_time_this_call_s {str(c)[:30]})"
    ds = metrics.get("dataset")
    if isinstance(ds, dict) and os.path.lexists(run / "dataset_manifest.json"):
        try:
            raw = read_bounded(run / "dataset_manifest.json", MAX_JSON_BYTES)
            man = loads_json(raw)
        except (OSError, ValueError):
            return run / "dataset_manifest.json", "cannot be read, so the run's dataset record cannot be checked"
        man = man if isinstance(man, dict) else {}
        splits = man.get("splits") if isinstance(man.get("splits"), dict) else {}
        want = {"name": man.get("name"), "fingerprint": man.get("fingerprint"),
                "splits": {k: v.get("count") if isinstance(v, dict) else None for k, v in splits.items()},
                "manifest_sha256": hashlib.sha256(raw).hexdigest()}
        for k, v in want.items():
            if k in ds and json.dumps(ds[k], sort_keys=True, default=str) != json.dumps(v, sort_keys=True, default=str):
                return mpath, f"its dataset.{k} is {str(ds[k])[:80]}, but the run's copy of its dataset's manifest gives {str(v)[:80]}"
    return None
