"""mosaic.plots.plot_curves: the report's accuracy curves, on a linear or a log x axis."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from mosaic import plots  # noqa: E402
from mosaic.sweep import ReportSection  # noqa: E402


def _df():
    return pd.DataFrame({"spec.splits.train": [32, 32, 200, 200, 3200, 3200],
                         "seen.count": [0.99, 1.0, 0.97, 0.98, 0.97, 0.98]})


@pytest.mark.parametrize("scale", ["linear", "log"])
def test_curves_use_the_x_scale_asked_for(tmp_path, monkeypatch, scale):
    seen = []
    real = plots.save_figure

    def keep(fig, out):
        seen.append([ax.get_xscale() for ax in fig.axes])
        return real(fig, out)

    monkeypatch.setattr(plots, "save_figure", keep)
    p = plots.plot_curves(_df(), "spec.splits.train", None, ["seen.count"], tmp_path / "c.png", x_scale=scale)
    assert p is not None and p.is_file()
    assert seen == [[scale]]


def test_log_scale_is_ignored_for_an_axis_with_zero(tmp_path, monkeypatch):
    seen = []
    real = plots.save_figure
    monkeypatch.setattr(plots, "save_figure", lambda fig, out: (seen.append(fig.axes[0].get_xscale()), real(fig, out))[1])
    df = _df().assign(**{"spec.splits.train": [0, 0, 200, 200, 3200, 3200]})
    plots.plot_curves(df, "spec.splits.train", None, ["seen.count"], tmp_path / "c.png", x_scale="log")
    assert seen == ["linear"]


def test_report_section_refuses_an_unknown_x_scale():
    assert ReportSection(x_scale="log").x_scale == "log"
    with pytest.raises(ValueError):
        ReportSection(x_scale="logarithmic")
