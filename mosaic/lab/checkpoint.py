"""Training checkpoints that load without running code: safetensors for tensors, JSON for the rest.

``accelerate``'s ``save_state`` writes the optimizer, the LR schedule, custom objects (the EMA) and
the RNG states with ``torch.save`` / pickle (``optimizer.bin``, ``custom_checkpoint_0.pkl``,
``random_states_0.pkl``), and ``load_state`` unpickles them: a planted pickle in a shared run folder
would run code on resume. This module writes and reads a checkpoint folder of format
``mosaic-checkpoint/1`` instead::

    checkpoint-NNNNNNN/model.safetensors      the unwrapped model's weights (shared tensors once)
    checkpoint-NNNNNNN/state.safetensors      every tensor of the optimizer, EMA and GradScaler state
    checkpoint-NNNNNNN/rng-<rank>.safetensors the torch CPU (and CUDA) generator states of each process
    checkpoint-NNNNNNN/checkpoint.json        format, run id, step, the non-tensor state as JSON (tensors
                                              referenced by key), and every file's size and sha256
    checkpoint-NNNNNNN/trainer_state.json     step, best value, time (the loop's own state)

Loading (:func:`load_checkpoint`) reads ``checkpoint.json`` first (bounded, UTF-8 JSON) and refuses,
before any other file is opened: another format (an accelerate checkpoint of an older mosaic is
named as such), a checkpoint of another run (its ``run_id`` differs from the run folder's
``run.json``), a file the record does not list (``custom_checkpoint_0.pkl``), a symbolic link,
and a file whose size or sha256 differs from the record. Only then are the safetensors files read
(safetensors holds tensors only: no code can be stored in it). Every refusal is a
:class:`CheckpointError` naming the checkpoint and the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import stat
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mosaic.errors import TrainingError
from mosaic.io import loads_json, read_bounded, read_json
from mosaic.lab.checkpoint_fit import state_problem, trainer_state_problem
from mosaic.lab.run_folder import RunFolder

FORMAT = "mosaic-checkpoint/1"
RECORD = "checkpoint.json"
TRAINER_STATE = "trainer_state.json"
MODEL = "model.safetensors"
STATE = "state.safetensors"
WEIGHTS_RECORD = "weights.json"  # exported weights (best/, final/): the run id and every file's sha256
#: the fix every refusal of exported weights names
_WEIGHTS_FIX = "restore this run's own weights, or train the run again into a new --out"
WEIGHTS_FORMAT = "mosaic-weights/1"
MAX_RECORD_BYTES = 64 << 20  # checkpoint.json is the non-tensor state: small; anything larger is not ours


class CheckpointError(TrainingError):
    """A checkpoint that is not loaded: damaged, of another run, another format, or holding files
    mosaic does not write."""


# ----------------------------------------------------------------------------------------------
# a JSON codec for state dicts: tensors go to a safetensors file, referenced by key
# ----------------------------------------------------------------------------------------------

def _encode(x: Any, tensors: dict[str, torch.Tensor], path: str) -> Any:
    if isinstance(x, torch.Tensor):
        tensors[path] = x.detach().cpu().contiguous()
        return {"__tensor__": path}
    if isinstance(x, bool) or x is None or isinstance(x, (int, float, str)):
        return x
    if isinstance(x, dict):
        return {"__dict__": [[_encode(k, tensors, f"{path}.k{i}"), _encode(v, tensors, f"{path}.{i}")]
                             for i, (k, v) in enumerate(x.items())]}
    if isinstance(x, tuple):
        return {"__tuple__": [_encode(v, tensors, f"{path}.{i}") for i, v in enumerate(x)]}
    if isinstance(x, list):
        return [_encode(v, tensors, f"{path}.{i}") for i, v in enumerate(x)]
    if isinstance(x, np.ndarray):
        return {"__ndarray__": x.tolist(), "dtype": str(x.dtype)}
    if isinstance(x, (np.integer, np.floating)):
        return x.item()
    raise TypeError(f"{path}: a {type(x).__name__} cannot be stored in a checkpoint (tensors, numbers, strings, lists, dicts only)")


def _decode(x: Any, tensors: dict[str, torch.Tensor], where: str) -> Any:
    if isinstance(x, list):
        return [_decode(v, tensors, where) for v in x]
    if not isinstance(x, dict):
        return x
    if set(x) == {"__tensor__"}:
        key = x["__tensor__"]
        if not isinstance(key, str) or key not in tensors:
            raise CheckpointError(f"{where}: {RECORD} refers to tensor {str(key)[:80]!r}, which {STATE} does not hold")
        return tensors[key]
    if set(x) == {"__dict__"} and isinstance(x["__dict__"], list):
        out = {}
        for kv in x["__dict__"]:
            if not (isinstance(kv, list) and len(kv) == 2):
                raise CheckpointError(f"{where}: {RECORD} holds a malformed mapping")
            k = _decode(kv[0], tensors, where)
            if isinstance(k, (list, dict)):
                raise CheckpointError(f"{where}: {RECORD} holds a mapping key that is not a plain value")
            out[k] = _decode(kv[1], tensors, where)
        return out
    if set(x) == {"__tuple__"} and isinstance(x["__tuple__"], list):
        return tuple(_decode(v, tensors, where) for v in x["__tuple__"])
    if set(x) == {"__ndarray__", "dtype"} and x["dtype"] in ("uint32", "int64", "float64", "uint8", "int32"):
        return np.asarray(x["__ndarray__"], dtype=x["dtype"])
    raise CheckpointError(f"{where}: {RECORD} holds an entry mosaic does not write ({sorted(x)[:5]})")


# ----------------------------------------------------------------------------------------------
# files
# ----------------------------------------------------------------------------------------------

def _digest(path: Path) -> tuple[str, int]:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
            size += len(block)
    return h.hexdigest(), size


def _rng_state() -> tuple[dict[str, torch.Tensor], dict]:
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda{i}"] = s
    py = random.getstate()
    npst = np.random.get_state()
    meta = {"python": [py[0], list(py[1]), py[2]],
            "numpy": [npst[0], npst[1].tolist(), int(npst[2]), int(npst[3]), float(npst[4])]}
    return tensors, meta


def _set_rng_state(tensors: dict[str, torch.Tensor], meta: dict, where: str) -> None:
    try:
        torch.set_rng_state(tensors["torch"])
        cuda = [tensors[k] for k in sorted((k for k in tensors if k.startswith("cuda")), key=lambda k: int(k[4:]))]
        if cuda and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(cuda[: torch.cuda.device_count()])
        v, st, gauss = meta["python"]
        random.setstate((int(v), tuple(int(i) for i in st), gauss))
        name, keys, pos, has_gauss, cached = meta["numpy"]
        np.random.set_state((str(name), np.asarray(keys, dtype=np.uint32), int(pos), int(has_gauss), float(cached)))
    except (KeyError, TypeError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{where}: its RNG state is damaged ({type(e).__name__}: {str(e)[:120]})") from None


def save_checkpoint(folder: Path, accelerator, model, optimizer, scheduler, ema, run_id: str, trainer_state: dict) -> None:
    """Write a checkpoint of format ``mosaic-checkpoint/1`` into ``folder`` (which must be new, or
    the empty folder the caller made new with :func:`mosaic.io.new_temp_dir`; the caller renames it
    into place). Call on every process: the main one writes the model and the
    state, each process its ``rng-<rank>.safetensors``.

    Raises:
        OSError: a write failed (a full disk: ENOSPC); the caller removes ``folder``.
    """
    from safetensors.torch import save_file, save_model

    folder = Path(folder)
    rank, world = accelerator.process_index, accelerator.num_processes
    if accelerator.is_main_process and not (folder.is_dir() and not folder.is_symlink() and not any(folder.iterdir())):
        folder.mkdir(parents=True, exist_ok=False)  # else: the empty folder the caller made new (mosaic.io.new_temp_dir)
    accelerator.wait_for_everyone()
    rng_t, rng_meta = _rng_state()
    save_file(rng_t, str(folder / f"rng-{rank}.safetensors"))
    (folder / f"rng-{rank}.json").write_text(json.dumps(rng_meta) + "\n")
    accelerator.wait_for_everyone()
    if not accelerator.is_main_process:
        return
    save_model(accelerator.unwrap_model(model), str(folder / MODEL))
    tensors: dict[str, torch.Tensor] = {}
    objects = {"optimizer": _encode(optimizer.state_dict(), tensors, "optimizer"),
               "scheduler": _encode(scheduler.state_dict(), tensors, "scheduler")}
    if ema is not None:
        objects["ema"] = _encode(ema.state_dict(), tensors, "ema")
    scaler = getattr(accelerator, "scaler", None)
    if scaler is not None:
        objects["scaler"] = _encode(scaler.state_dict(), tensors, "scaler")
    save_file(tensors, str(folder / STATE))
    (folder / TRAINER_STATE).write_text(json.dumps(trainer_state, default=float) + "\n")
    files = {}
    for p in sorted(folder.iterdir()):
        digest, size = _digest(p)
        files[p.name] = {"bytes": size, "sha256": digest}
    record = {"format": FORMAT, "run_id": run_id, "step": int(trainer_state.get("step", 0)), "processes": world,
              "device": str(accelerator.device),  # what a finished run's metrics.json says it trained on is checked against it
              "objects": objects, "files": files}
    with open(folder / RECORD, "w") as f:
        json.dump(record, f)
        f.flush()
        os.fsync(f.fileno())


def read_record(folder: Path, run_id: str | None) -> dict:
    """The checkpoint's ``checkpoint.json``, after every check that needs no other file's content:
    format, run id, the files present against the files listed, links, sizes and digests.

    Raises:
        CheckpointError: naming the checkpoint and why it is not loaded.
    """
    folder = Path(folder)
    rec_path = folder / RECORD
    names = sorted(p.name for p in folder.iterdir())
    if not rec_path.is_file() or rec_path.is_symlink():
        if any(n.endswith((".pkl", ".bin")) for n in names) or "random_states_0.pkl" in names:
            raise CheckpointError(f"{folder} is an accelerate checkpoint (pickle files: "
                                  f"{', '.join(n for n in names if n.endswith(('.pkl', '.bin')))}), written by an older mosaic or "
                                  "by someone else; it is not loaded, because unpickling can run code")
        raise CheckpointError(f"{folder} has no {RECORD}: it was not written by this mosaic (format {FORMAT})")
    try:
        rec = loads_json(read_bounded(rec_path, MAX_RECORD_BYTES))  # a regular file, never more than the bound
    except (OSError, ValueError) as e:  # not UTF-8, not JSON, nested too deep (mosaic.io.loads_json)
        raise CheckpointError(f"{folder}/{RECORD} is damaged ({type(e).__name__}: {str(e)[:120]})") from None
    if not isinstance(rec, dict) or rec.get("format") != FORMAT:
        got = rec.get("format") if isinstance(rec, dict) else None
        raise CheckpointError(f"{folder}/{RECORD}: format {str(got)[:60]!r} is not {FORMAT!r}")
    if run_id is not None and rec.get("run_id") != run_id:
        raise CheckpointError(f"{folder} belongs to another run (run id {str(rec.get('run_id'))[:40]!r}, this run is {run_id!r}): "
                              "a checkpoint copied from another run is never resumed")
    files = rec.get("files")
    if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
        raise CheckpointError(f"{folder}/{RECORD} is damaged: no file list")
    extra = [n for n in names if n != RECORD and n not in files]
    if extra:
        raise CheckpointError(f"{folder} holds files mosaic does not write ({', '.join(extra[:5])}): not loaded "
                              "(move them away if they are yours)")
    for name, info in files.items():
        # a file name of the checkpoint folder itself: never a path, an empty or dot name, or one the file system refuses (NUL)
        if "/" in name or "\x00" in name or name in ("", ".", ".."):
            raise CheckpointError(f"{folder}/{RECORD} is damaged: it lists {name[:80]!r}, which is not a file name of the checkpoint")
        p = folder / name
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            raise CheckpointError(f"{folder}: {name} is missing") from None
        except (OSError, ValueError) as e:  # a name too long for the file system, ...: named, never a traceback
            raise CheckpointError(f"{folder}/{RECORD} is damaged: {name[:80]!r} cannot be looked up ({type(e).__name__}: {str(e)[:80]})") from None
        if not stat.S_ISREG(st.st_mode):
            raise CheckpointError(f"{folder}: {name} is not a regular file (a link, folder or device): not followed")
        if st.st_size != info.get("bytes"):
            raise CheckpointError(f"{folder}: {name} is damaged ({st.st_size} bytes, the record says {info.get('bytes')})")
        if _digest(p)[0] != info.get("sha256"):
            raise CheckpointError(f"{folder}: {name} is damaged (its sha256 differs from the record)")
    return rec


def trained_with(folder: Path) -> dict:
    """``{"device", "processes"}`` of the checkpoint in ``folder`` as its ``checkpoint.json`` records them (read by
    :func:`load_checkpoint` before), each only when recorded as a string / a positive integer; ``{}`` when unreadable."""
    try:
        rec = loads_json(read_bounded(Path(folder) / RECORD, MAX_RECORD_BYTES))
    except (OSError, ValueError):
        return {}
    if not isinstance(rec, dict):
        return {}
    out = {}
    if isinstance(rec.get("device"), str):
        out["device"] = rec["device"]
    if isinstance(rec.get("processes"), int) and not isinstance(rec.get("processes"), bool) and rec["processes"] >= 1:
        out["processes"] = rec["processes"]
    return out


def load_checkpoint(folder: Path, accelerator, model, optimizer, scheduler, ema, run_id: str | None) -> dict:
    """Load a checkpoint written by :func:`save_checkpoint` into the model, optimizer, scheduler,
    EMA, scaler and RNG of this process; returns its ``trainer_state.json``.

    Raises:
        CheckpointError: see :func:`read_record`; a file that does not fit this run's model or
            optimizer (names the object).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file, load_model

    folder = Path(folder)
    rec = read_record(folder, run_id)
    rank = accelerator.process_index
    try:
        st = read_json(folder / TRAINER_STATE)
        if not isinstance(st, dict) or type(st.get("step")) is not int:
            raise ValueError("no step recorded")
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{folder}/{TRAINER_STATE} is damaged ({type(e).__name__}: {str(e)[:120]})") from None
    named = folder.name.rpartition("-")[2]
    if st["step"] != rec.get("step") or (named.isascii() and named.isdigit() and int(named) != st["step"]):  # the step is the checkpoint's own
        raise CheckpointError(f"{folder}/{TRAINER_STATE} is damaged: it records step {st['step']}, but the checkpoint is "
                              f"{folder.name} (its {RECORD} says step {str(rec.get('step'))[:20]})")
    if (bad := trainer_state_problem(st)) is not None:
        raise CheckpointError(f"{folder}/{TRAINER_STATE} is damaged: {bad}")
    objects = rec.get("objects") if isinstance(rec.get("objects"), dict) else {}
    try:
        tensors = load_file(str(folder / STATE))
        # the non-tensor state is the record's own JSON (checkpoint.json is not digested): it must be one this run's config
        # can be in before anything is loaded (mosaic.lab.checkpoint_fit), else `"lr": 1e9` trains on, `"lr": "x"` is a traceback
        decoded = {k: _decode(objects.get(k), tensors, str(folder)) for k in ("optimizer", "scheduler", "ema") if k in objects}
        fresh = {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}
        if ema is not None:
            fresh["ema"] = ema.state_dict()
        shapes = [p.shape for g in optimizer.param_groups for p in g["params"]]
        if (bad := state_problem(decoded, fresh, shapes, scheduler)) is not None:
            raise CheckpointError(f"{folder}/{RECORD} is damaged: {bad}")
        missing, unexpected = load_model(accelerator.unwrap_model(model), str(folder / MODEL), strict=False)
        if missing or unexpected:
            raise ValueError(f"the weights do not fit this model (missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
        optimizer.load_state_dict(decoded.get("optimizer"))
        scheduler.load_state_dict(decoded.get("scheduler"))
        if ema is not None:
            if "ema" not in objects:
                raise ValueError("the run has EMA weights but the checkpoint holds none")
            ema.load_state_dict(decoded["ema"])
        scaler = getattr(accelerator, "scaler", None)
        if scaler is not None and "scaler" in objects:
            scaler.load_state_dict(_decode(objects["scaler"], tensors, str(folder)))
        rng_file = folder / f"rng-{rank}.safetensors"
        if rng_file.is_file():
            meta = read_json(folder / f"rng-{rank}.json")
            _set_rng_state(load_file(str(rng_file)), meta, str(folder))
    except CheckpointError:
        raise
    except (SafetensorError, OSError, ValueError, KeyError, TypeError, RuntimeError, IndexError) as e:
        raise CheckpointError(f"{folder} does not load ({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})") from None
    return st


def write_weights_record(folder: Path, run_id: str | None, model: dict | None = None, params: int | None = None) -> None:
    """Write ``weights.json`` into a folder of exported weights (``best/``, ``final/``, filled before
    it is renamed into place): format, the run's id and every file's size and sha256, so that
    :func:`load_weights_file` refuses weights copied in from another run, or altered; with ``model``
    (the task's :meth:`~mosaic.lab.loop.Task.weights_meaning`: the config's ``model`` section) also
    what the weights mean, which :func:`check_weights_meaning` compares with the config that reads them; with ``params``
    the model's number of trained parameters (``model.parameters()``, buffers such as a positional embedding aside), which a
    finished run's ``metrics.json`` must repeat (:func:`mosaic.lab.run_record.record_problem`)."""
    folder = Path(folder)
    files = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.is_symlink() and p.name != WEIGHTS_RECORD:
            digest, size = _digest(p)
            files[p.relative_to(folder).as_posix()] = {"bytes": size, "sha256": digest}
    rec = {"format": WEIGHTS_FORMAT, "run_id": run_id, "files": files}
    if model is not None:
        rec["model"] = model
    if params is not None:
        rec["params"] = int(params)
    (folder / WEIGHTS_RECORD).write_text(json.dumps(rec, sort_keys=True) + "\n")


def meaning_difference(recorded: Any, current: Any, field: str = "model") -> tuple[str, Any, Any] | None:
    """The first dotted field (sorted keys, depth first) whose value differs between the recorded and
    the current config section, with both values; None when they agree. A key only one side has (a
    field of another mosaic version) is no difference; a section on one side and a value (null) on
    the other is."""
    if isinstance(recorded, dict) and isinstance(current, dict):
        for k in sorted(set(recorded) & set(current), key=str):
            d = meaning_difference(recorded[k], current[k], f"{field}.{k}")
            if d is not None:
                return d
        return None
    return None if recorded == current else (field, recorded, current)


def check_weights_meaning(rec: dict | None, model: dict | None, config_path: Path, weights_dir: Path) -> None:
    """Refuse weights whose record (:func:`read_weights_record`) names another ``model`` section than
    the config ``config_path`` gives now (``model``): a config edited in what the weights mean (the
    conditioning, the noise schedule, the prediction type) without changing a tensor's shape. A record
    without the section (weights exported before it was recorded) is read as before.

    Raises:
        TrainingError: the first differing field, both values, the fix."""
    if rec is None or model is None or "model" not in rec:
        return
    d = meaning_difference(rec["model"], model)
    if d is not None:
        field, old, new = d
        raise TrainingError([(field, f"{config_path} does not describe the run's weights {weights_dir}: {field} is "
                              f"{json.dumps(new)[:200]} there, but the weights were trained with {json.dumps(old)[:200]} (recorded in "
                              f"{Path(weights_dir) / WEIGHTS_RECORD}), so they would be read as another model; restore config.yaml "
                              "from the run (the recorded value), or train a new run (another --out) with this config")])


def check_weights_file(path: Path, weights_dir: Path, rec: dict | None = None) -> bytes | None:
    """Refuse the exported weights file ``path`` of ``weights_dir`` (``RUN/best``, ``RUN/final``)
    unless its ``weights.json`` names this run (``RUN/run.json``) and records the file's sha256.
    Weights exported by a mosaic before the record existed (no ``weights.json`` in ``best/`` nor ``final/``)
    are read unchecked; one folder's record missing beside the other's is refused (:func:`read_weights_record`).

    Returns the file's bytes as read once and digested (None without a record): the caller loads
    those bytes, never the path again, and gives every file of one folder the same ``rec``
    (:func:`read_weights_record`), so a ``best/`` replaced by a resumed training between two files
    (or between the digest and the load) is named, never loaded as half old, half new weights.

    Raises:
        CheckpointError: the weights belong to another run, or the record is damaged or does not
            match the file (names the folder and the fix).
    """
    weights_dir = Path(weights_dir)
    rec_path = weights_dir / WEIGHTS_RECORD
    if rec is None:
        rec = read_weights_record(weights_dir)
    if rec is None:
        return None
    run = RunFolder(weights_dir.parent)
    own = run.run_id()
    if own is None and rec.get("run_id") is not None:  # weights that name a run, in a folder whose run.json is gone
        raise CheckpointError(f"{run.identity} is missing, but {rec_path} records run id {str(rec.get('run_id'))[:40]!r}: without "
                              f"the run's own id the weights cannot be told from another run's; restore {run.identity}, or train the run again into a new --out")
    if own is not None and rec.get("run_id") != own:
        raise CheckpointError(f"{weights_dir} belongs to another run (run id {str(rec.get('run_id'))[:40]!r}, this run is {own!r}): "
                              f"weights copied in from another run are never loaded as this run's; {_WEIGHTS_FIX}")
    info = rec["files"].get(Path(path).relative_to(weights_dir).as_posix())
    data = None if not isinstance(info, dict) or os.path.islink(path) else _read_once(Path(path), info.get("bytes"))
    if data is None or (hashlib.sha256(data).hexdigest(), len(data)) != (info.get("sha256"), info.get("bytes")):
        raise CheckpointError(f"{path} is damaged or replaced: it is not the file {rec_path} records (another size or sha256, "
                              f"or a link; or the weights were replaced while read: rerun when the training is done): {_WEIGHTS_FIX}")
    return data


def _read_once(path: Path, size) -> bytes | None:
    """The bytes of ``path`` when it holds at most ``size`` (the recorded size), read once; None otherwise."""
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return None
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size != size:  # another size (10**30 recorded): never read
                return None
            data = f.read(size + 1)
    except OSError:
        return None
    return data if len(data) == size else None


def read_weights_record(weights_dir: Path) -> dict | None:
    """``weights_dir``'s ``weights.json`` (read once for every file of the folder), or None when there is none; the
    folder's files of at most 1 MiB that it lists (configs, which mosaic does not load itself) are checked against it
    here, once, and the weights files when loaded (:func:`check_weights_file`).

    Raises:
        CheckpointError: a link, damaged, or not a record of :data:`WEIGHTS_FORMAT`; a small file it lists altered;
            missing in ``best/`` or ``final/`` while the other holds one."""
    rec_path = Path(weights_dir) / WEIGHTS_RECORD
    if not os.path.lexists(rec_path):
        name, run = Path(weights_dir).name, Path(weights_dir).parent
        other = next((run / n / WEIGHTS_RECORD for n in ("best", "final") if n != name and os.path.lexists(run / n / WEIGHTS_RECORD)), None)
        if name in ("best", "final") and other is not None:  # the run's mosaic writes the record: this folder's was removed
            raise CheckpointError(f"{rec_path} is missing, while {other} shows that this run's mosaic records its weights: weights "
                                  f"without their record cannot be told from another run's (attack round 23); {_WEIGHTS_FIX}")
        return None
    try:
        if rec_path.is_symlink():
            raise ValueError("a symbolic link, never followed")
        rec = read_json(rec_path, MAX_RECORD_BYTES)
        if not isinstance(rec, dict) or rec.get("format") != WEIGHTS_FORMAT or not isinstance(rec.get("files"), dict):
            raise ValueError(f"not a record of format {WEIGHTS_FORMAT}")
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{rec_path} is damaged ({str(e)[:120]}): {_WEIGHTS_FIX}") from None
    for name, info in rec["files"].items():  # the folder's small files, once a folder (a backbone's config.json: what outside readers build)
        if isinstance(info, dict) and isinstance(info.get("bytes"), int) and info["bytes"] <= 1 << 20:
            got = None if os.path.islink(Path(weights_dir) / name) else _read_once(Path(weights_dir) / name, info["bytes"])
            if got is None or hashlib.sha256(got).hexdigest() != info.get("sha256"):
                raise CheckpointError(f"{Path(weights_dir) / name} is damaged or replaced: it is not the file {rec_path} records "
                                      f"(another size or sha256, or a link): {_WEIGHTS_FIX}")
    return rec


def load_weights_file(module: torch.nn.Module, path: Path, weights_dir: Path, rec: dict | None = None) -> None:
    """Load the safetensors file ``path`` (exported weights: ``best/``, ``final/``) into ``module``,
    after :func:`check_weights_file` (the weights are this run's and unaltered).

    Raises:
        TrainingError: the weights belong to another run (CheckpointError); the file is damaged
            (truncated, not safetensors: names it and the fix), or its tensors do not fit ``module``
            (the run's model config).
    """
    from safetensors import SafetensorError
    from safetensors.torch import load, load_file

    data = check_weights_file(path, weights_dir, rec)  # the bytes digested are the bytes loaded
    try:
        state = load_file(str(path)) if data is None else load(data)
    except (SafetensorError, OSError, ValueError) as e:  # a truncated or altered file is named, never a traceback
        raise TrainingError(f"{path} is damaged ({str(e).splitlines()[0] if str(e) else type(e).__name__}): restore it, or "
                            "re-export the weights by rerunning the run's `mosaic train` command") from None
    try:
        module.load_state_dict(state)
    except RuntimeError as e:
        raise TrainingError(f"weights in {weights_dir} do not fit the run's model config: {str(e).splitlines()[0]}") from None


def foreign_file(folder: Path, record: str) -> Path | None:
    """The first file under ``folder`` (a checkpoint, or exported weights) that its own record (``record``:
    :data:`RECORD` or :data:`WEIGHTS_RECORD`, whose ``files`` lists every file it wrote) does not list, a
    symbolic link anywhere in it included; the record's own path when the folder holds files but no readable
    record (missing or damaged: nothing tells its files from a person's); None when every file is listed or the
    folder is empty or absent. A folder mosaic replaces or prunes
    (a resumed run's ``best/`` and ``final/``, checkpoints past ``keep_checkpoints``) holding such a file is a
    person's too: it is kept (attack round 21: ``best/notes.txt`` was deleted by a resumed run, exit 0)."""
    folder = Path(folder)
    if folder.is_symlink() or not folder.is_dir():
        return None
    try:
        listed = read_json(folder / record).get("files")
    except (OSError, ValueError, AttributeError):
        listed = None
    if not isinstance(listed, dict):  # no readable record: nothing in it can be vouched for as mosaic's (attack round 22)
        return (folder / record) if any(folder.iterdir()) else None
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        if p.is_symlink() or (p.is_file() and rel != record and rel not in listed) or (
                p.is_dir() and not any(k.startswith(rel + "/") for k in listed)):
            return p
    return None
