"""The network files are what the generator writes (no hand edit drifts from it)."""

from bpsa.tools import gen_networks


def test_files_match_the_generator(tmp_path, monkeypatch):
    monkeypatch.setattr(gen_networks, "OUT_DIR", tmp_path)
    gen_networks.main()
    shipped = (gen_networks.Path(gen_networks.__file__).resolve().parent.parent / "workloads"
               / "networks")
    for name in gen_networks.NETWORKS:
        assert (tmp_path / f"{name}.csv").read_text() == (shipped / f"{name}.csv").read_text()
