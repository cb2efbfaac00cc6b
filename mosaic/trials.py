"""Running a sweep's trials (:mod:`mosaic.sweep`): the plan, the datasets first, each trial in its own
subprocess and run folder (locally in threads, or as Ray tasks), its status file, and the results
table (``results.csv`` / ``results.parquet``, one row per trial).

A finished trial (its run's DONE beside it) is skipped on rerun; a failed one is recorded with its error and does not
stop the others; a trial folder whose config changed since it ran is refused."""

from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Callable

import yaml

from mosaic.claims import sweep_claim_problems
from mosaic.diagnostics.columns import analysis_columns
from mosaic.errors import MosaicError, SweepError
from mosaic.evaluation.cell_sets import cell_set_columns
from mosaic.evaluation.trial_scores import check_run_scores, seconds_ok
from mosaic.evaluation.table import check_row, table_columns, table_problem
from mosaic.io import atomic_write, atomic_writer, make_output_dir, open_append, own_folders, read_json
from mosaic.lab.config import config_diff, read_config_yaml, validate_config
from mosaic.locks import FolderLock
from mosaic.overrides import read_yaml_file
from mosaic.trial_runs import SWEEP_CONFIG, changed_trial_config, copy_problem, foreign_run, sweep_base_config, trial_time_problem
from mosaic.sweep import LABEL, MAX_SWEEP_WORKERS, SweepSpec, check_sweep_options, expand, trial_config, trial_id  # noqa: F401


def _trainer(kind: str):
    """(config class, DatasetSection accessor) of a trainer kind."""
    if kind == "diffusion":
        from mosaic.lab.diffusion import DiffusionConfig

        return DiffusionConfig
    from mosaic.lab.transformer import TransformerConfig

    return TransformerConfig


def plan(sweep: SweepSpec, out: Path, base: dict | None = None) -> list[dict]:
    """Every trial's id, axis values, folder, validated config and dataset folder, writing nothing.

    Raises: SweepError / SpecError / ConfigError for a trial whose config or spec is invalid
    (checked for every trial before anything runs).
    """
    from mosaic.lab.data import resolve_dataset

    cls = _trainer(sweep.kind)
    trials, datasets = [], {}
    base = read_config_yaml(sweep.config) if base is None else base
    for values in expand(sweep):
        raw = trial_config(sweep, values, base)
        tid = trial_id(values)
        if not (out / "trials" / tid).exists() and (out / "trials" / trial_id(values, legacy=True)).is_dir():
            tid = trial_id(values, legacy=True)  # a sweep folder made before long names kept their seed
        cfg = validate_config(cls, raw, source=f"trial {tid}")
        key = json.dumps(cfg.dataset.model_dump(mode="json"), sort_keys=True)
        if key not in datasets:
            datasets[key] = resolve_dataset(cfg.dataset, generate=False)
        trials.append({"id": tid, "values": values, "dir": out / "trials" / tid, "dataset": datasets[key], "raw": raw, "cfg": cfg})
    if sweep.report.claims or sweep.report.cells:  # a claim naming a column the trials will not have is an error now, not after the run
        problems = sweep_claim_problems(sweep.report.claims, trials, sweep.kind, sweep.report.cells)
        if problems:
            raise SweepError(f"invalid sweep {sweep.name}\n" + "\n".join(f"  {p}" for p in problems))
    return trials


