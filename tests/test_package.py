"""The installable package: a wheel built from the checkout, installed into a new virtual
environment, runs ``bpsa`` from an empty directory; the host side imports no Amaranth."""

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_host_imports_no_amaranth():
    """The driver, transports and training code need only the contract, plans and models."""
    code = ("import sys, bpsa.host.driver, bpsa.host.serial_transport, bpsa.host.training\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('amaranth', 'cocotb'))\n"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """``(bin, env)``: a wheel of the checkout installed into a new virtual environment that
    sees this environment's dependencies (a .pth file) but not the checkout."""
    tmp = tmp_path_factory.mktemp("wheel")
    # build from a clean copy: an in-tree build/ may hold modules the tree no longer has
    tree = tmp / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "sim_build", "*.egg-info", "__pycache__", ".pytest_cache"))
    # pip and the build backend are not our code: their warnings stay warnings
    tools_env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(tree), "--no-deps", "-q",
                    "-w", str(tmp / "dist")], check=True, cwd=tmp, env=tools_env)
    wheel, = (tmp / "dist").glob("backprop_systolic-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "bpsa/presets/small.toml" in names and "bpsa/workloads/conv_layers.csv" in names
    assert "bpsa/platform/boards/ulx3s.toml" in names
    assert "bpsa/sim/testbenches/tb_accelerator.py" in names
    assert "bpsa/workloads/networks/resnet50.csv" in names
    assert "bpsa/models/area_points.json" in names
    assert "bpsa/sim/native/accel_harness.cpp" in names
    assert not [n for n in names if n.split("/")[0] in ("hw", "sim", "tests")]
    env_dir = tmp / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    site = subprocess.run([bin_dir / "python", "-c", "import sysconfig; "
                           "print(sysconfig.get_paths()['purelib'])"], check=True,
                          capture_output=True, text=True).stdout.strip()
    (Path(site) / "bpsa_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([bin_dir / "python", "-m", "pip", "install", "--no-deps", "--no-index", "-q",
                    str(wheel)], check=True, env=tools_env)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # reuse this checkout's Verilator builds (keyed by the Verilog's hash)
    env["BPSA_SIM_BUILD"] = str((ROOT / "sim_build").resolve())
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    return bin_dir, env, tmp


def _bpsa(installed, *args):
    bin_dir, env, tmp = installed
    empty = tmp / "empty"
    empty.mkdir(exist_ok=True)
    return subprocess.run([bin_dir / "bpsa", *args], cwd=empty, env=env, capture_output=True,
                          text=True, timeout=1800)


def test_wheel_is_used_not_the_checkout(installed):
    bin_dir, env, tmp = installed
    out = subprocess.run([bin_dir / "python", "-c", "import bpsa; print(bpsa.__file__)"],
                         cwd=tmp, env=env, capture_output=True, text=True, check=True).stdout
    assert str(tmp / "venv") in out and str(ROOT / "src") not in out


def test_wheel_verilog(installed):
    r = _bpsa(installed, "verilog", "--config", "small", "--top", "pe", "-o", "out")
    assert r.returncode == 0, r.stderr
    assert "module pe(" in (installed[2] / "empty" / "out" / "pe.v").read_text()


def test_wheel_network_data(installed):
    """The network files and the area model's points ship in the wheel."""
    import json
    r = _bpsa(installed, "perf", "--network", "resnet18", "--phases", "forward", "--json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["layers"]) == 23
    bin_dir, env, tmp = installed
    r = subprocess.run([bin_dir / "python", "-c", "from bpsa.models import area; "
                        "print(area.estimate(area.load_points()[0]['config'])['cells'])"],
                       cwd=tmp / "empty", env=env, capture_output=True, text=True)
    assert r.returncode == 0 and int(r.stdout) > 0, r.stderr


@pytest.mark.cocotb
def test_wheel_sim_gemm_and_step(installed):
    import json
    r = _bpsa(installed, "sim", "--config", "small", "--gemm", "8,8,8", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["match"] is True
    r = _bpsa(installed, "sim", "--config", "small", "--phase", "step", "--layer",
              "C=2,H=6,K=3,R=3,stride=2,pad=1", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    assert summary["match"] is True
    assert all(summary[f"{p}_match"] for p in ("forward", "loss", "gradient"))


def test_no_test_can_hang(request):
    """pytest-timeout bounds every test (pyproject's ``timeout``; ``make test`` a tighter
    ``--timeout``), so a hung simulation fails instead of stalling CI."""
    assert request.config.pluginmanager.hasplugin("timeout")
    assert float(request.config.getini("timeout")) > 0
    make = (Path(__file__).resolve().parent.parent / "Makefile").read_text()
    assert "--timeout=" in make.split("\ntest:")[1].split("\n\n")[0]


#: The subpackages each subpackage of ``bpsa`` may import (the README's "Layout": dependencies
#: point one way, from the contract up to the commands). ``bpsa`` is the package's own
#: ``__init__`` (``bpsa.simulate``).
ALLOWED_IMPORTS = {
    "spec": set(),
    "config": {"spec"},
    "plan": {"spec", "config"},
    "models": {"spec", "config", "plan"},
    "gateware": {"spec", "config", "plan"},
    "platform": {"spec", "config", "plan", "gateware"},
    "host": {"spec", "config", "plan", "models"},
    "sim": {"spec", "config", "plan", "models", "gateware", "platform", "host"},
    "torch": {"spec", "config", "plan", "models", "host", "sim"},
    "tools": {"spec", "config", "plan", "models", "gateware", "platform", "host", "sim",
              "torch"},
    "verify": {"spec", "config", "plan", "models", "gateware", "platform", "host", "sim",
               "tools"},
    "bpsa": {"sim"},
}


def _module_imports():
    """``{module: {imported bpsa module}}`` of every module of ``src/bpsa``, the imports inside
    functions included (an import that waits for a call is still a dependency)."""
    import ast
    src = ROOT / "src"
    modules = {}
    for path in sorted((src / "bpsa").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = {}
    for name, path in modules.items():
        deps = set()
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) + 1 - node.level]
                                    + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names] + [base]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    deps.add(target)
        graph[name] = deps
    return graph


def _subpackage(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "bpsa"


def test_imports_point_one_way():
    """No module imports a subpackage above its own (``ALLOWED_IMPORTS``); the commands
    (``bpsa.cli``) may import anything and nothing imports them."""
    graph = _module_imports()
    upward = []
    for module, deps in graph.items():
        own = _subpackage(module)
        for dep in deps:
            other = _subpackage(dep)
            if other == own or own == "cli":
                continue
            if other not in ALLOWED_IMPORTS.get(own, set()):
                upward.append(f"{module} -> {dep}")
    assert not upward, "imports against the layering:\n" + "\n".join(sorted(upward))
    assert set(ALLOWED_IMPORTS) | {"cli"} >= {_subpackage(m) for m in graph}, \
        "a new subpackage needs its place in ALLOWED_IMPORTS"


def test_no_import_cycle():
    """No module reaches itself through its imports (lazy imports inside functions count)."""
    graph = _module_imports()
    state, stack, cycles = {}, [], []

    def visit(module):
        state[module] = "open"
        stack.append(module)
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == "open":
                cycles.append(" -> ".join(stack[stack.index(dep):] + [dep]))
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
