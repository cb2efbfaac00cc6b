"""The shaded 3-D renderer (issue 25): planted geometry, shadows, masks, relations, determinism,
spec checks, every shipped spec in 3-D, and the flat path left as it was."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import pytest

from mosaic.errors import LayoutError, SpecError
from mosaic.records import sample_record
from mosaic.sampling import sample_scene
from mosaic.scene3d import WORLD, Scene3D, SolidObject, camera_relation, preset_view, world_xy
from mosaic.spec import load_spec, parse_spec
from renderers import backend_of, get_renderer, renderer_for
from renderers.shaded import ShadedRenderer, annotate, instance_mask

ROOT = Path(__file__).resolve().parents[1]
COGENT = ROOT / "experiments" / "specs" / "clevr_cogent.yaml"


def _one(shape="sphere", size=0.24, center=(0.5, 0.5), preset="mosaic", side=96, material="rubber", ground=(150, 150, 150)):
    o = SolidObject(shape, "red", (200, 30, 30), size, center, 0.0, "t", material=material)
    return Scene3D(side, ground, [o], preset_view(preset))


def _pair(material, neighbour=None, shape="cube", size=0.3):
    objs = [SolidObject(shape, "gray", (87, 87, 87), size, (0.5, 0.5), 20.0, "t", material=material)]
    if neighbour is not None:
        objs.append(SolidObject("sphere", "green", (29, 200, 20), 0.24, neighbour, 0.0, "b", material="rubber"))
    return Scene3D(96, (150, 150, 150), objs, preset_view("clevr"))


def test_a_metal_solid_mirrors_its_neighbours_and_a_rubber_one_does_not():
    """Metal traces one bounce against the other objects: a green sphere beside a gray cube (where it
    casts no shadow on it) shows in a metal cube's pixels, tinting them green, and leaves a rubber
    cube's pixels as they were."""
    rend = ShadedRenderer(2)
    for material in ("rubber", "metal"):
        alone = rend.render_image(_pair(material)).astype(int)
        beside = rend.render_image(_pair(material, (0.25, 0.5))).astype(int)
        cube = instance_mask(_pair(material, (0.25, 0.5)))[0] == 1
        changed = cube & (np.abs(beside - alone).sum(-1) > 0)
        if material == "rubber":
            assert not changed.any()
        else:
            assert changed.sum() >= 10, changed.sum()
            d = (beside - alone)[changed]
            assert (d[:, 1] - d[:, 0]).mean() > 5  # the reflection is of the green sphere


def test_a_metal_top_mirrors_the_darker_studio_sky():
    """Above the horizon a metal surface mirrors a sky that darkens towards the zenith (CLEVR's dark
    world): a metal cube's top is darker than a rubber cube's lamp-lit top, and a metal sphere's upper
    half is no brighter than its lower half, which mirrors the lit ground."""
    rend = ShadedRenderer(2)
    top = {}
    for material in ("rubber", "metal"):
        sc = _pair(material, size=0.4)
        img, m = rend.render_image(sc).astype(float).mean(-1), instance_mask(sc)[0] == 1
        rows = np.flatnonzero(m.any(1))
        top[material] = img[rows[0]:rows[0] + 5][m[rows[0]:rows[0] + 5]].mean()
    assert top["metal"] < top["rubber"] - 10, top
    sc = _pair("metal", shape="sphere", size=0.4)
    img, m = rend.render_image(sc).astype(float).mean(-1), instance_mask(sc)[0] == 1
    rows = np.flatnonzero(m.any(1))
    mid = (rows[0] + rows[-1]) // 2
    assert img[:mid][m[:mid]].mean() <= img[mid:][m[mid:]].mean() + 2


def test_the_mirrored_ground_shows_the_key_lamps_shadow():
    """A ground point seen in a mirror is shadowed when an object stands between it and the key lamp
    (renderers.shaded_mirror.in_key_shadow), lit otherwise."""
    from renderers.shaded import F, _plan
    from renderers.shaded_mirror import in_key_shadow

    sc = _one("sphere", 0.3, preset="clevr")
    key = np.array(sc.view.lights[0][1], float)
    base = np.array(world_xy((0.5, 0.5)))
    away = (base - key[:2]) / np.linalg.norm(base - key[:2])
    pts = np.array([base + 0.4 * away, base - 3.0 * away, base + 3.0 * np.array([-away[1], away[0]])], F)
    LP = np.array([[p for _, p, _, _ in sc.view.lights]], F)
    got = in_key_shadow(_plan(sc), 1, None, np.ones(3, bool), pts[:, 0], pts[:, 1], LP)
    assert got.tolist() == [True, False, False]