def prepare(sweep: SweepSpec, out: Path, on_progress: Callable[[str], None] | None = None) -> list[dict]:
    """Write every trial's folder and config, and generate the datasets they need (once per spec).

    Returns the trials as dicts: ``id``, ``values``, ``dir``, ``dataset``.
    Raises: as :func:`plan`, before anything is written.
    """
    from mosaic.lab.data import resolve_dataset

    base = read_config_yaml(sweep.config)
    trials = plan(sweep, out, base)
    _refuse_changed_trials(trials)
    make_output_dir(out, "out")
    atomic_write(out / "sweep.yaml", yaml.safe_dump(sweep.model_dump(mode="json"), sort_keys=False))
    # the training config the trials were made from, kept with them: `mosaic report` compares each trial's config with
    # it wherever the folder lies and whatever the config file says now (mosaic.trial_runs.sweep_base_config)
    copy = yaml.safe_dump(base, sort_keys=False).encode("utf-8")
    atomic_write(out / SWEEP_CONFIG, copy)
    copy_digest = hashlib.sha256(copy).hexdigest()
    # generate each distinct dataset once, before any trial trains on it
    done_roots = set()
    for t in trials:
        root = Path(t["dataset"])
        if root in done_roots:
            continue
        if on_progress:
            on_progress(f"dataset {root}")
        resolve_dataset(t["cfg"].dataset, generate=True)
        done_roots.add(root)
    _own_trial_folders(out, [t["id"] for t in trials])
    for t in trials:
        raw = _trial_raw(t)
        t.pop("raw")
        t.pop("cfg")
        atomic_write(t["dir"] / "config.yaml", yaml.safe_dump(raw, sort_keys=False))
        status = read_status(t["dir"])
        if status.get("status") != "done":  # the sweep's name: collect() names a trial folder copied in from another sweep
            write_status(t["dir"], {"id": t["id"], "values": t["values"], "status": "pending", "dataset": str(t["dataset"]),
                                    "sweep": sweep.name, "sweep_config": copy_digest})
    return trials


def _own_trial_folders(out: Path, ids: list[str]) -> None:
    """``out/trials`` and each ``trials/<id>`` made real folders, a link at one or at its ``run`` removed, never followed (a link at
    ``trials/`` had every trial's config, status and run written into the folder it points to); a file there is refused."""
    rels = ["trials"] + [f"trials/{i}" for i in ids]
    for p in [out / r for r in rels] + [out / r / "run" for r in rels[1:]]:
        if not p.is_symlink() and p.exists() and not p.is_dir():
            raise SweepError(f"{p} is not a folder: a sweep writes its trials there; move it out of {out}, or give another --out")
    own_folders(out, rels)
    for run in [out / r / "run" for r in rels[1:] if (out / r / "run").is_symlink()]:
        run.unlink()


def _trial_raw(t: dict) -> dict:
    """The config a trial's folder holds: its raw config with the dataset and run paths resolved."""
    raw = copy.deepcopy(t["raw"])
    raw["dataset"] = {"path": str(Path(t["dataset"]).resolve())}
    raw["out"] = str((t["dir"] / "run").resolve())
    return raw


def _read_trial_config(p: Path, tdir: Path) -> Any:
    """A trial folder's ``config.yaml`` as the user's YAML files are read (:func:`mosaic.overrides.read_yaml_file`:
    UTF-8 of bounded size, safe tags only, no key twice, aliases and nesting bounded).

    Raises:
        SweepError: naming the file, what is wrong, and the fix (a ``!!python/object`` tag, bytes that are not
            UTF-8 or YAML nested 100,000 deep were a ConstructorError / UnicodeDecodeError / RecursionError
            traceback on a rerun of the sweep).
    """

    def damaged(where: str, message: str) -> SweepError:
        return SweepError(f"{p} is damaged ({message}): delete the trial folder {tdir} to run that trial again, or run the "
                          "sweep into a new folder (--out)")

    return read_yaml_file(p, damaged, kind="trial config")


