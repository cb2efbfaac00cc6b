"""The files of an autoencoder folder, read as claims to check (:mod:`mosaic.lab.autoencoder`).

- ``autoencoder.json`` (what was trained) and ``check-<key>.json`` (the quality check) are read with
  mosaic's one JSON reader (:func:`mosaic.io.read_json`): a damaged record is a named
  :class:`~mosaic.errors.TrainingError` with the file and the fix, never a traceback.
- Both records carry ``vae_sha256``, the sha256 of ``vae/diffusion_pytorch_model.safetensors``,
  and ``config_sha256``, that of ``vae/config.json`` (what the weights compute: ``act_fn``, the
  latent ``scaling_factor``...). A ``vae/`` whose weights or config are not the ones
  ``autoencoder.json`` records (copied in from another autoencoder, edited) is refused; a quality
  check (or a latent cache) of other weights or another config, one saved before checks recorded
  the config, or a damaged one, is not believed: it is measured (encoded) again.
- ``vae/`` is loaded only when it holds what ``save_pretrained(safe_serialization=True)`` writes:
  ``config.json`` and ``diffusion_pytorch_model.safetensors``, regular files, no links. A pickle
  (``diffusion_pytorch_model.bin``) is refused unread: unpickling can run code.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from pathlib import Path
from typing import Any

from mosaic.checksums import digest_file
from mosaic.errors import TrainingError
from mosaic.io import TEMP_GLOB, JSONReadError, file_kind, read_json

VAE_FILES = ("config.json", "diffusion_pytorch_model.safetensors")
VAE_WEIGHTS = "diffusion_pytorch_model.safetensors"


def _retrain(folder: Path) -> str:
    return f"delete {folder} to train it again (`mosaic autoencoder train`), or restore the file"


def read_record(path: Path, what: str = "record", folder: Path | None = None) -> dict:
    """The JSON mapping in ``path`` (an autoencoder folder's record).

    Raises:
        TrainingError: missing, not a regular file, not UTF-8 JSON, nested too deep, not a mapping;
            names the file and the fix (retrain ``folder``, by default the file's folder).
    """
    folder = folder if folder is not None else path.parent
    try:
        rec = read_json(path)
    except (OSError, JSONReadError) as e:
        raise TrainingError(f"{path} (the autoencoder's {what}) is damaged: {e}; {_retrain(folder)}") from None
    if not isinstance(rec, dict):
        raise TrainingError(f"{path} (the autoencoder's {what}) is damaged: a JSON {type(rec).__name__}, not a mapping; "
                            f"{_retrain(folder)}")
    return rec


def vae_problem(vae: Path) -> str | None:
    """Why ``vae/`` is not a folder of mosaic's own autoencoder weights, or None."""
    try:
        st = vae.lstat()
    except OSError:
        return "is missing"
    if not stat.S_ISDIR(st.st_mode):
        return f"is {file_kind(st.st_mode)}, not a folder"
    names = sorted(p.name for p in vae.iterdir())
    pickles = [n for n in names if n.endswith((".bin", ".pt", ".pth", ".pkl", ".ckpt"))]
    if pickles:
        return (f"holds {', '.join(pickles)}: a pickle file, not loaded, because unpickling can run code "
                "(mosaic writes safetensors only)")
    other = [n for n in names if n not in VAE_FILES]
    if other:
        return f"holds files mosaic does not write ({', '.join(other[:5])})"
    for n in VAE_FILES:
        p = vae / n
        try:
            s = p.lstat()
        except OSError:
            return f"lacks {n}"
        if not stat.S_ISREG(s.st_mode) or s.st_nlink != 1:
            return f"{n} is {'a hard link' if stat.S_ISREG(s.st_mode) else file_kind(s.st_mode)}, not a file of mosaic's own"
    return None


def vae_identity(folder: Path) -> dict[str, str]:
    """``{"vae_sha256", "config_sha256"}``: the sha256 of ``folder/vae``'s weights and of its
    ``config.json``; a quality check or cached latents are of this autoencoder only when they record both."""
    vae = Path(folder) / "vae"
    return {"vae_sha256": digest_file(vae / VAE_WEIGHTS)[0], "config_sha256": digest_file(vae / "config.json")[0]}


def load_vae(folder: Path):
    """``AutoencoderKL`` of ``folder/vae``, after the checks of the module docstring.

    Raises:
        TrainingError: no ``vae/config.json``; a ``vae/`` that is not mosaic's own (pickles, links,
            other files); weights that are not the ones ``autoencoder.json`` records; a config or
            weights that do not load. Each names the folder and the fix.
    """
    from diffusers import AutoencoderKL

    vae = folder / "vae"
    if not (vae / "config.json").is_file():
        raise TrainingError(f"{folder} holds no trained autoencoder (vae/config.json is missing): train one with "
                            "`mosaic autoencoder train SPEC_OR_CONFIG`")
    problem = vae_problem(vae)
    if problem is not None:
        raise TrainingError(f"{vae} {problem}; {_retrain(folder)}")
    cfg = read_record(vae / "config.json", "vae/config.json", folder)
    if cfg.get("_class_name") != "AutoencoderKL":
        raise TrainingError(f"{vae / 'config.json'} is not an AutoencoderKL config (_class_name "
                            f"{cfg.get('_class_name')!r}); {_retrain(folder)}")
    if (folder / "autoencoder.json").exists():
        rec = read_record(folder / "autoencoder.json", "record")
        have = vae_identity(folder)
        for key, name, what in (("vae_sha256", VAE_WEIGHTS, "altered"),
                                ("config_sha256", "config.json", "edited: act_fn, scaling_factor... change what the weights compute")):
            if rec.get(key) is not None and have[key] != rec.get(key):  # None: recorded before the record named it
                raise TrainingError(f"{vae / name} is not the file {folder / 'autoencoder.json'} records (another sha256: "
                                    f"copied in from another autoencoder, or {what}); {_retrain(folder)}")
    try:
        return AutoencoderKL.from_pretrained(str(vae), use_safetensors=True)
    except (OSError, ValueError, RuntimeError, TypeError, KeyError) as e:
        raise TrainingError(f"{vae} does not load ({type(e).__name__}: {str(e)[:200]}); {_retrain(folder)}") from None


def read_check(path: Path, identity: dict[str, str]) -> dict[str, Any] | None:
    """The saved quality check ``path`` when it was measured on the autoencoder ``identity``
    (:func:`vae_identity`: its weights' and its config's sha256), else None (missing, damaged, of
    other weights or another config, or saved before checks recorded both): the caller measures it again."""
    if not path.is_file():
        return None
    try:
        rec = read_record(path, "quality check")
    except TrainingError:
        return None
    if any(rec.get(k) != v for k, v in identity.items()) or not isinstance(rec.get("passed"), bool):
        return None
    if rec["passed"] != _passes(rec):  # "passed" must follow from the record's own accuracies and threshold (attack round 20)
        return None
    return rec


def _passes(rec: dict) -> bool | None:
    """Whether every concept's accuracy in a check record reaches its threshold (what ``passed`` means), or None
    when the record holds no such numbers (``accuracy`` a mapping of numbers or nulls, ``threshold`` a number)."""
    acc, thr = rec.get("accuracy"), rec.get("threshold")
    if not isinstance(acc, dict) or not acc or isinstance(thr, bool) or not isinstance(thr, (int, float)):
        return None
    if any(v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))) for v in acc.values()):
        return None
    return all(v is not None and v >= thr for v in acc.values())


