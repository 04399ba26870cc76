"""The documentation site (``docs/``, ``make docs``): Sphinx with MyST builds it with warnings
as errors, so a broken link between pages, a missing page in a table of contents or a
docstring that does not build fails here."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_site_builds_with_warnings_as_errors(tmp_path):
    out = tmp_path / "html"
    # Sphinx's own deprecations are not ours: its warnings stay warnings (-W makes the
    # build's own warnings errors)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    r = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b",
                        "html", str(ROOT / "docs"), str(out)], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    pages = ["index", "getting_started", "results/index", "results/area"]
    pages += [f"architecture/{p}" for p in ("index", "blocks", "interface", "program", "regmap",
                                            "configuration", "numerics", "floating_point",
                                            "frontends", "pooling")]
    pages += [f"guides/{p}" for p in ("index", "simulation", "synthesis", "boards", "pytorch",
                                      "dse", "train")]
    pages += [f"api/{p}" for p in ("index", "config", "spec", "host", "plan", "models",
                                   "gateware", "platform", "sim", "torch", "verify", "cli")]
    for page in pages:
        assert (out / f"{page}.html").is_file(), page
    api = (out / "api" / "index.html").read_text()
    assert "bpsa.simulate" in api
    config = (out / "api" / "config.html").read_text()
    assert "check_runs_on" in config and "load_config" in config
    # a component's NumPy-style "Members" section becomes its list of ports
    gateware = (out / "api" / "gateware.html").read_text()
    assert 'id="bpsa.gateware.control.counters.Counters"' in gateware
    # every page the README links into exists in the site
    readme = (ROOT / "README.md").read_text()
    for target in ("getting_started", "architecture/index", "guides/index", "api/index",
                   "results/index"):
        assert f"(docs/{target}.md)" in readme
        assert (out / f"{target}.html").is_file()