def _refuse_changed_trials(trials: list[dict]) -> None:
    """A trial folder left by an earlier run of the sweep must hold the same config: a finished
    trial would otherwise be skipped and its old results reported under the new config.

    Raises:
        SweepError: naming each such trial and the fields that differ.
    """

    changed = []
    for t in trials:
        p = t["dir"] / "config.yaml"
        if not p.is_file():
            continue
        # where the run folder and its dataset lie is no difference: a moved or copied sweep folder resumes (the
        # run checks its dataset's identity itself, mosaic.lab.run_folder.RunFolder.open)
        diff = [d for d in config_diff(_read_trial_config(p, t["dir"]), _trial_raw(t)) if d not in ("out", "dataset.path")]
        if diff:
            changed.append(f"  {t['id']} ({read_status(t['dir']).get('status', 'unknown')}): {', '.join(diff[:6])}")
    if changed:
        out = trials[0]["dir"].parent.parent
        raise SweepError(
            f"sweep folder {out} holds trials run with another config:\n" + "\n".join(changed)
            + f"\nrun the changed sweep into a new folder (--out), or delete those trial folders under {out / 'trials'} to rerun them"
        )


def _trial_file(p: Path) -> dict:
    """A trial's JSON file (``trial.json``, ``run/metrics.json``) as a mapping, or SweepError naming
    the file and the fix (not UTF-8, not JSON, nested too deep, not a mapping)."""
    try:
        data = read_json(p)
    except (OSError, ValueError) as e:  # not UTF-8, not JSON, nested too deep (mosaic.io.read_json)
        raise SweepError([(str(p), f"damaged ({type(e).__name__}: {str(e)[:100]}): restore it, or delete the trial folder "
                                   f"{p.parent if p.name == 'trial.json' else p.parent.parent} and rerun `mosaic sweep` to redo the trial")]) from None
    if not isinstance(data, dict):
        raise SweepError([(str(p), f"damaged (a {type(data).__name__}, not a mapping): restore it, or delete the trial folder and rerun "
                                   "`mosaic sweep` to redo the trial")])
    return data


def read_status(tdir: Path) -> dict:
    p = Path(tdir) / "trial.json"
    return _trial_file(p) if os.path.lexists(p) else {}  # a folder or FIFO at its name is named, not read as "no status"


def write_status(tdir: Path, status: dict) -> None:
    p = Path(tdir) / "trial.json"
    atomic_write(p, json.dumps(status, indent=2, default=str))


def trial_command(kind: str, tdir: Path) -> list[str]:
    """The subprocess that runs one trial (train, sample, evaluate)."""
    return [sys.executable, "-m", "mosaic.cli", "train", kind, str(Path(tdir) / "config.yaml")]


