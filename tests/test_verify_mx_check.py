"""make mx-check's tool (bpsa.verify.mx_check): a small run writes the page and its JSON with
zero mismatches, and a quantizer that disagrees with the references is counted and fails the
command."""

import json

import numpy as np
import pytest

from bpsa.verify import mx_check


def test_small_run_writes_the_page(tmp_path, capsys):
    mx_check.main(["--blocks", "300", "--products", "20", "-o", str(tmp_path)])
    page = (tmp_path / "mx.md").read_text()
    assert "| mxfp8_e4m3 | 300 | 0 | 0 |" in page
    rows = json.loads((tmp_path / "mx.json").read_text())["rows"]
    assert [r["format"] for r in rows] == ["mxint8", "mxfp8_e4m3", "mxfp8_e5m2"]
    assert all(r["dot_outputs"] >= 20 and r["dot_mismatches"] == 0 for r in rows)
    assert "0 mismatches" in capsys.readouterr().out


def test_a_disagreeing_quantizer_fails(tmp_path, monkeypatch):
    real = mx_check.quantize

    def off_by_one(x, name, axis=-1, **kw):
        codes, scales = real(x, name, axis=axis, **kw)
        return codes, np.where(scales < 200, scales + 1, scales).astype(np.uint8)

    monkeypatch.setattr(mx_check, "quantize", off_by_one)
    with pytest.raises(SystemExit):
        mx_check.main(["--blocks", "100", "--products", "5", "-o", str(tmp_path)])
    rows = json.loads((tmp_path / "mx.json").read_text())["rows"]
    assert all(r["quantize_mismatches"] > 0 for r in rows)
