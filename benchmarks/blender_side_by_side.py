"""The same scene graphs rendered by Blender Cycles and by mosaic's shaded renderer, side by side, with
the speed ratio measured in the same run.

    python benchmarks/blender_side_by_side.py --blender-python PY [--n 8] [--px 128] [--spp 64]
                                              [--spec experiments/specs/clevr_cogent.yaml] [--out DIR]

``PY`` is a Python interpreter that can ``import bpy`` (Blender as a Python module, from PyPI:
``pip install bpy`` into its own environment; it is large and pins its own numpy, so it is the
``blender`` extra of pyproject.toml, never a dependency of mosaic). The script

1. samples ``--n`` scenes of the spec's ``train`` split, renders them with the shaded backend
   (CPU time per image measured), and writes their scene graphs to ``DIR/scenes.json``;
2. runs itself under ``PY`` (``--blender-worker``: it imports only bpy and the standard library),
   which builds each scene graph in Blender: the same camera pose and field of view, the three
   lamps as point lamps (the key lamp's ``radius`` as its soft size), an emitting world of the
   ambient level, a ground plane of the ground colour, UV spheres, cubes and cylinders of the scene
   graph's sizes and rotations, rubber as a rough dielectric and metal as a glossy metal of the
   object colour (Principled BSDF), the "Standard" view transform (plain sRGB), and renders it with
   Cycles on the CPU at ``--spp`` samples, timing each render (CPU and wall);
3. writes ``DIR/side_by_side.png`` (each row: Cycles, shaded) and prints the CPU-time ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------------------------
# the Blender side (runs under the bpy interpreter: stdlib and bpy only)
# ----------------------------------------------------------------------------------------------

def _lin(c: float) -> float:
    c = c / 255.0
    return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4


def blender_worker(scenes_path: str, out_dir: str, spp: int, threads: int) -> None:
    import bpy
    from mathutils import Vector

    scenes = json.loads(Path(scenes_path).read_text())
    times = []
    for k, sc in enumerate(scenes):
        bpy.ops.wm.read_factory_settings(use_empty=True)
        scene = bpy.context.scene
        scene.render.engine = "CYCLES"
        scene.cycles.device = "CPU"
        scene.cycles.samples = spp
        scene.cycles.use_denoising = False
        scene.render.resolution_x = scene.render.resolution_y = sc["image_size"]
        scene.render.resolution_percentage = 100
        scene.render.threads_mode = "FIXED"
        scene.render.threads = threads
        scene.view_settings.view_transform = "Standard"
        scene.render.image_settings.file_format = "PNG"
        world = bpy.data.worlds.new("world")
        world.use_nodes = True
        world.node_tree.nodes["Background"].inputs[0].default_value = (*(0.16,) * 3, 1.0)
        scene.world = world
        v = sc["view"]
        cam_data = bpy.data.cameras.new("cam")
        cam_data.angle = math.radians(v["fov"])
        cam_data.sensor_fit = "HORIZONTAL"
        cam = bpy.data.objects.new("cam", cam_data)
        scene.collection.objects.link(cam)
        cam.location = v["camera"]
        direction = Vector(v["look_at"]) - Vector(v["camera"])
        up = "Y"
        cam.rotation_euler = direction.to_track_quat("-Z", up).to_euler()
        scene.camera = cam
        for li in v["lights"]:
            d2 = sum(x * x for x in li["position"])
            lamp = bpy.data.lights.new(li["name"], "POINT")
            lamp.energy = 4 * math.pi ** 2 * d2 * li["intensity"]  # irradiance pi * I at the origin, as the shaded renderer's I
            lamp.shadow_soft_size = li["radius"]
            ob = bpy.data.objects.new(li["name"], lamp)
            ob.location = li["position"]
            scene.collection.objects.link(ob)

        def material(name, rgb, metal):
            m = bpy.data.materials.new(name)
            m.use_nodes = True
            p = m.node_tree.nodes["Principled BSDF"]
            p.inputs["Base Color"].default_value = (*[_lin(c) for c in rgb], 1.0)
            p.inputs["Metallic"].default_value = 1.0 if metal else 0.0
            p.inputs["Roughness"].default_value = 0.15 if metal else 0.9
            return m

        bpy.ops.mesh.primitive_plane_add(size=200, location=(0, 0, 0))
        bpy.context.object.data.materials.append(material("ground", sc["background"], False))
        for i, o in enumerate(sc["objects"]):
            x, y, z = o["position_3d"]
            w, _, h = o["size_3d"]
            rot = (0, 0, math.radians(o["rotation"]))
            if o["shape"] == "sphere":
                bpy.ops.mesh.primitive_uv_sphere_add(radius=w / 2, location=(x, y, z), segments=48, ring_count=24)
                bpy.ops.object.shade_smooth()
            elif o["shape"] == "cube":
                bpy.ops.mesh.primitive_cube_add(size=w, location=(x, y, z), rotation=rot)
            elif o["shape"] in ("cylinder", "circle"):
                bpy.ops.mesh.primitive_cylinder_add(radius=w / 2, depth=h, location=(x, y, z), vertices=64)
                bpy.ops.object.shade_smooth()
            else:
                raise SystemExit(f"blender_side_by_side builds spheres, cubes and cylinders; scene {k} has a {o['shape']}")
            bpy.context.object.data.materials.append(material(f"m{i}", o["rgb"], o["material"] == "metal"))
        scene.render.filepath = str(Path(out_dir) / f"cycles_{k:03d}.png")
        c0, w0 = time.process_time(), time.perf_counter()
        bpy.ops.render.render(write_still=True)
        times.append({"cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - w0})
        print(f"cycles scene {k}: {times[-1]['cpu_s']:.2f} CPU s, {times[-1]['wall_s']:.2f} s wall", flush=True)
    (Path(out_dir) / "cycles_times.json").write_text(json.dumps(times))


# ----------------------------------------------------------------------------------------------
# the mosaic side
# ----------------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blender-python", help="a Python interpreter with bpy installed")
    ap.add_argument("--spec", default=str(ROOT / "experiments" / "specs" / "clevr_cogent.yaml"))
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--px", type=int, default=128)
    ap.add_argument("--spp", type=int, default=64, help="Cycles samples per pixel")
    ap.add_argument("--threads", type=int, default=2, help="Cycles render threads")
    ap.add_argument("--out", default="data/blender_side_by_side")
    ap.add_argument("--blender-worker", nargs=2, metavar=("SCENES", "OUT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.blender_worker:
        return blender_worker(a.blender_worker[0], a.blender_worker[1], a.spp, a.threads)
    if not a.blender_python:
        raise SystemExit("give --blender-python: an interpreter that can `import bpy` (pip install bpy into its own venv)")

    sys.path.insert(0, str(ROOT))
    import numpy as np
    from PIL import Image, ImageDraw

    from mosaic.records import sample_record
    from mosaic.spec import load_spec
    from renderers import renderer_for

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    spec = load_spec(a.spec, [f"image.size={a.px}"])
    rend = renderer_for(spec)
    scenes = [sample_record(spec, "train", i)[1] for i in range(a.n)]
    rend.render_image(scenes[0])
    c0 = time.process_time()
    ours = [rend.render_image(s) for s in scenes]
    ours_cpu = (time.process_time() - c0) / a.n
    (out / "scenes.json").write_text(json.dumps([s.to_dict() for s in scenes]))
    load0 = os.getloadavg()[0]
    r = subprocess.run([a.blender_python, __file__, "--blender-worker", str(out / "scenes.json"), str(out), "--spp", str(a.spp),
                        "--threads", str(a.threads)], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"the Blender worker failed (exit {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    times = json.loads((out / "cycles_times.json").read_text())
    cyc_cpu = sum(t["cpu_s"] for t in times) / len(times)
    cyc_wall = sum(t["wall_s"] for t in times) / len(times)

    cell, pad, label = 256, 6, 18
    cols = 2
    sheet = Image.new("RGB", (cols * (cell + pad) + pad, a.n * (cell + pad) + pad + label), (255, 255, 255))
    d = ImageDraw.Draw(sheet)
    d.text((pad, 3), f"left: Blender Cycles {a.spp} spp ({cyc_cpu:.2f} CPU s)   right: mosaic shaded ({ours_cpu * 1000:.1f} CPU ms)",
           fill=(0, 0, 0))
    for k in range(a.n):
        cyc = Image.open(out / f"cycles_{k:03d}.png").convert("RGB").resize((cell, cell), Image.NEAREST)
        mine = Image.fromarray(ours[k]).resize((cell, cell), Image.NEAREST)
        y = label + pad + k * (cell + pad)
        sheet.paste(cyc, (pad, y))
        sheet.paste(mine, (2 * pad + cell, y))
    sheet.save(out / "side_by_side.png")
    diff = [float(np.abs(np.asarray(Image.open(out / f"cycles_{k:03d}.png").convert("RGB"), np.float64) - ours[k]).mean()) for k in range(a.n)]
    print(f"{a.n} scenes of {spec.name} at {a.px} px (load average {load0:.1f} before the Cycles renders):")
    print(f"  Blender Cycles {a.spp} spp, {a.threads} threads: {cyc_cpu:.2f} CPU s / image ({cyc_wall:.2f} s wall)")
    print(f"  mosaic shaded (supersample {spec.image.supersample}): {ours_cpu * 1000:.1f} CPU ms / image")
    print(f"  ratio: {cyc_cpu / ours_cpu:.0f}x less CPU time per image; mean |difference| {np.mean(diff):.1f} sRGB levels")
    print(f"  wrote {out / 'side_by_side.png'}")


if __name__ == "__main__":
    main()
