"""``python -m bpsa.tools.float_training``: one epoch writes the figure and the JSON of the four
histories (bf16 accelerator model, its PyTorch float32 and bf16 autocast references, int16)."""

import json

import pytest


@pytest.mark.long       # make test-long: training runs on both backends in make test elsewhere
def test_one_epoch_writes_the_figure_and_the_histories(tmp_path, capsys):
    from bpsa.tools.float_training import main
    fig, out = tmp_path / "t.png", tmp_path / "t.json"
    main(["--epochs", "1", "--figure", str(fig), "--json", str(out)])
    data = json.loads(out.read_text())
    assert fig.stat().st_size > 10_000
    assert len(data["float"]["history"]) == len(data["int16"]["history"]) == 1
    assert len(data["float_reference_fp32"]) == len(data["float_reference_bf16"]) == 1
    assert data["float"]["config"] == "small_bf16" and data["int16"]["config"] == "ecp5_train"
    assert 0 < data["float"]["test_accuracy"] <= 1
    assert "bf16: test accuracy" in capsys.readouterr().out
    # stamped for docs/results/training.md: the command, the commit and the date
    from bpsa.tools.results import git_commit, today
    assert data["command"] == ("python -m bpsa.tools.float_training --epochs 1 --figure "
                               f"{fig} --json {out}")
    assert (data["commit"], data["date"]) == (git_commit(), today())
