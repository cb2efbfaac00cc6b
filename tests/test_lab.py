"""The lab's shared pieces: config loading, the batch plan, conditioners, run folders."""

from __future__ import annotations

import pytest
import torch

from mosaic.errors import DatasetError, MosaicError
from mosaic.lab.diffusion.conditioning import CaptionConditioner, CombinationConditioner, FactorizedConditioner, build_vocab, tokenize
from mosaic.lab.config import ConfigError, apply_sets, config_diff, load_config
from mosaic.lab.data import BatchPlan
from mosaic.lab.diffusion import DiffusionConfig, choose_records
from mosaic.lab.run_folder import RunFolder

DOMAINS = {"color": ["red", "green", "blue"], "count": [1, 2, 3, 4]}


def test_config_reports_every_problem_with_its_field(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("name: x\ndataset: {path: d, spec: s.yaml}\ntraining: {steps: 0, colour: red, batch_sise: 4}\nmodel: {backbone: vit}\n")
    with pytest.raises(ConfigError) as e:
        load_config(DiffusionConfig, p)
    msg = str(e.value)
    assert "training.steps" in msg and "training.colour" in msg and "unknown field 'colour'" in msg
    assert "training.batch_sise: unknown field 'batch_sise': did you mean 'batch_size'?" in msg
    assert "model.backbone" in msg and "'vit'" in msg
    assert "exactly one of dataset.path" in msg


def test_set_overrides_parse_yaml_and_create_sections(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("name: x\ndataset: {path: d}\n")
    cfg = load_config(DiffusionConfig, p, ["training.steps=7", "model.unet.block_out_channels=[8, 16]",
                                           "model.unet.cross_attention=[false, true]", "sampling.guidance=1.5"])
    assert cfg.training.steps == 7 and cfg.model.unet.block_out_channels == [8, 16] and cfg.sampling.guidance == 1.5
    with pytest.raises(ConfigError, match="not key.path=value"):
        apply_sets({}, ["training.steps"])
    with pytest.raises(ConfigError, match="is a value, not a section"):
        apply_sets({"name": "x"}, ["name.first=1"])


def test_config_diff_names_changed_fields():
    assert config_diff({"a": 1, "b": {"c": 2}}, {"a": 1, "b": {"c": 3, "d": 4}}) == ["b.c", "b.d"]


def test_batch_plan_is_deterministic_and_splits_processes():
    a = BatchPlan(20, 4, 2, 0, seed=3)
    b = BatchPlan(20, 4, 2, 1, seed=3)
    again = BatchPlan(20, 4, 2, 0, seed=3)
    assert torch.equal(a.indices(5), again.indices(5))
    # within a step the two processes take disjoint examples; one epoch (2 steps of 8) covers 16 distinct ones
    epoch = torch.cat([p.indices(m) for m in (0, 1) for p in (a, b)])
    assert len(set(epoch.tolist())) == 16
    assert not torch.equal(a.indices(0), a.indices(2))  # the next epoch is another permutation
    with pytest.raises(DatasetError, match="lower training.batch_size"):
        BatchPlan(6, 4, 2, 0, seed=0)


def test_factorized_tokens_and_null_dropout():
    c = FactorizedConditioner(DOMAINS, 8)
    cond = c.encode([{"concepts": {"color": "blue", "count": 2}}, {"concepts": {"color": "red", "count": None}}])
    assert cond.tolist() == [[2, 1], [0, -1]]
    tok, mask = c(cond)
    assert tok.shape == (2, 2, 8) and mask is None
    # a missing value and a dropped condition both use the concept's learned null token
    null, _ = c(cond, torch.tensor([True, False]))
    assert torch.equal(tok[1, 1], null[0, 1]) and not torch.equal(tok[0, 0], null[0, 0])
    assert torch.equal(tok[1], null[1])
    # the token of a value does not depend on the other concepts: a held-out pair reuses trained rows
    t2, _ = c(torch.tensor([[2, 3]]))
    assert torch.equal(t2[0, 0], tok[0, 0])
    with pytest.raises(MosaicError, match="no value 'pink'"):
        c.encode([{"concepts": {"color": "pink", "count": 1}}])


def test_combination_baseline_has_one_row_per_combination():
    c = CombinationConditioner(DOMAINS, 8)
    assert c.num_combinations == 12
    ids = c.encode([{"concepts": {"color": col, "count": k}} for col in DOMAINS["color"] for k in DOMAINS["count"]])
    assert sorted(ids[:, 0].tolist()) == list(range(12))
    tok, _ = c(ids, torch.zeros(12, dtype=torch.bool))
    assert tok.shape == (12, 1, 8)
    null, _ = c(ids, torch.ones(12, dtype=torch.bool))
    assert torch.equal(null[0], null[5])


def test_caption_conditioner_tokenizes_masks_and_rejects_unknown_words():
    caps = ["three red circles", "a white circle at 216-234 degrees from a brown circle"]
    assert tokenize(caps[1])[4] == "216-234"
    vocab = build_vocab(caps)
    c = CaptionConditioner(vocab, 16, layers=1, heads=2, max_len=12)
    ids = c.encode([{"caption": caps[0]}, {"caption": caps[1]}])
    assert ids.shape == (2, 12) and (ids[0, 3:] == 0).all() and (ids[0, :3] > 1).all()
    tok, mask = c(ids, torch.tensor([False, True]))
    assert tok.shape == (2, 12, 16) and mask[0].sum() == 3 and mask[1].sum() == 1  # dropped: <null> only
    with pytest.raises(MosaicError, match="not in the run's vocabulary"):
        c.encode([{"caption": "four purple stars"}])
    with pytest.raises(MosaicError, match="max_len"):
        c.encode([{"caption": " ".join(["red"] * 13)}])


def test_choose_records_cycles_within_each_combination():
    recs = [{"concepts": {"color": "red"}, "combination": ["red", 1], "i": 0},
            {"concepts": {"color": "red"}, "combination": ["red", 1], "i": 1},
            {"concepts": {"color": "blue"}, "combination": ["blue", 2], "i": 2}]
    out = choose_records(recs, ["color"], 3)
    assert [r["i"] for r in out] == [0, 1, 0, 2, 2, 2]
    assert choose_records(recs, ["color"], None) == recs


def test_run_folder_refuses_foreign_folders_and_other_configs(tmp_path, monkeypatch):
    import mosaic.lab.run_folder as run_folder

    import hashlib

    # the fingerprint of the manifest written below (the run copies those bytes and checks they are what was digested)
    monkeypatch.setattr(run_folder, "manifest_fingerprint", lambda root: {"fingerprint": "f", "manifest_sha256": hashlib.sha256(b"{}").hexdigest(), "splits": {}})
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "manifest.json").write_text("{}")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    with pytest.raises(MosaicError, match="holds no run"):
        RunFolder(foreign).open({"a": 1}, tmp_path / "d", True)
    run = RunFolder(tmp_path / "run")
    assert run.open({"a": 1, "out": "x"}, tmp_path / "d", True) == "new"
    assert run.open({"a": 1, "out": "y"}, tmp_path / "d", True) == "resume"  # the folder's own path may change
    with pytest.raises(MosaicError, match="differs in: a"):
        run.open({"a": 2}, tmp_path / "d", True)


def test_set_on_dataset_overrides_adds_a_flat_spec_override():
    data = apply_sets({"dataset": {"spec": "s.yaml", "overrides": {"image.size": 32}}},
                      ["dataset.overrides.holdout.rule.n=3", "dataset.overrides.splits={train: 10}"])
    assert data["dataset"]["overrides"] == {"image.size": 32, "holdout.rule.n": 3, "splits": {"train": 10}}
