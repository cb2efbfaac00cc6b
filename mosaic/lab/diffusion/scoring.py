"""Scoring a run: its test splits generated (:mod:`mosaic.lab.diffusion.sampling`) and scored with
the evaluator, written to a samples folder whose name holds every setting that changes the images."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import numpy as np

from mosaic.audit import read_rows
from mosaic.errors import DatasetError, MosaicError, TrainingError
from mosaic.io import atomic_dir, clear_temps, own_folders, read_json
from mosaic.lab.diffusion.sampling import check_sampler_steps, choose_records, generate, load_evaluator, repeated_splits, sample_seeds
from mosaic.lab.diffusion.task import DiffusionTask
from mosaic.lab.loop import progress_kwargs
from mosaic.lab.run_folder import RunFolder
from mosaic.dataset import png_bytes, read_metadata
from mosaic.evaluation import check_evaluator, metrics as M, prediction_rows, write_prediction_rows
from mosaic.evaluation.quality import quality_summary, read_images
from mosaic.preview import sample_sheet


def samples_folder_name(splits: list[str], checkpoint: str, guidance: float, sampler: str, steps: int,
                        n_per_combination: int | None, seed: int) -> str:
    """``<splits joined by +>_<checkpoint>_g<guidance>_<sampler><steps>_k<K or all>_s<seed>``: every
    setting that changes the images is in the name."""
    k = f"k{n_per_combination}" if n_per_combination else "kall"
    return f"{'+'.join(splits)}_{checkpoint}_g{guidance:g}_{sampler}{steps}_{k}_s{seed}"


def refuse_other_samples(out: Path, key: dict) -> None:
    """Raise DatasetError when ``out`` holds samples made with other settings than ``key`` (or
    anything that is not a samples folder): earlier samples are never silently replaced. A folder
    made with the very same settings is made again (same images, same scores)."""
    if not out.exists():
        return
    if not out.is_dir():
        raise DatasetError(f"--out {out} is a file: give a folder")
    if not any(out.iterdir()):
        return
    try:
        old = read_json(out / "sampling.json")
        if not isinstance(old, dict):  # a list, a number: damaged, named like any other damage
            raise ValueError(f"a JSON {type(old).__name__}, not a mapping of settings")
    except (OSError, ValueError) as e:
        raise DatasetError(f"{out} exists and holds no readable sampling.json ({str(e)[:80]}: not samples of this command, "
                           "or damaged): give another --out, or delete it") from None
    diff = [f"{k} {old.get(k)!r} -> {v!r}" for k, v in key.items() if old.get(k) != v]
    if diff:
        raise DatasetError(f"{out} holds samples made with other settings ({'; '.join(diff)}): they are kept; give another --out, "
                           "or delete that folder to replace them")
    # the folder is replaced whole: what a person put there (an audit with its marks, notes) is never deleted with it
    # a name of mosaic's holding something else (a person's folder at heatmap.png, a file at images) is a person's too
    foreign = sorted(n for n in os.listdir(out) if n not in SAMPLES_NAMES or (not os.path.islink(out / n) and (
        (out / n).is_dir() != (n == "images"))))
    foreign += [f"images/{n}" for n in _foreign_images(out)]  # images/ is replaced whole too: only the images it lists are mosaic's
    if foreign:
        raise DatasetError(f"{out} holds {', '.join(foreign[:5])}{' ...' if len(foreign) > 5 else ''}, which mosaic sample did not "
                           "write there and would delete with the old samples (an audit's marks among them): move it out of the "
                           "folder, or give another --out")


def _foreign_images(out: Path) -> list[str]:
    """The names in ``out/images`` that are not images the folder's ``metadata.jsonl`` lists (a person's photo,
    notes or sub-folder, or a PNG mosaic did not write), sorted; every name when the list cannot be read (attack
    round 20: a rerun replaced ``images/`` whole and deleted them, exit 0)."""
    d = out / "images"
    if d.is_symlink() or not d.is_dir():
        return []  # a link or file there is replaced, never followed; its target is untouched
    names = sorted(os.listdir(d))
    try:
        listed = {r["file_name"] for _, r in read_rows(out / "metadata.jsonl", "samples list")}  # bounded, each row checked
    except MosaicError:  # missing, damaged, rows of another shape: nothing tells mosaic's images from a person's
        return names
    return [n for n in names if f"images/{n}" not in listed or not (d / n).is_file() or (d / n).is_symlink()]


#: every name ``mosaic sample`` writes in a samples folder (:func:`_sample_into`)
SAMPLES_NAMES = frozenset({"images", "metadata.jsonl", "sampling.json", "metrics.json", "metrics.csv", "heatmap.png",
                           "predictions.jsonl", "evaluator_check.json", "samples.png"})


def refuse_linked_out(out: Path | None) -> None:
    """Refuse ``--out`` given as a symbolic link: a samples folder is written whole and replaces what
    stands at its name (:func:`mosaic.io.atomic_dir`), so a link there was silently replaced by a
    folder (its target left as it was, the person's link gone), exit 0.

    Raises:
        DatasetError: naming ``--out``, the link's target and the fix.
    """
    if out is not None and os.path.islink(out):
        raise DatasetError([("--out", f"{out} is a symbolic link (to {os.readlink(out)}): a samples folder (images/, metadata.jsonl, "
                             "sampling.json) is written whole in place of what stands at its name, never through a link; give the real folder "
                             f"({os.path.realpath(out)}) or another path")])


def ev_folder(name) -> bool:
    """Whether an evaluator name is a learned evaluator's folder (anything but ``parser``)."""
    return isinstance(name, str) and name != "parser" and Path(name).is_dir()


def sample_and_score(task: DiffusionTask, run: RunFolder, splits: list[str], *, n_per_combination: int | None, guidance: float,
                     steps: int, sampler: str, checkpoint: str, score: bool, out: Path | None = None, batch_size: int | None = None,
                     device=None, autocast: str = "no", evaluator: str | None = None, check_n: int = 0, say=print,
                     abstain: bool | None = None) -> dict:
    """Generate images for the records of ``splits`` and score them.

    Writes ``out`` (default ``RUN/samples/<splits joined by +>_<checkpoint>_g<guidance>_<sampler><steps>``):
    ``images/NNNNNN.png``, ``metadata.jsonl`` (``file_name``, ``index``, ``split``,
    ``source_index``, ``concepts``, ``combination``, ``held_out``, ``caption``, ``seed``),
    ``sampling.json`` (settings) and, when ``score``, the evaluator's ``metrics.json`` /
    ``metrics.csv`` / heatmap via ``mosaic.evaluation.metrics.write_metrics``, ``predictions.jsonl``
    and, with ``check_n``, ``evaluator_check.json`` (the evaluator's accuracy on ``check_n`` fresh
    ground-truth renders, ``mosaic.evaluation.check_evaluator``). ``abstain`` (default: the config's
    ``evaluation.abstain``) lets the parser read poor matches as unreadable; the scores then hold
    ``quality`` (:func:`mosaic.evaluation.quality.quality_summary`: mean match quality, verdicts
    abstention changed).

    Returns:
        ``{"out": path, "n": images, "seconds": s, "metrics": score dict or None, "evaluator_check": dict or None}``.
    Raises:
        DatasetError: a split the dataset does not have, or one given twice; TrainingError: missing weights;
        MosaicError: more DDIM / DPM steps than the run's training timesteps (:func:`check_sampler_steps`).
    """

    refuse_linked_out(out)
    twice = repeated_splits(list(splits))
    if twice:
        raise DatasetError([("--split", f"{', '.join(map(repr, twice))} is given more than once: a split's conditions are "
                             "sampled with the same seeds each time, so the copies are identical images that would be scored "
                             "as independent samples (n doubled, intervals too narrow); give each split once")])
    check_sampler_steps(steps, sampler, task.noise.config)
    have = task.spec.split_sizes()
    for s in splits:
        if s not in have:
            raise DatasetError(f"--split {s!r} is not a split of the run's dataset; splits: {', '.join(have)}")
    weights = run.best if checkpoint == "best" else run.final
    if not weights.is_dir():
        alt = "final" if checkpoint == "best" else "best"
        raise TrainingError(f"run {run.root} has no {checkpoint} weights ({weights} is missing): finish training, or use --checkpoint {alt}")
    task.load_weights(weights)
    model = task.model.to(device or "cpu").eval()
    records = []
    for s in splits:
        recs = choose_records(read_metadata(task.root, s), task.concepts, n_per_combination)
        records += [(s, i, r) for i, r in enumerate(recs)]
    seed = task.cfg.sampling.seed
    ev_name = str(evaluator or task.cfg.evaluation.evaluator) if score else None
    ab = (task.cfg.evaluation.abstain if abstain is None else abstain) if score else None
    # every setting that changes the images or their scores: two different samplings never share a folder
    key = {"splits": list(splits), "n_per_combination": n_per_combination, "guidance": guidance, "steps": steps, "sampler": sampler,
           "checkpoint": checkpoint, "seed": seed, "evaluator": ev_name, "abstain": ab}
    if out is None:  # a link at RUN/samples is removed, never followed: the run's samples are written into the run
        own_folders(run.root, ["samples"])
    out = Path(out) if out is not None else run.root / "samples" / samples_folder_name(splits, checkpoint, guidance, sampler, steps,
                                                                                        n_per_combination, seed)
    refuse_other_samples(out, key)
    out.parent.mkdir(parents=True, exist_ok=True)
    clear_temps(out)  # an interrupted sampling's folder, or a link planted at its name: removed, never followed (the caller holds the lock)
    # a unique new folder that replaces out when sampling ends (an older folder or a link at out is removed, not
    # followed); removed on any error
    with atomic_dir(out) as tmp:
        return _sample_into(tmp, out, task, splits, records, key, n_per_combination=n_per_combination, guidance=guidance,
                            steps=steps, sampler=sampler, score=score, batch_size=batch_size, device=device, autocast=autocast,
                            evaluator=evaluator, abstain=abstain, check_n=check_n, say=say, model=model)


def _sample_into(tmp: Path, out: Path, task, splits, records, key, *, n_per_combination, guidance, steps, sampler, score, batch_size,
                 device, autocast, evaluator, abstain, check_n, say, model) -> dict:
    (tmp / "images").mkdir()
    t0 = time.perf_counter()
    from tqdm.auto import tqdm


    meta, all_images = [], []
    bar = tqdm(total=len(records), desc="sample", **progress_kwargs())
    k = 0
    for s in splits:
        part = [(i, r) for (sp, i, r) in records if sp == s]
        seeds = sample_seeds(task.cfg.sampling.seed, s, len(part))
        done = [0]

        def prog(n, done=done):
            bar.update(n - done[0])
            done[0] = n

        images = generate(model, task.noise.config, task.encode([r for _, r in part]), seeds, image_size=task.image_size,
                          guidance=guidance, steps=steps, sampler=sampler, batch_size=batch_size or task.cfg.sampling.batch_size,
                          device=device, autocast=autocast, progress=prog, space=getattr(task, "space", None))
        for (i, r), img, seed in zip(part, images, seeds):
            name = f"images/{k:06d}.png"
            (tmp / name).write_bytes(png_bytes(img))
            meta.append({"file_name": name, "index": k, "split": s, "source_index": r.get("index"), "concepts": r["concepts"],
                         "combination": r.get("combination"), "held_out": bool(r.get("held_out", False)),
                         "caption": r.get("caption"), "seed": seed})
            k += 1
        all_images.append(images)
    bar.close()
    seconds = time.perf_counter() - t0
    with (tmp / "metadata.jsonl").open("w") as f:
        for m in meta:
            f.write(json.dumps(m, sort_keys=True) + "\n")
    settings = {**key, "images": len(meta), "seconds": seconds}
    if ev_folder(key.get("evaluator")):  # where a learned evaluator named by a relative path was: a report from another folder loads it
        settings["evaluator_folder"] = str(Path(key["evaluator"]).resolve())
    (tmp / "sampling.json").write_text(json.dumps(settings, indent=2) + "\n")
    result = {"out": str(out), "n": len(meta), "seconds": seconds, "metrics": None, "evaluator_check": None}
    preds = None
    if score and meta:

        ev = load_evaluator(task.spec, evaluator or task.cfg.evaluation.evaluator, device=str(device or "cpu"),
                            abstain=task.cfg.evaluation.abstain if abstain is None else abstain,
                            position_bins=task.cfg.evaluation.position_bins)
        images = np.concatenate(all_images)
        say(f"scoring {len(meta)} images with the {getattr(ev, 'name', 'evaluator')} evaluator")

        preds, reads = read_images(ev, images)
        scores = M.score(meta, preds, task.spec)
        if reads is not None:
            scores["quality"] = quality_summary(meta, reads, task.spec, ev)

        write_prediction_rows(prediction_rows(meta, preds, task.spec, ev, images, reads=reads), tmp / "predictions.jsonl")
        M.write_metrics(scores, tmp, task.spec)
        result["metrics"] = scores
        if check_n:

            say(f"measuring the evaluator on {check_n} fresh ground-truth renders")
            chk = check_evaluator(task.spec, ev, n=check_n)
            chk.pop("failures", None)
            (tmp / "evaluator_check.json").write_text(json.dumps(chk, indent=2, sort_keys=True, default=str) + "\n")
            result["evaluator_check"] = chk
    if meta:

        sample_sheet(tmp, tmp / "samples.png", predictions=preds)
    return result
