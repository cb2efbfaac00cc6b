from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SPECS = ROOT / "experiments" / "specs"


_HOLD_LOCK = textwrap.dedent("""
    import sys, time
    from mosaic.locks import FolderLock
    with FolderLock(sys.argv[1]):
        print("held", flush=True)
        time.sleep(120)
""")


def hold_lock(folder: Path) -> subprocess.Popen:
    """Another process holding ``folder``'s :class:`mosaic.locks.FolderLock` (returned once it holds
    it; the caller kills it, which drops the lock as a crash would)."""
    p = subprocess.Popen([sys.executable, "-c", _HOLD_LOCK, str(folder)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    if p.stdout.readline().strip() != "held":
        p.kill()
        p.wait()
        raise AssertionError(f"the lock holder of {folder} did not start")
    return p


def clean_exit_2(res, *needles, collapse_space: bool = False) -> None:
    """A CLI result (typer's ``CliRunner``) that failed cleanly: exit status 2, no traceback, and every
    needle in its output (``collapse_space``: in the output with its line wraps and runs of spaces
    read as one space, for messages rich wraps)."""
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output, res.output
    text = " ".join(res.output.split()) if collapse_space else res.output
    for n in needles:
        assert n in text, res.output


#: a tiny colour x count spec (16 px, diagonal holdout) the attack rounds generate from
TINY_COUNT_SPEC = """
name: t
image: {size: 16}
concepts:
  color: {values: [red, green, blue]}
  count: {range: [1, 3]}
objects:
  - {name: ball, shape: circle, color: {concept: color}, size: 0.2, repeat: {concept: count}}
holdout: {concepts: [color, count], rule: {kind: diagonal, n: 1}}
splits: {train: 8, val: 2, test_id: 3, test_ood: 3}
"""


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One tiny imagefolder dataset of :data:`TINY_COUNT_SPEC` and its spec file: ``(spec, dataset)``; one per
    test module (the attack files), copied by each test that changes it."""
    from typer.testing import CliRunner

    from mosaic.cli import app

    d = tmp_path_factory.mktemp("made")
    spec = d / "spec.yaml"
    spec.write_text(TINY_COUNT_SPEC)
    r = CliRunner().invoke(app, ["generate", str(spec), "--out", str(d / "ds")])
    assert r.exit_code == 0, r.output
    return spec, d / "ds"


@pytest.fixture(scope="module")
def drun(tmp_path_factory):
    """A finished 2-step diffusion run and its dataset (16 px, tiny UNet): ``(run, data)``; one per
    test module, which may damage it."""
    from mosaic.dataset import generate
    from mosaic.lab.diffusion import run_diffusion
    from mosaic.spec import parse_spec
    from tests.test_diffusion import SPEC as D_SPEC, config

    base = tmp_path_factory.mktemp("drun")
    generate(parse_spec(D_SPEC), base / "data")
    run_diffusion(config(base / "run", base / "data", steps=2, checkpoint_every=1), say=lambda s: None)
    return base / "run", base / "data"


def tiny(spec_path: Path, size: int = 32, **splits) -> dict:
    """A shipped spec shrunk for fast tests (32 px, a few samples)."""
    data = yaml.safe_load(spec_path.read_text())
    data["image"] = {**data.get("image", {}), "size": size}
    sp = {k: (0 if k in ("train", "val", "test", "test_id", "test_ood") else v) for k, v in data.get("splits", {}).items()}
    sp.update(splits or {"train": 12, "val": 4, "test": 4})
    data["splits"] = sp
    return data


@pytest.fixture
def write_spec(tmp_path):
    """Write YAML text (dedented) or a dict to a file and return its path."""

    def _w(content, name="spec.yaml"):
        p = tmp_path / name
        p.write_text(textwrap.dedent(content) if isinstance(content, str) else yaml.safe_dump(content))
        return p

    return _w


COUNT_YAML = """
name: t
image: {size: 32}
concepts:
  color: {values: [red, green, blue]}
  count: {range: [1, 4]}
objects:
  - name: ball
    shape: circle
    color: {concept: color}
    size: 0.15
    repeat: {concept: count}
splits: {train: 10, val: 2, test: 2}
"""


def copy_dataset(made, tmp_path: Path, name: str = "ds") -> Path:
    """A private copy of the ``made`` fixture's dataset under ``tmp_path`` (tests damage copies, never the fixture)."""
    import shutil

    ds = tmp_path / name
    shutil.copytree(made[1], ds)
    return ds


def edit_manifest(ds: Path, edit) -> None:
    """Apply ``edit(manifest dict)`` to ``ds/manifest.json`` and write it back as mosaic writes it (sorted, indented)."""
    import json

    p = ds / "manifest.json"
    man = json.loads(p.read_text())
    edit(man)
    p.write_text(json.dumps(man, indent=2, sort_keys=True) + "\n")


def tiny_autoencoder(tmp_path_factory, name: str, steps: int):
    """A tiny trained autoencoder folder (16 px, factor 4, ``steps`` steps) with its quality check saved:
    ``(folder, section, spec, saved check)``."""
    from mosaic.lab.autoencoder import AutoencoderSection, checked, train_autoencoder
    from mosaic.spec import parse_spec
    from tests.test_latent import SPEC as L_SPEC

    spec = parse_spec(L_SPEC)
    sec = AutoencoderSection(factor=4, block_out_channels=[8, 16, 16], norm_num_groups=4, steps=steps, batch_size=4, check_n=4,
                             device="cpu", threshold=0)
    out = tmp_path_factory.mktemp(name) / "ae"
    train_autoencoder(sec, spec, out, say=lambda m: None, progress=False)
    saved = checked(out, sec, spec, say=lambda m: None)
    return out, sec, spec, saved


def stopped_autoencoder(tmp_path_factory, name: str, section, spec, after: int = 2):
    """The folder of an autoencoder training (``section``: ``checkpoint_every=1``) stopped by a KeyboardInterrupt
    in its step ``after + 1``, so that ``partial/checkpoint`` holds step ``after``."""
    import mosaic.lab.autoencoder as ae

    out = tmp_path_factory.mktemp(name) / "ae"
    real, calls = ae.reconstruction_loss, []

    def boom(*a, **k):
        calls.append(1)
        if len(calls) == after + 1:
            raise KeyboardInterrupt
        return real(*a, **k)

    ae.reconstruction_loss = boom
    try:
        with pytest.raises(KeyboardInterrupt):
            ae.train_autoencoder(section, spec, out, say=lambda m: None, progress=False)
    finally:
        ae.reconstruction_loss = real
    return out


def two_trial_sweep(tmp_path_factory, name: str):
    """A finished sweep of two trials (``training.lr`` 0.001 and 0.002, 2 training steps each): ``(sweep file, folder)``."""
    import yaml
    from typer.testing import CliRunner

    from mosaic.cli import app
    from tests.test_sweep_e2e import make_sweep

    base = tmp_path_factory.mktemp(name)
    p = make_sweep(base)
    d = yaml.safe_load(p.read_text())
    d["grid"] = {"training.lr": [0.001, 0.002]}
    p.write_text(yaml.safe_dump(d))
    r = CliRunner().invoke(app, ["sweep", str(p), "--out", str(base / "out"), "--no-report"])
    assert r.exit_code == 0, r.output
    return p, base / "out"


def unscored_samples(drun, tmp_path: Path) -> Path:
    """A copy of the ``drun`` run's samples folder without its scores (metrics, heatmap, predictions)."""
    import shutil

    (src,) = [p for p in (drun[0] / "samples").iterdir() if p.is_dir()]
    s = tmp_path / "s"
    shutil.copytree(src, s)
    for n in ("metrics.json", "metrics.csv", "heatmap.png", "predictions.jsonl"):
        if (s / n).exists():
            (s / n).unlink()
    return s


#: `mosaic sample` arguments of a quick unscored samples folder of the ``drun`` run
QUICK_SAMPLE = ["--split", "test_ood", "-k", "1", "--steps", "2", "--device", "cpu", "--no-score"]


def sampled(drun, tmp_path: Path):
    """``(run, samples folder)``: the ``drun`` run sampled once into ``tmp_path/s`` (:data:`QUICK_SAMPLE`)."""
    from typer.testing import CliRunner

    from mosaic.cli import app

    out = tmp_path / "s"
    r = CliRunner().invoke(app, ["sample", str(drun[0]), *QUICK_SAMPLE, "--out", str(out)])
    assert r.exit_code == 0, r.output
    return drun[0], out


def finished_trial_files(tdir: Path, seed: int = 0, analysis: dict | None = None) -> None:
    """What a finished sweep trial holds besides its figures, for tests that write a trial by hand: the trial's
    ``config.yaml`` and its run's, alike, the run's ``DONE`` (a report refuses a run without its config, and a
    ``done`` without ``DONE``), and with ``analysis`` the record ``mosaic analyze`` writes beside its figures."""
    import json

    import yaml

    cfg = yaml.safe_dump({"name": "fake", "objective": "classifier", "training": {"seed": seed}})
    (tdir / "run").mkdir(parents=True, exist_ok=True)
    (tdir / "config.yaml").write_text(cfg)
    (tdir / "run" / "config.yaml").write_text(cfg)
    (tdir / "run" / "DONE").write_text("")
    if analysis is not None:
        (tdir / "run" / "analysis").mkdir(exist_ok=True)
        (tdir / "run" / "analysis" / "analysis.json").write_text(json.dumps(analysis))


# ------------------------------------------------------------------------------------------------
# the attack rounds' shared CLI and sweep helpers (each file imports them under its own short names)
# ------------------------------------------------------------------------------------------------

def run_cli(args):
    """``mosaic ARGS`` in-process (typer's CliRunner), every argument as a string."""
    from typer.testing import CliRunner

    from mosaic.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


def ok_cli(args):
    """:func:`run_cli`, which must exit 0 (the output shown otherwise)."""
    r = run_cli(args)
    assert r.exit_code == 0, r.output
    return r


def enospc(*a, **k):
    """Raise a full disk (a stand-in for any write a test makes fail)."""
    import errno

    raise OSError(errno.ENOSPC, "No space left on device")


def verify_ok(ds: Path) -> None:
    """``mosaic verify DS`` must pass."""
    r = run_cli(["verify", ds])
    assert r.exit_code == 0, r.output


def sweep_copy(swept, tmp_path: Path) -> Path:
    """A private copy (links kept) of a sweep fixture's folder (``swept[1]``) at ``tmp_path/sw``."""
    import shutil

    sw = tmp_path / "sw"
    shutil.copytree(swept[1], sw, symlinks=True)
    return sw


def trial_dirs(sw: Path) -> list[Path]:
    """A sweep folder's trial folders, sorted."""
    return sorted((sw / "trials").iterdir())


def scored_folder(t: Path) -> Path:
    """The one scored samples folder of a trial's run."""
    (s,) = [p for p in (t / "run" / "samples").iterdir() if (p / "metrics.json").is_file()]
    return s


def results_row(sw: Path, t: Path):
    """The ``results.csv`` row of trial folder ``t`` of sweep folder ``sw``."""
    import pandas as pd

    df = pd.read_csv(sw / "results.csv")
    return df[df["trial"] == t.name].iloc[0]