def _log_tail(path: Path, lines: int = 15, max_bytes: int = 64 << 10) -> list[str]:
    """The last ``lines`` lines of a trial's ``log.txt``, from at most its last ``max_bytes`` (a log can
    be gigabytes; a FIFO or folder planted at its name is never read)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return []
        os.lseek(fd, max(0, st.st_size - max_bytes), os.SEEK_SET)
        return os.read(fd, max_bytes).decode("utf-8", errors="replace").strip().splitlines()[-lines:]
    finally:
        os.close(fd)


def run_trial(kind: str, tdir: str, env: dict | None = None, timeout_s: float | None = None) -> dict:
    """Run one trial in a subprocess, logging to ``log.txt``; record the outcome in ``trial.json``.

    Pure in the trial folder, so it runs the same in a local pool and on a Ray worker (which must
    see the sweep directory, e.g. on a shared file system). Returns the final status dict.
    """
    tdir = Path(tdir)
    status = read_status(tdir)
    if status.get("status") == "done" and (tdir / "run" / "metrics.json").is_file():
        return status
    if (tdir / "run" / "DONE").is_file() and (tdir / "run" / "metrics.json").is_file():
        # the run finished in an earlier call, which was killed before it wrote trial.json: the trial is done, its time is that
        # call's, lost (None), never a rerun's few seconds (which a report then refused against the run's own time, round 32);
        # the run's figures are checked by `mosaic report` as every trial's
        status.update(status="done", returncode=0, error=None, finished=time.time())
        status["time_s"] = None
        write_status(tdir, status)
        return status
    status.update(status="running", started=time.time(), host=os.uname().nodename, error=None)
    write_status(tdir, status)
    t0 = time.perf_counter()
    full_env = {**os.environ, **(env or {}), "MOSAIC_DIE_WITH_PARENT": "1"}  # the trial ends if this process dies
    with open_append(tdir / "log.txt") as log:  # never through a link planted in the trial folder
        try:
            proc = subprocess.run(trial_command(status.get("kind", kind), tdir), stdout=log, stderr=subprocess.STDOUT,
                                  env=full_env, timeout=timeout_s, cwd=os.getcwd())
            rc = proc.returncode
            err = None
        except subprocess.TimeoutExpired:
            rc, err = -1, f"timed out after {timeout_s} s"
    status["time_s"] = time.perf_counter() - t0
    status["finished"] = time.time()
    metrics = tdir / "run" / "metrics.json"
    if rc == 0 and metrics.is_file():
        status.update(status="done", returncode=0)
    else:
        tail = _log_tail(tdir / "log.txt")
        status.update(status="failed", returncode=rc, error=err or ("\n".join(tail) or f"exit code {rc}"))
    write_status(tdir, status)
    return status


def _gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except Exception:  # pragma: no cover - torch is a dependency
        return 0


def pool_wall_seconds(durations: list[float], slots: int) -> float:
    """Wall seconds of running trials of ``durations`` (seconds each, in submission order) through a
    pool of ``slots`` workers, each taking the next trial as soon as it is free (the local backend,
    :func:`run_local`): greedy list scheduling. Not ``sum / slots``: 9 trials of
    600 s on 2 slots take 3,000 s (the ninth runs alone), not 2,700. ``slots`` below 1 counts as 1."""
    import heapq

    free = [0.0] * max(1, int(slots))
    for d in durations:
        heapq.heappush(free, heapq.heappop(free) + max(0.0, float(d)))
    return max(free)


def cpu_slots(workers: int, threads: int, cores: int | None = None) -> int:
    """How many CPU trials of ``threads`` torch threads run side by side with ``--workers workers``
    on ``cores`` cores (default ``os.cpu_count()``): at most one thread per core."""
    cores = cores if cores is not None else (os.cpu_count() or 1)
    return max(1, min(int(workers), cores // max(int(threads), 1)))


def run_local(kind: str, trials: list[dict], workers: int, timeout_s: float | None,
              on_done: Callable[[dict], None] | None = None) -> list[dict]:
    """Run trials in a local pool of ``workers`` slots. With GPUs, each slot owns one GPU
    (``CUDA_VISIBLE_DEVICES``); on CPU the cores are shared out (``OMP_NUM_THREADS``)."""
    gpus = _gpu_count()
    slots = list(range(workers if gpus else cpu_slots(workers, 1)))  # on CPU at most one trial per core (1024 trials at once: OOM)
    free = list(slots)
    results = []
    threads = max(1, (os.cpu_count() or 1) // len(slots))

    def job(t):
        slot = free.pop()
        try:
            env = {"CUDA_VISIBLE_DEVICES": str(slot % gpus)} if gpus else {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": str(threads)}
            return run_trial(kind, str(t["dir"]), env, t.get("timeout_s", timeout_s))  # a reproduction pools sweeps
        finally:
            free.append(slot)

    with ThreadPoolExecutor(max_workers=len(slots)) as pool:
        futures = {pool.submit(job, t): t for t in trials}
        for f in as_completed(futures):
            st = f.result()
            results.append(st)
            if on_done:
                on_done(st)
    return results


def run_ray(kind: str, trials: list[dict], address: str | None, timeout_s: float | None,
            on_done: Callable[[dict], None] | None = None, num_cpus: int | None = None) -> list[dict]:
    """Run trials as Ray tasks (one GPU each where the cluster has GPUs). ``address`` connects to
    a running cluster (``ray://...`` or ``auto``); None starts a local Ray instance. Every node must
    see the sweep directory and the datasets at the same paths (a shared file system)."""
    try:
        import ray
    except ImportError:
        raise SweepError("--backend ray needs Ray: pip install 'mosaic[ray]'") from None
    started = False
    if not ray.is_initialized():
        kw = {"address": address} if address else {"num_cpus": num_cpus}
        ray.init(include_dashboard=False, log_to_driver=False, **kw)
        started = True
    try:
        gpus = ray.cluster_resources().get("GPU", 0)
        remote = ray.remote(num_gpus=1 if gpus else 0, num_cpus=1)(run_trial)
        refs = {remote.remote(kind, str(t["dir"].resolve()), {"OMP_NUM_THREADS": "1"} if not gpus else None, t.get("timeout_s", timeout_s)): t
                for t in trials}
        results = []
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            st = ray.get(ready[0])
            results.append(st)
            if on_done:
                on_done(st)
        return results
    finally:
        if started:
            ray.shutdown()


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(d, (int, float, str, bool)) or d is None:
        out[prefix] = d
    return out


def result_row(tdir: Path, cells: dict | None = None) -> dict:
    """One results row: the trial's axis values, status, run time, and its metrics (flattened): ``seen.<metric>`` /
    ``held_out.<metric>`` (:func:`mosaic.evaluation.table.table_columns`), ``evaluator.joint``
    (:func:`~mosaic.evaluation.table.check_row`), ``analysis.<...>`` (:func:`mosaic.diagnostics.columns.analysis_columns`),
    ``value.<concept>.<value>`` (the joint accuracy over the test images of that intended value: ``scores.by_value``,
    e.g. a skewed distribution's tail value) and with ``cells`` (``report.cells``) ``cells.<name>.*``
    (:func:`mosaic.evaluation.cell_sets.cell_set_columns`). Raises TypeError & co. on records of other JSON types
    (:func:`_row` names them)."""
    st = read_status(tdir)
    t_s = st.get("time_s")
    if t_s is not None and not seconds_ok(t_s):
        raise SweepError([(str(tdir / "trial.json"), f"damaged: time_s is {t_s!r}, not a time in seconds (finite, >= 0): restore it, "
                                                     "or delete the trial folder and rerun `mosaic sweep`")])
    why = trial_time_problem(st, tdir)
    if why is not None:
        raise SweepError([(str(tdir / "trial.json"), f"damaged: {why}: restore it, or delete the trial folder and rerun `mosaic sweep`")])
    if st.get("status") == "done" and st.get("error"):  # an error text on a done trial went into results (attack round 27)
        raise SweepError([(str(tdir / "trial.json"), "damaged: a done trial with an error: restore it, or delete the trial folder "
                                                     "and rerun `mosaic sweep`")])
    row: dict[str, Any] = {"trial": st.get("id", tdir.name), "status": st.get("status"), "time_s": None if st.get("time_s") is None else float(st["time_s"]),
                           "error": (st.get("error") or "")[-500:] or None}
    row.update(st.get("values", {}))
    mpath = tdir / "run" / "metrics.json"
    if row["status"] == "done" and not ((tdir / "run" / "DONE").is_file() and mpath.is_file()):  # trial.json alone says so
        raise SweepError([(str(tdir / "trial.json"), "says the trial is done, but its run holds no DONE and metrics.json: delete the "
                                                     "trial folder and rerun `mosaic sweep` to redo the trial")])
    if mpath.is_file():
        m = _trial_file(mpath)
        bad = table_problem(m.get("table"))
        if bad is not None:
            raise SweepError([(str(mpath), f"damaged: {bad}, and an accuracy is a fraction in [0, 1] (NaN or null when not measured): "
                                           f"restore it, or delete the trial folder {tdir} and rerun `mosaic sweep` to redo the trial")])
        check_run_scores(tdir / "run", m)  # the table from its scores, from its samples' verdicts (attack round 23)
        row.update(table_columns(m.get("table")))
        # the parser's match quality and abstention (diffusion; mosaic.evaluation.quality.quality_summary):
        # <group>.quality, <group>.raw.<concept> / .raw.joint (accuracy before abstention), abstention.*
        q = (m.get("scores") or {}).get("quality") or {}
        for g in ("seen", "held_out"):
            qg = q.get(g) or {}
            if qg.get("quality") is not None:
                row[f"{g}.quality"] = qg["quality"]
                row[f"{g}.raw.joint"] = qg["joint_accuracy_without_abstention"]
                row.update({f"{g}.raw.{c}": v for c, v in (qg.get("accuracy_without_abstention") or {}).items()})
        for c, vals in ((m.get("scores") or {}).get("by_value") or {}).items():
            for v, r in vals.items():
                if isinstance(r.get("joint_accuracy"), (int, float)):
                    row[f"value.{c}.{v}"] = r["joint_accuracy"]
        if "verdicts_changed" in q:
            row["abstention.abstained"] = q["abstained"]
            row["abstention.verdicts_changed"] = q["verdicts_changed"]
        row.update(cell_set_columns((m.get("scores") or {}).get("grid"), cells or {}))
        row.update(analysis_columns(m.get("analysis")))  # the representation diagnostics (mosaic analyze)
        joint = check_row(m.get("evaluator_check")).get("joint")
        if isinstance(joint, (int, float)):
            row["evaluator.joint"] = joint
        for k, v in _flatten({k: v for k, v in m.items() if k not in ("table", "evaluator_check", "analysis")}).items():
            if k.startswith("scores.by_value."):
                continue  # already the value.* columns
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                row.setdefault(f"metrics.{k}", v)
    return row


def folder_sweep(out: Path) -> tuple[dict, SweepSpec | None]:
    """The sweep a sweep folder was run with (its ``sweep.yaml``): the mapping, and the SweepSpec
    when it validates as one (a folder of an older mosaic may hold less); ``({}, None)`` without one.

    Raises:
        SweepError: ``sweep.yaml`` is not a readable YAML mapping (names it and the fix)."""
    p = Path(out) / "sweep.yaml"
    if not os.path.lexists(p):  # anything else at its name (a folder) is named below
        return {}, None
    try:
        data = read_config_yaml(p)
        if not isinstance(data, dict):
            raise MosaicError(f"a {type(data).__name__}, not a mapping")
    except MosaicError as e:
        raise SweepError([(str(p), f"damaged ({str(e).splitlines()[0][:120]}): restore it, or rerun the sweep into a new folder")]) from None
    try:
        return data, SweepSpec.model_validate(data)
    except (ValueError, MosaicError):  # pydantic's ValidationError is a ValueError: the trial ids cannot be listed
        return data, None


def _json_key(v) -> str:
    """A value as JSON text, so that equal means the same JSON (``false`` is no ``0``, ``1.0`` no ``1``: Python's ``==``
    let a trial.json seed of ``false`` pass as trial 0's, attack round 28)."""
    return json.dumps(v, sort_keys=True, default=str)


def check_trial_folders(out: Path, dirs: list[Path]) -> None:
    """Each trial folder must be one of the sweep's own trials (``sweep.yaml``): its name one of the
    trial ids the sweep expands to, its ``trial.json`` naming that id, those axis values and (when
    recorded) this sweep. A trial folder copied in from another sweep would be reported as this
    sweep's: refused, naming it.

    Raises:
        SweepError: naming each foreign trial folder (at most 5) and the fix."""
    data, sweep = folder_sweep(out)
    name = data.get("name")
    expected = ({tid: json.loads(json.dumps(v, default=str)) for v in expand(sweep) for tid in (trial_id(v), trial_id(v, legacy=True))}
                if sweep is not None else None)
    foreign, (base, base_digest) = [], sweep_base_config(out, sweep)
    for d in dirs:
        st = read_status(d)
        if expected is None:  # a sweep.yaml that is no whole sweep: the sweep's name, and the run against the trial's own config
            why = None if st.get("sweep", name) == name else f"its trial.json says it is a trial of sweep {str(st.get('sweep'))[:60]!r}"
            why = why or foreign_run(d, None, st.get("values") if isinstance(st.get("values"), dict) else {})
            if why:
                foreign.append((str(d), why))
            continue
        if d.name not in expected:
            why = f"not a trial of sweep {name!r} (its axis values are not among the sweep's {len(expected)} trials)"
        elif st.get("id", d.name) != d.name or _json_key(st.get("values", expected[d.name])) != _json_key(expected[d.name]):
            why = f"its trial.json names trial {str(st.get('id'))[:60]!r} with values {str(st.get('values'))[:80]}, not this folder's"
        elif st.get("sweep", name) != name:
            why = f"its trial.json says it is a trial of sweep {str(st.get('sweep'))[:60]!r}, not {name!r}"
        else:
            why = (copy_problem(st, base_digest) or changed_trial_config(d, sweep, expected[d.name], base)
                   or foreign_run(d, sweep, expected[d.name]))
            if why is None:
                continue
        foreign.append((str(d), why))
    if foreign:
        raise SweepError(foreign[:5] + [("fix", f"move the trial folders that are not this sweep's out of {Path(out) / 'trials'} "
                                                "(a trial of another sweep is never reported as this one's), then rerun")])


def _row(tdir: Path, cells) -> dict:
    """:func:`result_row`, a ``trial.json`` / ``metrics.json`` field of another JSON type named (attack round 21)."""
    try:
        return result_row(tdir, cells)
    except MosaicError:  # named already (a MosaicError is a ValueError too)
        raise
    except (TypeError, AttributeError, ValueError, KeyError) as e:
        raise SweepError([(str(tdir), f"trial.json or run/metrics.json is damaged ({type(e).__name__}: {str(e)[:100]}): restore it, or "
                                      "delete the trial folder and rerun `mosaic sweep` to redo the trial")]) from None


def collect(out: Path) -> "pd.DataFrame":  # noqa: F821
    """Gather every trial of a sweep folder into ``results.csv`` and ``results.parquet``.

    Raises:
        SweepError: a trial folder that is not one of the sweep's own (:func:`check_trial_folders`),
            a damaged ``trial.json`` or ``metrics.json``."""
    import pandas as pd

    dirs = [d for d in sorted((out / "trials").iterdir()) if d.is_dir()] if (out / "trials").is_dir() else []
    check_trial_folders(out, dirs)
    sweep = folder_sweep(out)[1]
    rows = [_row(d, sweep.report.cells if sweep is not None else None) for d in dirs]
    df = pd.DataFrame(rows)
    axes = [c for c in df.columns if c.startswith(("spec.", "training.", "model.", "dataset.", LABEL)) or c == "seed"]
    sortable = [c for c in axes if df[c].map(lambda v: isinstance(v, (int, float))).all()]
    if sortable:
        df = df.sort_values(sortable, kind="stable").reset_index(drop=True)
    # an axis whose values mix strings and mappings (`distribution: [uniform, {kind: geometric}]`), or strings, booleans and
    # numbers, has no Arrow type: such columns go to Parquet as JSON text (the returned frame keeps the values)
    mixed = [c for c in df.columns if _mixed_column(df[c])]
    buf = io.BytesIO()
    try:  # both files made before either is written: never a new results.csv beside an old results.parquet (attack round 28)
        df.assign(**{c: df[c].map(lambda v: json.dumps(v, sort_keys=True, default=str)) for c in mixed}).to_parquet(buf, index=False)
    except (ValueError, TypeError, ImportError) as e:  # pyarrow's ArrowInvalid / ArrowTypeError are ValueError / TypeError
        raise SweepError([(str(out / "results.parquet"), f"the results cannot be written as Parquet ({str(e)[:160]}): a trial's "
                                                         "trial.json or metrics.json holds a value of another type than the "
                                                         "other trials'; restore it, or delete that trial folder and rerun")]) from None
    # both written to their temporary files before either replaces its file (the renames need no space): a full disk
    # under either leaves the old pair whole (a new results.csv stood beside the old results.parquet, attack round 29)
    with atomic_writer(out / "results.csv") as f_csv, atomic_writer(out / "results.parquet") as f_pq:
        f_csv.write(df.to_csv(index=False).encode("utf-8"))
        f_pq.write(buf.getvalue())
        for f in (f_csv, f_pq):  # a full disk shows here, inside both writers, before the first rename
            f.flush()
            os.fsync(f.fileno())
    return df


def _mixed_column(col) -> bool:
    """Whether a results column holds mappings or lists, or values of several JSON kinds (text, booleans, numbers)."""
    kinds = set()
    for v in col:
        if isinstance(v, (dict, list, tuple)):
            return True
        if v is None or (isinstance(v, float) and v != v):
            continue
        kinds.add("bool" if isinstance(v, bool) else "number" if isinstance(v, (int, float)) else type(v).__name__)
    return len(kinds) > 1


def run_sweep(sweep: SweepSpec, out: Path, backend: str = "local", workers: int = 1, address: str | None = None,
              on_progress: Callable[[str], None] | None = None, on_done: Callable[[dict], None] | None = None):
    """Prepare, run (skipping finished trials) and collect a sweep. Returns ``(trials, results DataFrame)``.

    Holds the sweep folder's lock (:class:`mosaic.locks.FolderLock`) throughout: a second sweep into
    the same folder stops, naming the first, where it ran the first's trials again beside it (each
    refused by its run folder's lock, marked failed in ``trial.json`` while the first still trained).

    Raises:
        SweepError: another process runs a sweep into ``out``; every error of :func:`prepare`."""
    check_sweep_options(backend, workers, address)
    with FolderLock(out, SweepError, "sweep folder", wait=False):
        return _run_sweep(sweep, out, backend, workers, address, on_progress, on_done)


def prepare_todo(sweep: SweepSpec, out: Path, on_progress=None) -> tuple[list[dict], list[dict]]:
    """:func:`prepare`, then the trials still to run, each marked with its sweep's kind and timeout."""
    trials = prepare(sweep, out, on_progress)
    todo = [t for t in trials if read_status(t["dir"]).get("status") != "done"  # done only with its run finished beside it
            or not ((t["dir"] / "run" / "DONE").is_file() and (t["dir"] / "run" / "metrics.json").is_file())]
    for t in todo:
        write_status(t["dir"], {**read_status(t["dir"]), "kind": sweep.kind})
        t.update(kind=sweep.kind, timeout_s=sweep.timeout_s)
    return trials, todo


def _run_sweep(sweep: SweepSpec, out: Path, backend: str, workers: int, address: str | None, on_progress, on_done):
    trials, todo = prepare_todo(sweep, out, on_progress)
    run_pool(backend, sweep.kind, todo, workers, address, sweep.timeout_s, on_done)
    return trials, collect(out)


def run_pool(backend: str, kind: str, todo: list[dict], workers: int, address: str | None, timeout_s: float | None, on_done) -> list[dict]:
    """``todo`` through the local pool (:func:`run_local`) or Ray (:func:`run_ray`); a trial's own
    ``timeout_s`` (set by :func:`prepare_todo`) wins over ``timeout_s``."""
    if backend == "local":
        return run_local(kind, todo, workers, timeout_s, on_done)
    if backend == "ray":
        return run_ray(kind, todo, address, timeout_s, on_done, num_cpus=workers)
    raise SweepError(f"--backend {backend!r}: use local or ray")