def test_sphere_silhouette_matches_its_analytic_disk():
    # overhead camera straight above the sphere: its silhouette is a disk of angular radius asin(R / d)
    side = 128
    sc = _one(side=side)
    mask, sil = instance_mask(sc)
    v = sc.view
    R = 0.24 / 2 * WORLD
    d = v.camera[2] - R
    rad_px = math.tan(math.asin(R / d)) / math.tan(math.radians(v.fov) / 2) * side / 2
    yy, xx = np.mgrid[0:side, 0:side] + 0.5
    disk = (xx - side / 2) ** 2 + (yy - side / 2) ** 2 <= rad_px ** 2
    got = mask == 1
    iou = (got & disk).sum() / (got | disk).sum()
    assert iou > 0.97, iou
    assert abs(got.sum() - math.pi * rad_px ** 2) / (math.pi * rad_px ** 2) < 0.03
    assert sil[0] == got.sum()  # nothing hides it: its silhouette is what the mask shows


@pytest.mark.parametrize("preset", ["mosaic", "clevr"])
def test_shadow_falls_on_the_side_away_from_the_key_light(preset):
    side = 128
    sc = _one("cube", 0.2, preset=preset, side=side)
    img = ShadedRenderer(2).render_image(sc).astype(float).mean(-1)
    empty = ShadedRenderer(2).render_image(Scene3D(side, sc.background, [], sc.view)).astype(float).mean(-1)
    mask, _ = instance_mask(sc)
    key = np.array(sc.view.lights[0][1])
    base = np.array(world_xy((0.5, 0.5)))
    away = base - key[:2]
    away /= np.linalg.norm(away)
    perp = np.array([-away[1], away[0]])
    r = 0.2 / 2 * WORLD
    pairs = []  # ground points on the far side of the cube from the lamp, and their mirror images on the near side
    for f in np.linspace(0.9, 3.0, 10):
        for g in np.linspace(-0.6, 0.6, 7):
            pa, pt = base + f * r * away + g * r * perp, base - f * r * away + g * r * perp
            (ua, va, _), (ut, vt, _) = sc.view.project(np.array([[*pa, 0.0], [*pt, 0.0]]), side)
            a, t = (int(va), int(ua)), (int(vt), int(ut))
            if mask[a] == 0 and mask[t] == 0:
                pairs.append((a, t))
    assert len(pairs) >= 5
    ratio = np.array([img[a] / img[t] for a, t in pairs])
    assert ratio.min() < 0.8 and ratio.mean() < 0.9 and ratio.max() < 1.02, ratio  # the far side is in shadow, never brighter
    assert abs(np.mean([empty[a] / empty[t] for a, t in pairs]) - 1) < 0.1  # and is not darker without the cube


