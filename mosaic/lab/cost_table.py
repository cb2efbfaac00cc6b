"""The cost estimate as text: FLOP, byte and second formats, and the rich tables ``--dry-run`` prints."""

from __future__ import annotations

from mosaic.lab.cost import GiB, Estimate


def fmt_flops(x: float) -> str:
    """``1.23 TFLOP``-style text of a FLOP count."""
    for unit, scale in (("EFLOP", 1e18), ("PFLOP", 1e15), ("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if x >= scale:
            return f"{x / scale:.3g} {unit}"
    return f"{x:.3g} FLOP"


def fmt_bytes(x: float) -> str:
    return f"{x / GiB:.2f} GiB" if x >= GiB / 10 else f"{x / 2**20:.1f} MiB"


def fmt_seconds(s: float) -> str:
    if s >= 86400 * 2:
        return f"{s / 86400:.1f} d"
    if s >= 3600:
        return f"{s / 3600:.1f} h"
    if s >= 90:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s" if s >= 1 else f"{1000 * s:.0f} ms"


def render_estimate(est: Estimate) -> list:
    """Rich renderables of an estimate: the run's cost table, the accelerator table, warnings and notes."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title=f"cost estimate: {est.name} — {est.family}", show_header=False)
    t.add_column("what")
    t.add_column("value", justify="right")
    t.add_row("parameters", f"{est.params / 1e6:.2f} M")
    t.add_row("batch per process x grad_accum, steps", f"{est.batch_size} x {est.grad_accum}, {est.steps}")
    t.add_row("training FLOPs per image (forward + backward)", fmt_flops(est.train_flops_per_image))
    t.add_row("training FLOPs per step", fmt_flops(est.train_flops_per_step))
    t.add_row("training FLOPs, whole run", fmt_flops(est.train_flops_total))
    t.add_row(f"validation + sampling/evaluation FLOPs ({est.eval_images} test images)", fmt_flops(est.eval_flops_total))
    if est.autoencoder_params:
        t.add_row("autoencoder: training" + (" (cached: 0)" if est.autoencoder_cached else ""), fmt_flops(est.autoencoder_train_flops))
        t.add_row("autoencoder: encoding the dataset, decoding the samples",
                  fmt_flops(est.autoencoder_encode_flops + est.autoencoder_decode_flops))
    t.add_row("total FLOPs", fmt_flops(est.flops_total))
    t.add_row(f"peak memory per process, accelerator ({est.precision_gpu})", fmt_bytes(est.peak_bytes_gpu))
    t.add_row("  of which activations at the batch", fmt_bytes(est.activation_bytes_fixed + est.activation_bytes_per_image * est.batch_size))
    t.add_row("  weights, gradients, AdamW, EMA", fmt_bytes(est.static_bytes))
    t.add_row("  training data on the device", fmt_bytes(est.data_bytes))
    t.add_row(f"peak memory, this machine's CPU ({est.precision_cpu})", fmt_bytes(est.peak_bytes_cpu))
    if est.cpu_step_s:
        t.add_row(f"this machine: one step ({est.cpu_threads} thread(s), load {est.cpu_load:.1f} now)", fmt_seconds(est.cpu_step_s))
        t.add_row("  the same step on this machine idle (process CPU time)", fmt_seconds(est.cpu_step_idle_s))
        t.add_row("this machine: training (a core per thread)", fmt_seconds(est.cpu_train_s))
        t.add_row("this machine: validation, sampling, scoring", fmt_seconds(est.cpu_eval_s))
        if est.cpu_generate_s:
            t.add_row("this machine: dataset generation", fmt_seconds(est.cpu_generate_s))
        if est.cpu_autoencoder_s:
            t.add_row("this machine: autoencoder (training, encoding, decoding)", fmt_seconds(est.cpu_autoencoder_s))
        t.add_row("[bold]this machine: total (a core per thread)[/]", f"[bold]{fmt_seconds(est.cpu_total_s)}[/]")
        if est.cpu_total_loaded_s > 1.1 * est.cpu_total_s:
            t.add_row(f"  the same at the load measured now ({est.cpu_load:.1f})", fmt_seconds(est.cpu_total_loaded_s))
    a = Table(title=f"projected on one accelerator (assumed MFU {100 * est.assumed_mfu:.0f} % of the peak dense "
                    f"{'bf16' if est.precision_gpu != 'fp32' else 'TF32'} rate)")
    for col in ("accelerator", "peak bf16 TFLOP/s", "memory", "batch fits", "training", "total"):
        a.add_column(col, justify="left" if col == "accelerator" else "right")
    for r in est.accelerators:
        fit = "yes" if r.fits else f"[red]no[/] (max {r.max_batch})"
        a.add_row(r.name, f"{r.peak_tflops:g}", f"{r.memory_gb:g} GB", fit, fmt_seconds(r.train_s), fmt_seconds(r.total_s))
    out: list = [t, a]
    for w in est.warnings:
        out.append(Text.from_markup(f"[yellow]warning[/] {w}"))
    for n in est.notes:
        out.append(Text(f"note: {n}", style="dim"))
    return out


def print_estimate(est: Estimate, console=None) -> None:
    """Print :func:`render_estimate` to ``console`` (default: a new rich Console)."""
    if console is None:
        from rich.console import Console

        console = Console(emoji=False)
    for r in render_estimate(est):
        console.print(r)