#: what an unfinished training writes in partial/checkpoint/ (vae/ holds VAE_FILES)
_CHECKPOINT_FILES = ("state.json", "state.safetensors")


def own_training_folder(out: Path) -> Path:
    """``out`` when every file an autoencoder training replaces or removes there is its own, else TrainingError
    naming the first that is not (attack round 20: a person's ``vae/notes.txt`` and ``partial/p.txt`` were
    deleted). ``vae/`` (replaced whole) must hold only the weights and config, and lie beside an
    ``autoencoder.json`` or an unfinished training's ``partial/checkpoint/state.json``; ``partial/`` (removed at
    the end) only ``checkpoint/`` with its two files, the trained ``vae/`` before it is recorded and moved, and
    temporary names."""
    def foreign(d: Path, names) -> str | None:
        if not os.path.lexists(d):
            return None
        if d.is_symlink() or not d.is_dir():
            return None  # a link or a file at the name is replaced, never followed (own_folders, atomic_dir)
        return next((f"{d / n}" for n in sorted(os.listdir(d)) if n not in names and not fnmatch.fnmatch(n, TEMP_GLOB)), None)

    ck = out / "partial" / "checkpoint"
    bad = (foreign(out / "partial", ("checkpoint", "vae")) or foreign(ck, _CHECKPOINT_FILES) or foreign(out / "vae", VAE_FILES)
           or foreign(out / "partial" / "vae", VAE_FILES))
    if bad is None and (out / "vae").is_dir() and not (out / "vae").is_symlink() \
            and not (out / "autoencoder.json").is_file() and not (ck / "state.json").is_file():
        bad = f"{out / 'vae'} (no autoencoder.json or unfinished training of mosaic's beside it)"
    if bad is not None:
        raise TrainingError([(str(out), f"holds {bad}, which an autoencoder training did not write and would replace or delete: "
                              "move it away, or give another --out (a new or empty folder)")])
    return out