def test_masks_hold_every_object_once_and_agree_with_the_ground_truth():
    spec = load_spec(COGENT, ["image.size=64"])
    for i in range(6):
        rec, scene = sample_record(spec, "train", i)
        img, mask = renderer_for(spec).render_one(scene)
        n = rec["num_objects"]
        assert n == len(scene.objects) >= 3
        ids = set(np.unique(mask)) - {0}
        assert ids == set(range(1, n + 1))  # every object visible (the occlusion check), no stray id
        counts = np.bincount(mask.ravel(), minlength=n + 1)
        for k, o in enumerate(rec["scene"]["objects"], start=1):
            assert o["visible_pixels"] == counts[k]
            ys, xs = np.nonzero(mask == k)
            assert o["bbox"] == [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
            # the spec's layout: distractors keep 35 %, the labelled objects (thing, ball) 60 %
            assert o["visible_fraction"] >= (0.6 if o["template"] in ("thing", "ball") else 0.35)
            u, v, depth = o["pixel_coords"]
            assert 0 <= u < 64 and 0 <= v < 64 and depth > 0


def test_relations_follow_the_3d_positions_and_the_camera():
    spec = load_spec(COGENT, ["image.size=64"])
    for i in range(6):
        rec, scene = sample_record(spec, "train", i)
        g = rec["scene"]
        dirs = g["directions"]
        pos = [np.array(o["position_3d"]) for o in g["objects"]]
        names = {"left_of": ("right", 1), "right_of": ("right", -1), "in_front_of": ("behind", 1), "behind": ("behind", -1)}
        got = {(r["subject"], r["relation"], r["object"]) for r in g["relations"]}
        for a in range(len(pos)):
            for b in range(len(pos)):
                if a == b:
                    continue
                for rel, (axis, sign) in names.items():
                    holds = sign * float(np.dot(pos[b] - pos[a], dirs[axis])) > 0
                    assert ((a, rel, b) in got) == holds, (i, a, rel, b)
        # the labelled relation: the dominant camera-frame axis between thing and ball
        thing, ball = (next(k for k, o in enumerate(g["objects"]) if o["template"] == t) for t in ("thing", "ball"))
        d = pos[ball] - pos[thing]
        dr, db = float(np.dot(d, dirs["right"])), float(np.dot(d, dirs["behind"]))
        want = ("left_of" if dr > 0 else "right_of") if abs(dr) > abs(db) else ("in_front_of" if db > 0 else "behind")
        assert rec["concepts"]["relation"] == want


def test_camera_relation_names_per_preset():
    a = SolidObject("sphere", "red", (1, 2, 3), 0.1, (0.3, 0.5))
    b = SolidObject("sphere", "red", (1, 2, 3), 0.1, (0.7, 0.5))
    c = SolidObject("sphere", "red", (1, 2, 3), 0.1, (0.3, 0.1))  # farther from the camera / higher in a top-down image
    top, clevr = preset_view("mosaic"), preset_view("clevr")
    assert camera_relation(top, a, b) == camera_relation(clevr, a, b) == "left_of"
    assert camera_relation(top, a, c) == "below" and camera_relation(clevr, a, c) == "in_front_of"
    assert camera_relation(top, c, a) == "above" and camera_relation(clevr, c, a) == "behind"


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and ".mosaic" not in p.parts and p.name != "manifest.json" and not p.name.endswith(".lock"):
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def test_shaded_datasets_are_byte_identical_across_workers_and_reruns(tmp_path):
    from mosaic.dataset import generate

    spec = load_spec(COGENT, ["image.size=32", "splits.train=24", "splits.val=4", "splits.test_id=4", "splits.test_ood=4"])
    generate(spec, tmp_path / "a", workers=1, shard_size=8, masks=True)
    generate(spec, tmp_path / "b", workers=2, shard_size=8, masks=True)
    generate(spec, tmp_path / "c", workers=1, shard_size=5, masks=True)
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b") == _digest(tmp_path / "c")
    import json

    man = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert man["renderer"]["name"] == "shaded" and man["status"] == "complete"


@pytest.mark.parametrize("fmt", ["imagefolder", "parquet"])
def test_a_shaded_dataset_without_a_material_rule_passes_its_own_checks(tmp_path, fmt):
    """A shaded spec whose templates set no material (the shaded quickstart) writes null materials
    (rendered as rubber): its own quick and deep checks and MosaicDataset accept them, and the record
    form still refuses a material that is neither a string nor null."""
    from mosaic.dataset import generate
    from mosaic.record_form import record_form_check
    from mosaic.torch_data import MosaicDataset
    from mosaic.verify import verify

    spec = load_spec(ROOT / "experiments" / "specs" / "coverage.yaml",
                     ["image.renderer=shaded", "image.size=16", "image.supersample=1", "splits.train=1", "splits.val=1",
                      "splits.test_id=1", "splits.test_ood=1", "splits.per=combination"])
    generate(spec, tmp_path / "d", format=fmt)
    assert verify(tmp_path / "d").ok and verify(tmp_path / "d", deep=True).ok
    assert len(MosaicDataset(tmp_path / "d", "train")) > 0
    rec = sample_record(spec, "train", 0)[0]
    assert rec["scene"]["objects"][0]["material"] is None
    check = record_form_check(spec)
    assert check(rec) is None
    rec["scene"]["objects"][0]["material"] = 5
    assert "material" in check(rec)


def test_parquet_and_stream_carry_the_3d_fields(tmp_path):
    import pyarrow.parquet as pq

    from mosaic.dataset import generate
    from mosaic.stream import StreamingDataset

    spec = load_spec(COGENT, ["image.size=32", "splits.train=8", "splits.val=2", "splits.test_id=2", "splits.test_ood=2"])
    generate(spec, tmp_path / "pq", format="parquet")
    t = pq.read_table(next((tmp_path / "pq").rglob("train*.parquet")))
    obj = t.column("scene")[0].as_py()["objects"][0]
    for k in ("material", "position_3d", "size_3d", "rotation_3d", "pixel_coords", "visible_fraction", "visible_pixels"):
        assert k in obj
    assert t.column("scene")[0].as_py()["view"]["preset"] == "clevr"
    card = (tmp_path / "pq" / "README.md").read_text()
    assert "visible_fraction" in card and "position_3d" in card
    ds = StreamingDataset(spec, "train")
    item = ds[0]
    rec, scene = sample_record(spec, "train", 0)
    assert np.array_equal(item["image"].permute(1, 2, 0).numpy(), renderer_for(spec).render_image(scene))


def test_flat_default_is_untouched():
    spec = load_spec(ROOT / "experiments" / "specs" / "relation.yaml")
    flat = load_spec(ROOT / "experiments" / "specs" / "relation.yaml", ["image.renderer=flat"])
    assert spec.fingerprint() == flat.fingerprint()  # flat is the default: the same resolved spec
    assert "renderer" not in spec.to_dict()["image"] and "material" not in spec.to_dict()["objects"][0]
    assert backend_of(spec) == "pillow"
    scene, _ = sample_scene(spec, "train", 0)
    assert type(scene).__name__ == "Scene" and "view" not in scene.to_dict()
    assert "material" not in scene.to_dict()["objects"][0]


@pytest.mark.parametrize("overrides, field, words", [
    (["objects.0.material=metal"], "objects[0].material", "image.renderer: shaded"),
    (["objects.0.shape=sphere"], "objects[0].shape", "shaded"),
    (["image.camera=clevr"], "image", "image.renderer: shaded"),
    (["image.renderer=shaded", "relations.0.relation=in_front_of"], "relations[0].relation", "in_front_of"),
    (["image.renderer=shaded", "objects.0.material=glass"], "objects[0].material", "rubber"),
])
def test_spec_errors_name_the_field_and_the_fix(overrides, field, words):
    with pytest.raises(SpecError) as e:
        load_spec(ROOT / "experiments" / "specs" / "relation.yaml", overrides)
    text = str(e.value)
    assert field in text and words in text, text


def test_the_labelled_objects_keep_their_own_visible_fraction():
    """layout.objects_min_visible_fraction bounds the spec's objects only: over 40 scenes the labelled
    objects never fall under 0.8 while some distractor does (it keeps min_visible_fraction 0.35)."""
    spec = load_spec(COGENT, ["image.size=48", "layout.objects_min_visible_fraction=0.8"])
    labelled, distractors = [], []
    for i in range(40):
        rec, _ = sample_record(spec, "train", i)
        for o in rec["scene"]["objects"]:
            (labelled if o["template"] in ("thing", "ball") else distractors).append(o["visible_fraction"])
    assert min(labelled) >= 0.8
    assert min(distractors) < 0.8  # the distractors' own bound, not the labelled one
    assert min(distractors) >= 0.35
    # a bound the labelled objects cannot keep is named as theirs
    bad = load_spec(COGENT, ["image.size=32", "layout.objects_min_visible_fraction=1.0", "layout.visibility_retries=1"])
    errors = []
    for i in range(30):
        try:
            sample_scene(bad, "train", i)
        except LayoutError as e:
            errors.append(str(e))
    assert errors and all("layout.objects_min_visible_fraction 1" in m for m in errors if "'thing'" in m or "'ball'" in m)
    assert any("'thing'" in m or "'ball'" in m for m in errors)


def test_a_scene_that_cannot_stay_visible_is_a_clear_error():
    spec = load_spec(COGENT, ["image.size=32", "layout.min_visible_fraction=1.0", "layout.min_visible_pixels=400",
                              "layout.visibility_retries=3"])
    with pytest.raises(LayoutError) as e:
        sample_scene(spec, "train", 0)
    msg = str(e.value)
    assert "layout.visibility_retries" in msg and "min_visible_pixels 400" in msg and "(split train, index 0)" in msg


@pytest.mark.slow
def test_every_shipped_spec_renders_in_3d():
    for path in sorted((ROOT / "experiments" / "specs").glob("*.yaml")):
        spec = load_spec(path, ["image.renderer=shaded", "image.supersample=1", "splits.train=0"] if path != COGENT else ["image.size=32"])
        split = next(s for s, n in spec.split_sizes().items() if n)
        rec, scene = sample_record(spec, split, 0)
        img, mask = get_renderer("shaded", supersample=1).render_one(scene)
        assert img.shape == (spec.image.size, spec.image.size, 3) and img.dtype == np.uint8
        assert len(set(np.unique(mask)) - {0}) == len(scene.objects), path.name
        assert img.std() > 3, path.name  # objects and shading, not a flat fill


def test_annotate_box_and_visible_fraction_of_an_object_half_out_of_frame():
    sc = _one("cube", 0.2, center=(0.5, 0.5), side=64)
    sc.objects[0].center = (1.0, 0.5)  # its middle on the right edge of the frame
    mask = annotate(sc)
    o = sc.objects[0]
    assert 0.35 < o.visible_fraction < 0.65
    assert o.box[2] == 64 and (mask == 1).sum() == o.visible_pixels


def test_shaded_scene_round_trips_through_its_dict():
    from mosaic.scene3d import scene_from_dict

    spec = load_spec(COGENT, ["image.size=32"])
    rec, scene = sample_record(spec, "train", 3)
    back = scene_from_dict(rec["scene"])
    r = ShadedRenderer(2)
    assert np.array_equal(r.render_image(back), r.render_image(scene))
    assert back.to_dict() == rec["scene"]


def test_parse_spec_accepts_the_clevr_cogent_holdout():
    spec = load_spec(COGENT)
    g = spec.grid
    assert g.status_of(("cube", "red")) != g.status_of(("cube", "blue"))
    assert g.status_of(("cylinder", "red")) == g.status_of(("cube", "blue"))
    assert spec.roles["material"] == "material" and parse_spec(spec.to_dict()).fingerprint() == spec.fingerprint()


def test_batched_rendering_and_layout_checks_equal_one_scene_at_a_time():
    """render_images shades up to 16 scenes in one set of array operations and sample_scenes draws the
    occlusion checks of several samples' layout tries in one mask pass: the same scenes, images and
    masks as one at a time, whatever the batch holds (mixed sizes and cameras, the sky in view, a
    sample whose layout fails)."""
    from mosaic.sampling import prefetch_scenes, sample_scenes

    specs = [load_spec(COGENT, ["image.size=48"]), load_spec(COGENT, ["image.size=48", "image.camera_jitter=2"]),
             load_spec(ROOT / "experiments" / "specs" / "binding.yaml", ["image.renderer=shaded", "image.size=48"])]
    scenes = []
    for spec in specs:
        alone = [sample_scene(spec, "train", i) for i in range(12)]
        together = sample_scenes(spec, "train", range(12))
        assert [(s.to_dict(), v) for s, v in alone] == [(s.to_dict(), v) for s, v in together]
        prefetch_scenes(spec, "train", range(3))
        assert [sample_scene(spec, "train", i)[0].to_dict() for i in range(3)] == [s.to_dict() for s, _ in alone[:3]]
        scenes += [s for s, _ in together]
    scenes.insert(5, _one(side=32))  # another image side inside the batch: batched apart
    rend = ShadedRenderer(2)
    single = [rend.render_image(s) for s in scenes]
    batched = rend.render_images(scenes)
    assert all(np.array_equal(a, b) for a, b in zip(single, batched)) and len(batched) == len(single)
    assert all(np.array_equal(m, instance_mask(s)[0]) for s, (_, m) in zip(scenes, rend.render_batch(scenes, masks=True)))
    bad = load_spec(COGENT, ["image.size=32", "layout.min_visible_fraction=1.0", "layout.min_visible_pixels=400",
                             "layout.visibility_retries=3"])
    out = sample_scenes(bad, "train", [0, 1])
    assert all(isinstance(e, LayoutError) and f"index {i})" in str(e) for i, e in enumerate(out))
