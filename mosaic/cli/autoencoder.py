"""``mosaic autoencoder train|check``: the from-scratch autoencoder of latent diffusion
(:mod:`mosaic.lab.autoencoder`), trained and checked on its own, ahead of the runs that use it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from mosaic.cli.common import check_out, console, fail, set_option
from mosaic.errors import ConfigError, MosaicError

autoencoder_app = typer.Typer(no_args_is_help=True, add_completion=False,
                              help="Train and check the from-scratch autoencoder of latent diffusion (model.latent).")

SourceArg = Annotated[Path, typer.Argument(help="A spec YAML, or a diffusion training config (its dataset.spec and "
                                                "model.latent.autoencoder)")]
SetOpt = set_option("spec or config", "model.latent.autoencoder.steps=6000")
AeSetOpt = Annotated[Optional[list[str]], typer.Option("--ae", help="Override an autoencoder field (with a SPEC): key=value "
                                                                    "(repeatable), e.g. --ae factor=4 --ae steps=2000")]
RootOpt = Annotated[Optional[Path], typer.Option("--root", help="Cache root (default: the config's model.latent.root, else "
                                                               "data/autoencoders)")]
OutOpt = Annotated[Optional[Path], typer.Option("--out", "-o", help="Train into this folder instead of the cache (then use it "
                                                                   "with model.latent.path)")]


def _resolve(source: Path, set_: list[str] | None, ae: list[str] | None):
    """``(spec, LatentSection, dataset train images or None)`` of a spec or a diffusion config."""
    from mosaic.kinds import guess_kind
    from mosaic.lab.config import apply_sets, read_config_yaml, validate_config
    from mosaic.lab.diffusion.config import LatentSection

    data = read_config_yaml(source)
    kind = guess_kind(data)
    if kind == "training config":
        if ae:
            raise ConfigError([("--ae", "applies to a SPEC; with a config use --set model.latent.autoencoder.<field>=value")])
        from mosaic.lab.config import load_config
        from mosaic.lab.diffusion import DiffusionConfig
        from mosaic.lab.run import dataset_spec

        cfg = load_config(DiffusionConfig, source, set_)
        if cfg.model.latent is None:
            raise ConfigError([("model.latent", f"{source} is a pixel-space config (model.latent is null): add model.latent: "
                                "{autoencoder: {factor: 8}} or give a spec")], str(source))
        spec = dataset_spec(cfg)
        images = None
        try:
            from mosaic.lab.data import resolve_dataset
            from mosaic.torch_data import MosaicDataset

            root = resolve_dataset(cfg.dataset, generate=False)
            if (root / "manifest.json").is_file() and (root / "train").is_dir():
                images = MosaicDataset(root, "train").images
        except Exception:  # noqa: BLE001 - no dataset yet: the images are rendered
            images = None
        return spec, cfg.model.latent, images
    if kind != "spec":
        raise ConfigError(f"{source} is neither a spec nor a diffusion training config", str(source))
    from mosaic.spec import load_spec

    spec = load_spec(source, set_)
    raw = apply_sets({}, [f"autoencoder.{a}" for a in (ae or [])]) if ae else {}
    return spec, validate_config(LatentSection, raw, source="--ae"), None


def _print_check(res: dict) -> None:
    from rich.table import Table

    t = Table(title=f"the {res['evaluator']} evaluator on {res['n']} fresh renders of {res['spec']}")
    for col in ("concept", "renders", "reconstructions"):
        t.add_column(col, justify="left" if col == "concept" else "right")
    for c, v in res["accuracy"].items():
        r = res["renders_accuracy"].get(c)
        t.add_row(c, f"{100 * r:.1f} %" if r is not None else "-", f"{100 * v:.1f} %" if v is not None else "-")
    t.add_row("joint", f"{100 * (res['renders_joint_accuracy'] or 0):.1f} %", f"{100 * (res['joint_accuracy'] or 0):.1f} %")
    console.print(t)
    console.print(f"PSNR {res['psnr_db']:.2f} dB (worst image {res['psnr_db_min']:.2f} dB); threshold {100 * res['threshold']:.0f} % per "
                  f"concept: {'[green]passed[/]' if res['passed'] else '[red]refused[/]'}", highlight=False)


def train(source: SourceArg, set_: SetOpt = None, ae: AeSetOpt = None, root: RootOpt = None, out: OutOpt = None) -> None:
    """Train the autoencoder of a spec (or of a diffusion config's spec) and check it: the evaluator
    reads its reconstructions of fresh renders (>= 99 % per concept), PSNR. It lands in the cache
    every diffusion run on that spec reuses (or --out); a folder that holds it already is reused."""
    try:
        from mosaic.lab.autoencoder import cache_dir, checked, load_space, refuse_unless_passed, train_autoencoder

        check_out(out)
        check_out(root, "--root")
        spec, latent, images = _resolve(source, set_, ae)
        sec = latent.autoencoder
        folder = Path(out) if out is not None else cache_dir(root or latent.root, spec, sec)
        rec = train_autoencoder(sec, spec, folder, images=images, say=lambda s: console.print(s, highlight=False))
        if rec.get("already_trained"):
            console.print(f"{folder} holds this autoencoder already (trained in {rec['train_s']:.0f} s); checking it", highlight=False)
        res = checked(folder, sec, spec, load_space(folder), say=lambda s: console.print(s, highlight=False))
        _print_check(res)
        console.print(f"{rec['params'] / 1e6:.2f} M parameters, latents {' x '.join(map(str, rec['latent_shape']))}, "
                      f"{rec['steps']} steps in {rec['train_s']:.0f} s -> {folder}", highlight=False)
        refuse_unless_passed(res, folder)
    except MosaicError as e:  # printed without a traceback, exit 2
        fail(e)


def check(folder: Annotated[Path, typer.Argument(help="A trained autoencoder folder")], source: SourceArg,
          set_: SetOpt = None, ae: AeSetOpt = None,
          n: Annotated[Optional[int], typer.Option("--n", min=1, max=10**6, help="Fresh renders (default: the section's check_n)")] = None) -> None:
    """The evaluator on an autoencoder's reconstructions of fresh renders of a spec, next to the
    renders themselves, and PSNR; exit status 2 when it is below the threshold."""
    try:
        from mosaic.lab.autoencoder import check_autoencoder, load_space, refuse_unless_passed

        spec, latent, _ = _resolve(source, set_, ae)
        sec = latent.autoencoder
        space = load_space(folder)
        res = check_autoencoder(space, spec, n=n or sec.check_n, evaluator=sec.evaluator, threshold=sec.threshold)
        _print_check(res)
        refuse_unless_passed(res, Path(folder))
    except MosaicError as e:
        fail(e)


autoencoder_app.command("train")(train)
autoencoder_app.command("check")(check)