def training_identity(sec, spec) -> dict[str, str]:
    """``{"spec_fingerprint", "weights_key"}``: what a training's checkpoint and ``autoencoder.json`` record of the
    spec and the section (``sec.weights_key()``: every field that changes the weights)."""
    return {"spec_fingerprint": spec.fingerprint(), "weights_key": sec.weights_key()}


def checkpoint_problem(meta: dict, steps: int, identity: dict[str, str]) -> str | None:
    """Why a checkpoint's ``state.json`` (``meta``) is not resumed by a training of ``steps`` steps of ``identity``
    (:func:`training_identity`), or None (attack round 21): its ``step`` must be a JSON integer (not a bool), at
    least 0 and below ``steps`` (a checkpoint is saved before the last step only), agree with its saved ``losses``
    (one per step), and it must record the spec fingerprint and the section's weights key asked for (a checkpoint
    of another spec or section, or one saved before checkpoints recorded them, is not resumed from)."""
    for k, v in identity.items():
        if meta.get(k) != v:
            return (f"it records {k} {meta.get(k)!r}, not this training's {v!r}" if k in meta else
                    f"it records no {k} (saved by an older mosaic): not known to be of this spec and section")
    step, losses = meta.get("step"), meta.get("losses")
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < steps:
        return f"its step {step!r} is not a whole number from 0 to {steps - 1} (the steps of this training, less the last)"
    if not isinstance(losses, list) or len(losses) != step:
        return f"its step {step} does not agree with its {len(losses) if isinstance(losses, list) else 'missing'} saved losses"
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in losses):
        return "its saved losses are not all numbers"
    return None


def refuse_other_training(rec: dict, identity: dict[str, str], out: Path) -> None:
    """TrainingError when the finished autoencoder in ``out`` (its ``autoencoder.json`` ``rec``) is not the one asked
    for (:func:`training_identity`): another spec or section is never returned as "already trained", nor trained over."""
    diff = [f"{k} {rec.get(k)!r} (asked for: {v!r})" for k, v in identity.items() if rec.get(k) != v]
    if diff:
        raise TrainingError([(str(out), f"holds an autoencoder of another spec or section: its autoencoder.json records "
                              f"{'; '.join(diff)}. Give another --out (a new or empty folder), or delete {out} to train "
                              "this one there")])
