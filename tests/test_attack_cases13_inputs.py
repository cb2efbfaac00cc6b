"""Hostile input cases of a thirteenth attack (input validation), each closed at its mechanism.

- **01, 13: a YAML boolean where a number is expected was taken as 1**: ``--set seed=yes``,
  ``image.supersample=true``, ``training.steps=yes`` (one training step), ``model.depth=on``. The
  pydantic models run in lax mode, which turns ``True`` into ``1``. :class:`mosaic.schema.StrictModel`
  (the base of every spec, config and sweep model) refuses a bool in every field whose type admits an
  int or float but not a bool, at any depth of its lists, tuples and mappings
  (:func:`mosaic.schema.bool_where_number`), naming the field path, the value and the fix; the JSON
  schemas do not change.
- **20: a list index in another script's digits**: ``--set objects.٠.size=0.2`` (Arabic-Indic) or
  ``objects.０.size`` (full-width) set ``objects[0]``: :func:`mosaic.overrides.set_in_place` used
  ``str.isdigit``/``int``, which take any Unicode decimal digit. :func:`mosaic.overrides.list_index`
  takes ASCII digits without sign or leading zero only; anything else is a named ``--set`` error.
- **25: a colour named ``dark.red`` in a training config's ``dataset.overrides``**: the mapping was
  flattened to ``key.path=value`` text (:func:`mosaic.lab.data.override_items`), so
  ``colors: {dark.red: [120, 0, 0]}`` became ``colors.dark.red=...`` and failed as ``colors.dark``
  (a key holding ``=`` was split there too). The items are now path parts
  (:class:`mosaic.overrides.ParsedOverride`, set by :func:`mosaic.overrides.set_parts`): a top-level
  key is a dotted path, a key below it is one key. Every shipped config gives the spec it gave.
- **09: StreamingDataset took an empty range and non-integers**: ``start == stop`` (documented to
  raise) gave an empty dataset; ``start=0.5``, ``stop=3.7``, ``world_size=1.9``, ``rank=True`` were
  ``int()``-ed. :func:`mosaic.stream._whole` refuses a non-int (a bool too) by name, and an empty range
  is a DatasetError.
- **35: a rank yielded another number of items than its len()** with DataLoader workers (3 ranks x 2
  workers, 40 items: rank 1 said 13 and yielded 14): ``shard`` interleaved rank-major slots
  (``rank*W + worker :: R*W``) while ``__len__`` counts ``range(rank, n, R)``. ``shard`` now takes the
  rank's positions ``rank::R`` and splits them among its workers.
- **34: ``mosaic.hf_load.load_dataset(DIR, data_files=...)``** ran the quick check on ``DIR`` and then
  returned another folder's rows (``data_dir`` likewise): the keywords went straight to
  ``datasets.load_dataset``. Keywords that choose which files are read
  (:data:`mosaic.hf_load.REDIRECTING`) are a DatasetError naming them; ``split`` and the like work.
- **26: ``mosaic sample RUN --steps 1001``** ended in diffusers' ValueError traceback (DDIM cannot take
  more steps than the run's ``num_train_timesteps``; DPM-Solver silently repeats timesteps).
  :func:`mosaic.lab.diffusion.sampling.check_sampler_steps` refuses it by name, exit 2, before the
  weights load or a folder is written (in ``mosaic sample`` and in ``sample_and_score``), and a config's
  ``sampling.steps`` above its ``model.schedule.num_train_timesteps`` is refused by ``mosaic train
  diffusion`` before training (it failed in the sampling after training).
- **27: ``mosaic sample --split test_id --split test_id``** sampled the split twice with the same seeds
  (byte-identical images) and scored them as independent samples (n doubled). A repeated split is
  refused, not de-duplicated (:func:`mosaic.lab.diffusion.sampling.repeated_splits`), in the command
  and in ``sample_and_score``.
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from mosaic.cli import app
from tests.conftest import clean_exit_2 as _clean_exit_2

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]
COUNT = str(ROOT / "experiments" / "specs" / "count.yaml")
SMALL = ["--set", "splits.train=40", "--set", "splits.val=8", "--set", "splits.test=8", "--set", "image.size=32"]


# ------------------------------------------------------------------------------------------------
# 01, 13: a boolean is not a number
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("item, field", [("seed=yes", "seed"), ("image.supersample=true", "image.supersample"),
                                         ('colors={"red": [on, 0, 0]}', "colors.red[0]")])
def test_a_yaml_boolean_is_not_a_number_in_a_spec(item, field, tmp_path):
    res = runner.invoke(app, ["generate", COUNT, *SMALL, "--set", item, "--out", str(tmp_path / "out")])
    _clean_exit_2(res, f"{field}: got True, a boolean", "write the number itself")
    assert not (tmp_path / "out").exists()


def test_a_boolean_concept_value_says_to_quote_a_name():
    from mosaic.errors import SpecError
    from mosaic.spec import load_spec

    with pytest.raises(SpecError, match=r'concepts\.count\.values\[0\]: got True.*quote it \("yes"\)'):
        load_spec(COUNT, ["concepts.count.values=[yes, no]"])


@pytest.mark.parametrize("value, hint", [("yes", "(got True)"), ("[0.2, 0.3]", "did you mean {choice: [A, B]} or {range: [LO, HI]}?"),
                                         ("null", "(got None)")])
def test_an_object_rule_that_is_no_rule_says_what_a_rule_is(value, hint):
    # round 13's leftover: objects.0.size=yes got pydantic's "a valid dictionary or instance of Rule"
    from mosaic.errors import SpecError
    from mosaic.spec import load_spec

    with pytest.raises(SpecError) as e:
        load_spec(COUNT, [f"objects.0.size={value}"])
    text = str(e.value)
    assert "objects[0].size: not a rule" in text and "{range: [LO, HI]}" in text and hint in text
    assert "instance of Rule" not in text
    assert load_spec(COUNT, ["objects.0.size={range: [0.1, 0.12]}"]).objects[0].size.kind == "range"


@pytest.mark.parametrize("item, field", [("training.steps=yes", "training.steps"), ("model.depth=on", "model.depth"),
                                         ("training.seed=true", "training.seed")])
def test_a_yaml_boolean_is_not_a_number_in_a_training_config(item, field):
    from mosaic.errors import ConfigError
    from mosaic.lab.config import load_config
    from mosaic.lab.transformer.config import TransformerConfig

    path = ROOT / "experiments" / "train" / "classifier_coverage_tokens.yaml"
    with pytest.raises(ConfigError, match=rf"{field}: got True, a boolean"):
        load_config(TransformerConfig, path, [item])
    assert load_config(TransformerConfig, path, [item.split("=")[0] + "=3"])  # a number still passes


def _strict_models():
    from mosaic.schema import StrictModel

    for m in ["mosaic.spec", "mosaic.lab.config", "mosaic.lab.transformer.config", "mosaic.lab.diffusion.config",
              "mosaic.sweep", "mosaic.claims", "mosaic.diagnostics.config", "mosaic.evaluation.learned",
              "mosaic.evaluation.degrade", "mosaic.lab.autoencoder"]:
        importlib.import_module(m)

    def subs(c):
        for s in c.__subclasses__():
            yield s
            yield from subs(s)

    return sorted(set(subs(StrictModel)), key=lambda c: f"{c.__module__}.{c.__qualname__}")


def test_every_numeric_field_of_every_strict_model_refuses_a_boolean():
    from mosaic.schema import bool_where_number

    checked = 0
    for cls in _strict_models():
        for name, f in cls.model_fields.items():
            if bool_where_number(True, f.annotation) is None:
                continue
            checked += 1
            with pytest.raises(ValidationError) as e:
                cls.model_validate({name: True})
            assert "bool_not_number" in [x["type"] for x in e.value.errors()], (cls, name)
    assert checked > 100  # spec, holdout, config, sweep and evaluator fields alike


def test_bool_where_number_walks_unions_containers_and_literals():
    from typing import Any, Literal

    from mosaic.schema import bool_where_number

    assert bool_where_number(True, int | None) == ((), True)
    assert bool_where_number([1, False], list[float]) == ((1,), False)
    assert bool_where_number({"a": [0, 0, True]}, dict[str, tuple[int, int, int]]) == (("a", 2), True)
    assert bool_where_number(True, Literal[2, 4, 8]) == ((), True)
    for ok in [(True, bool), (True, int | bool), (True, Any), ([True], list[Any]), (True, Literal["a"]), (1, int)]:
        assert bool_where_number(*ok) is None, ok


def test_the_json_schemas_are_unchanged_by_the_boolean_check():
    import json

    for kind in ("spec", "config", "sweep"):
        res = runner.invoke(app, ["schema", kind])
        assert res.exit_code == 0, res.output
        assert json.loads(res.output) == json.loads((ROOT / "docs" / "schemas" / f"{kind}.schema.json").read_text())


# ------------------------------------------------------------------------------------------------
# 20: a list index is ASCII digits
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("part", ["\u0660", "\uff10", "+0", "01", "1_0", "\u0660\u0660"])
def test_a_list_index_in_other_digits_is_refused(part, tmp_path):
    res = runner.invoke(app, ["generate", COUNT, *SMALL, "--set", f"objects.{part}.size=0.2", "--out", str(tmp_path / "o")])
    _clean_exit_2(res, f"{part!r} is not an index of a list of 1 items", "ASCII digits")
    assert not (tmp_path / "o").exists()


def test_list_index_takes_ascii_digits_only():
    from mosaic.errors import SpecError
    from mosaic.overrides import list_index
    from mosaic.spec import load_spec

    assert [list_index(p) for p in ["0", "7", "10"]] == [0, 7, 10]
    assert all(list_index(p) is None for p in ["\u0661", "\uff11", "\u0967", " 1", "1\n", "-1", "", "\u00b2"])
    assert load_spec(COUNT, ["objects.0.size=0.2"]).objects[0].size.value == 0.2
    with pytest.raises(SpecError, match="not an index"):
        load_spec(COUNT, ["objects.\u0660.size=0.2"])


# ------------------------------------------------------------------------------------------------
# 25: dataset.overrides is applied by its structure, not re-split as text
# ------------------------------------------------------------------------------------------------

def test_a_colour_name_with_a_dot_or_equals_in_dataset_overrides():
    from mosaic.lab.config import DatasetSection
    from mosaic.lab.data import load_dataset_spec

    sec = DatasetSection(spec=COUNT, overrides={"image.size": 32, "colors": {"dark.red": [120, 0, 0], "a=b": [1, 2, 3]},
                                                "concepts.color.values": ["red", "dark.red", "a=b"]})
    spec = load_dataset_spec(sec)
    assert spec.colors["dark.red"] == (120, 0, 0) and spec.colors["a=b"] == (1, 2, 3)
    assert spec.concepts["color"].values == ["red", "dark.red", "a=b"] and spec.image.size == 32


def test_override_items_keeps_nested_keys_whole_and_the_documented_forms():
    from mosaic.lab.data import override_items

    got = dict(override_items({"image.size": 24, "objects.0.size": 0.16, "colors": {"dark.red": [1, 2, 3]},
                               "holdout": {"rule": {"n": 3}}, "holdout.rule": {"kind": "random", "fraction": 0.2},
                               "splits": {"train": 10, "per": "total"}}))
    assert got == {("image", "size"): 24, ("objects", "0", "size"): 0.16, ("colors", "dark.red"): [1, 2, 3],
                   ("holdout", "rule", "n"): 3, ("holdout", "rule"): {"kind": "random", "fraction": 0.2},
                   ("splits", "train"): 10, ("splits", "per"): "total"}


def test_every_shipped_config_gives_the_spec_its_flat_overrides_give():
    """The structural overrides give each shipped config the spec the ``--set key.path=value`` text
    (what it was flattened to before) gives."""
    import glob
    import json

    from mosaic.lab.config import DatasetSection
    from mosaic.lab.data import load_dataset_spec, override_items
    from mosaic.overrides import safe_load
    from mosaic.spec import load_spec

    n = 0
    for f in sorted(glob.glob(str(ROOT / "experiments" / "train" / "*.yaml"))):
        ds = (safe_load(Path(f).read_text()) or {}).get("dataset") or {}
        if not ds.get("overrides") or not ds.get("spec"):
            continue
        spec = str(ROOT / ds["spec"]) if not Path(ds["spec"]).is_absolute() else ds["spec"]
        flat = [f"{'.'.join(p)}={json.dumps(v)}" for p, v in override_items(ds["overrides"])]
        got = load_dataset_spec(DatasetSection(spec=spec, overrides=ds["overrides"]))
        assert got.fingerprint() == load_spec(spec, flat).fingerprint(), f
        n += 1
    assert n >= 15


def test_a_training_config_with_a_dotted_colour_trains(tmp_path):
    import yaml

    cfg = {"name": "dot", "dataset": {"spec": COUNT, "root": str(tmp_path / "data"), "overrides": {
        "image.size": 32, "splits": {"train": 16, "val": 4, "test": 4},
        "concepts.color.values": ["red", "dark.red"], "colors": {"dark.red": [120, 0, 0]}}},
        "objective": "classifier", "input": {"kind": "tokens"}, "model": {"width": 16, "depth": 1, "heads": 2, "mlp_ratio": 2.0},
        "training": {"steps": 1, "batch_size": 4, "threads": 1, "log_every": 1, "val_every": 0, "checkpoint_every": 1}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    res = runner.invoke(app, ["train", "transformer", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "run"), "--dry-run"])
    assert res.exit_code == 0, res.output


# ------------------------------------------------------------------------------------------------
# 09, 35: StreamingDataset arguments and sharding
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def small_spec():
    from mosaic.spec import load_spec

    return load_spec(COUNT, ["splits.train=40", "splits.val=8", "splits.test=8", "image.size=32"])


@pytest.mark.parametrize("kw, name", [(dict(start=5, stop=5), "stop"), (dict(start=40), "stop"),
                                      (dict(start=0.5, stop=3.7), "start"), (dict(stop=3.7), "stop"),
                                      (dict(rank=0, world_size=1.9), "world_size"), (dict(rank=True, world_size=2), "rank"),
                                      (dict(start=False), "start"), (dict(rank=0, world_size=0), "world_size"),
                                      (dict(shuffle="no"), "shuffle")])
def test_stream_refuses_empty_ranges_and_non_integers(small_spec, kw, name):
    from mosaic.errors import DatasetError
    from mosaic.stream import StreamingDataset

    with pytest.raises(DatasetError) as e:
        StreamingDataset(small_spec, "train", **kw)
    assert e.value.problems[0][0] == name, e.value


def test_stream_takes_numpy_integers(small_spec):
    import numpy as np

    from mosaic.stream import StreamingDataset

    s = StreamingDataset(small_spec, "train", start=np.int64(2), stop=np.int32(9), rank=np.int64(1), world_size=2)
    assert (s.start, s.stop, len(s)) == (2, 9, 3) and type(s.start) is int


def _index_stream(spec, **kw):
    from mosaic.stream import StreamingDataset

    class IndexStream(StreamingDataset):
        def __getitem__(self, index):
            return int(index)

    return IndexStream(spec, "train", **kw)


@pytest.mark.filterwarnings("ignore:This DataLoader will create")
@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_every_rank_yields_its_len_with_any_number_of_workers(small_spec, world_size):
    import torch

    for workers in range(4):
        for start, stop, shuffle in [(0, None, False), (3, 40, True)]:
            seen = []
            for rank in range(world_size):
                s = _index_stream(small_spec, rank=rank, world_size=world_size, start=start, stop=stop, shuffle=shuffle)
                s.set_epoch(2)
                if workers:
                    got = list(torch.utils.data.DataLoader(s, batch_size=None, num_workers=workers,
                                                           multiprocessing_context="fork"))
                else:
                    got = list(s)
                assert len(got) == len(s), (world_size, workers, rank)
                seen += [int(i) for i in got]
            assert sorted(seen) == list(range(start, 40)), (world_size, workers)


# ------------------------------------------------------------------------------------------------
# 34: hf_load.load_dataset reads only the folder's own files
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def two_datasets(tmp_path_factory):
    from mosaic.dataset import generate
    from mosaic.spec import load_spec

    base = tmp_path_factory.mktemp("hf13")
    small = ["splits.train=12", "splits.val=2", "splits.test=2", "image.size=32"]
    for name, seed in (("a", 0), ("b", 1)):
        generate(load_spec(COUNT, small + [f"seed={seed}"]), base / name)
    return base / "a", base / "b"


def test_hf_load_refuses_keywords_that_read_other_files(two_datasets, tmp_path):
    import json

    from mosaic.errors import DatasetError
    from mosaic.hf_load import load_dataset

    a, b = two_datasets
    other = {"train": [str(b / "train" / "metadata.jsonl"), str(b / "train" / "images" / "*.png")]}
    for kw in (dict(data_files=other), dict(data_dir=str(b)), dict(data_dir="../b"), dict(revision="main")):
        with pytest.raises(DatasetError) as e:
            load_dataset(a, split="train", cache_dir=str(tmp_path / "c"), **kw)
        assert e.value.problems[0][0] == next(iter(kw)) and "is refused" in str(e.value)
    d = load_dataset(a, split="train", cache_dir=str(tmp_path / "c"), data_dir=None)  # harmless keywords work
    first = json.loads((a / "train" / "metadata.jsonl").read_text().splitlines()[0])
    assert d[0]["caption"] == first["caption"] and len(d) == 12


# ------------------------------------------------------------------------------------------------
# 26, 27: mosaic sample's steps and splits
# ------------------------------------------------------------------------------------------------

def _run_copy(drun, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(drun[0], run, symlinks=True)
    return run


def test_sample_refuses_more_steps_than_training_timesteps(drun, tmp_path):
    run = _run_copy(drun, tmp_path)
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    res = runner.invoke(app, ["sample", str(run), "-k", "1", "--steps", "1001", "--no-score", "--device", "cpu"])
    _clean_exit_2(res, "--steps", "1001", "at most the run's 1000 training timesteps", "--steps 1000 or fewer")
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # nothing written


def test_sample_refuses_a_repeated_split(drun, tmp_path):
    run = _run_copy(drun, tmp_path)
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    res = runner.invoke(app, ["sample", str(run), "-k", "1", "--steps", "2", "--no-score", "--device", "cpu",
                              "--split", "test_id", "--split", "test_ood", "--split", "test_id"])
    _clean_exit_2(res, "--split", "'test_id' is given more than once", "give each split once")
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before  # nothing written


def test_sample_and_score_checks_steps_and_splits_itself():
    from types import SimpleNamespace

    from mosaic.errors import DatasetError, MosaicError
    from mosaic.lab.diffusion.sampling import check_sampler_steps, repeated_splits
    from mosaic.lab.diffusion.scoring import sample_and_score

    task = SimpleNamespace(noise=SimpleNamespace(config={"num_train_timesteps": 100}))
    kw = dict(n_per_combination=1, guidance=1.0, checkpoint="best", score=False)
    with pytest.raises(DatasetError, match="given more than once"):
        sample_and_score(task, None, ["test_id", "test_id"], steps=5, sampler="ddim", **kw)
    for sampler in ("ddim", "dpm"):
        with pytest.raises(MosaicError, match="at most the run's 100 training timesteps"):
            sample_and_score(task, None, ["test_id"], steps=101, sampler=sampler, **kw)
    check_sampler_steps(100, "ddim", {"num_train_timesteps": 100})
    check_sampler_steps(5000, "flow_euler", {"num_train_timesteps": 100})  # continuous times: any number of steps
    assert repeated_splits(["a", "b", "a", "a", "b"]) == ["a", "b"] and repeated_splits(["a", "b"]) == []


def test_train_diffusion_refuses_sampling_steps_above_the_schedule_before_training(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    res = runner.invoke(app, ["train", "diffusion", "experiments/train/quickstart_cpu.yaml", "--out", str(tmp_path / "r"),
                              "--set", "model.schedule.num_train_timesteps=10", "--set", "sampling.steps=25"])
    _clean_exit_2(res, "sampling.steps: 25 sampler steps: at most the run's 10 training timesteps")
    assert not (tmp_path / "r").exists()


def test_train_diffusion_refuses_a_repeated_evaluation_split_before_training(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    res = runner.invoke(app, ["train", "diffusion", "experiments/train/quickstart_cpu.yaml", "--out", str(tmp_path / "r"),
                              "--set", "evaluation.splits=[test_id, test_ood, test_id]"])
    _clean_exit_2(res, "evaluation.splits: 'test_id' is listed more than once")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("sets, field", [(["model.schedule.num_train_timesteps=10", "sampling.steps=25"], "sampling.steps"),
                                         (["evaluation.splits=[test_id, test_id]"], "evaluation.splits")])
def test_run_diffusion_itself_refuses_bad_sampling_before_training(sets, field, tmp_path, monkeypatch):
    # round 13's leftover: a direct run_diffusion call met these only at sampling time, after training
    from mosaic.errors import ConfigError
    from mosaic.lab.config import load_config
    from mosaic.lab.diffusion import DiffusionConfig, run_diffusion

    monkeypatch.chdir(ROOT)
    cfg = load_config(DiffusionConfig, "experiments/train/quickstart_cpu.yaml",
                      [*sets, f"out={tmp_path / 'r'}", f"dataset.root={tmp_path / 'data'}"])
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        run_diffusion(cfg, say=lambda m: None)
    assert not (tmp_path / "r" / "checkpoints").exists() and not (tmp_path / "r" / "DONE").exists()
