"""The pictures: each kind draws from a network step, the file's suffix picks the format, an
unknown kind is refused; the Pareto plot draws."""

import pytest

from bpsa.config import load_config
from bpsa.models.network_perf import network_step
from bpsa.spec.network import load_network
from bpsa.tools.perf_plots import KINDS, plot_pareto, plot_step


def test_plots(tmp_path):
    cfg = load_config("small")
    step = network_step(cfg, load_network("digits"), batch=2)
    for kind in KINDS:
        path = tmp_path / f"{kind}.png"
        plot_step(step, cfg, path, kinds=(kind,))
        assert path.read_bytes()[:4] == b"\x89PNG"
    plot_step(step, cfg, tmp_path / "all.svg")
    assert b"<svg" in (tmp_path / "all.svg").read_bytes()[:400]
    with pytest.raises(ValueError, match="plot kind 'pie' is not one of"):
        plot_step(step, cfg, tmp_path / "x.png", kinds=("pie",))
    pts = [{"area": a, "seconds": s, "label": str(a)} for a, s in [(1, 3), (2, 2), (3, 2.5)]]
    plot_pareto(pts, pts[:2], tmp_path / "pareto.png", "test")
    assert (tmp_path / "pareto.png").read_bytes()[:4] == b"\x89PNG"
