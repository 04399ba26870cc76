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


#: The runners of :mod:`bpsa.sim`: the modules that name a cocotb testbench by string. They
#: form a layer above the testbenches (``bpsa.sim``'s docstring), which sit above the rest of
#: ``bpsa.sim``.
SIM_RUNNERS = {"bpsa.sim.accel_run", "bpsa.sim.simcmd"}

#: The layers each layer may import: a subpackage of ``bpsa`` (the README's "Layout":
#: dependencies point one way, from the contract up to the commands), ``bpsa.sim`` in three
#: (its library ``sim``, its cocotb testbenches ``sim.testbenches``, its runners
#: ``sim.runners``: :data:`SIM_RUNNERS`). ``bpsa`` is the package's own ``__init__``
#: (``bpsa.simulate``).
ALLOWED_IMPORTS = {
    "spec": set(),
    "config": {"spec"},
    "plan": {"spec", "config"},
    "models": {"spec", "config", "plan"},
    "gateware": {"spec", "config", "plan"},
    "platform": {"spec", "config", "plan", "gateware"},
    "host": {"spec", "config", "plan", "models"},
    "sim": {"spec", "config", "plan", "models", "gateware", "platform", "host"},
    "sim.testbenches": {"spec", "config", "plan", "models", "gateware", "platform", "host",
                        "sim"},
    "sim.runners": {"spec", "config", "plan", "models", "gateware", "platform", "host", "sim",
                    "sim.testbenches"},
    "torch": {"spec", "config", "plan", "models", "host", "sim"},
    "tools": {"spec", "config", "plan", "models", "gateware", "platform", "host", "sim",
              "sim.runners", "torch"},
    "verify": {"spec", "config", "plan", "models", "gateware", "platform", "host", "sim",
               "sim.runners", "tools"},
    "bpsa": {"sim"},
}

#: Calls whose string arguments name a module they load: cocotb's runner through
#: :func:`bpsa.sim.runner.run_cocotb`, ``importlib.import_module``, ``__import__``.
STRING_IMPORT_CALLS = {"run_cocotb", "import_module", "__import__"}
#: Keywords that name cocotb's test module(s) in any call (``Runner.test(test_module=...)``),
#: and the environment variable cocotb reads them from.
STRING_IMPORT_KEYWORDS = {"test_module", "test_modules"}
STRING_IMPORT_ENV = "COCOTB_TEST_MODULES"


def _modules():
    """``{dotted name: path}`` of every module of ``src/bpsa`` (a package by its name)."""
    src = ROOT / "src"
    modules = {}
    for path in sorted((src / "bpsa").rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _string_names(node):
    """The ``bpsa`` module names that ``node`` passes as strings to a loader: an argument of
    a :data:`STRING_IMPORT_CALLS` call, a :data:`STRING_IMPORT_KEYWORDS` keyword's value (a
    string or a list of them), the :data:`STRING_IMPORT_ENV` entry of a dict (names separated
    by commas), or a ``"bpsa.module:attribute"`` string (what ``importlib`` loads for
    ``platform.tops``' table or a board's core)."""
    import ast
    import re
    values = []
    if isinstance(node, ast.Call):
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if called in STRING_IMPORT_CALLS:
            values += node.args
        values += [k.value for k in node.keywords if k.arg in STRING_IMPORT_KEYWORDS]
    elif isinstance(node, ast.Dict):
        values += [v for k, v in zip(node.keys, node.values)
                   if isinstance(k, ast.Constant) and k.value == STRING_IMPORT_ENV]
    elif isinstance(node, ast.Constant) and isinstance(node.value, str) \
            and re.fullmatch(r"bpsa(\.\w+)*:\w+", node.value):
        return [node.value.partition(":")[0]]
    names = []
    for value in values:
        for item in value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]:
            if isinstance(item, ast.Constant) and isinstance(item.value, str):
                names += [n.strip() for n in item.value.split(",")
                          if n.strip() == "bpsa" or n.strip().startswith("bpsa.")]
    return names


def _imports_of(source, name, is_package, modules):
    """``(imports, strings)``: the modules of ``modules`` that the module ``name`` (its
    ``source``) imports by statement, the imports inside functions included (an import that
    waits for a call is still a dependency), and the module names it passes as strings
    (:func:`_string_names`; a name that is not in ``modules`` is kept, to be reported)."""
    import ast
    imports, strings = set(), set()
    package = name if is_package else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) + 1 - node.level]
                                + ([base] if base else []))
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            strings.update(t for t in _string_names(node) if t != name)
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                imports.add(target)
    return imports, strings


def _import_graphs():
    """``(imports, strings)``, each ``{module: {bpsa module}}`` over every module of
    ``src/bpsa``: :func:`_imports_of` its import statements, and its module names passed as
    strings."""
    modules = _modules()
    imports, strings = {}, {}
    for name, path in modules.items():
        imports[name], strings[name] = _imports_of(path.read_text(), name,
                                                   path.name == "__init__.py", modules)
    return imports, strings


def _module_imports():
    """``{module: {bpsa module it depends on}}``: its imports and the module names it passes
    as strings (a testbench that a runner names is as much a dependency as an import)."""
    imports, strings = _import_graphs()
    return {name: imports[name] | strings[name] for name in imports}


def _subpackage(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "bpsa"


def _layer(module):
    """The layer of ``module`` in :data:`ALLOWED_IMPORTS`: its subpackage, ``bpsa.sim`` split
    into ``sim.testbenches`` and ``sim.runners`` (:data:`SIM_RUNNERS`) above the library."""
    if module in SIM_RUNNERS:
        return "sim.runners"
    if module.startswith("bpsa.sim.testbenches"):
        return "sim.testbenches"
    return _subpackage(module)


def test_imports_point_one_way():
    """No module imports a layer above its own (``ALLOWED_IMPORTS``), by statement or by a
    module name passed as a string; the commands (``bpsa.cli``) may import anything and
    nothing imports them."""
    graph = _module_imports()
    upward = []
    for module, deps in graph.items():
        own = _layer(module)
        for dep in deps:
            other = _layer(dep)
            if other == own or own == "cli":
                continue
            if other not in ALLOWED_IMPORTS.get(own, set()):
                upward.append(f"{module} -> {dep}")
    assert not upward, "imports against the layering:\n" + "\n".join(sorted(upward))
    assert set(ALLOWED_IMPORTS) | {"cli"} >= {_layer(m) for m in graph}, \
        "a new subpackage needs its place in ALLOWED_IMPORTS"


#: The rooms of :mod:`bpsa.gateware` (its docstring), in import order: a room imports only the
#: rooms before it. ``accelerator`` is the top module.
GATEWARE_ROOMS = ("common", "fp", "array", "bus", "results", "frontends", "control",
                  "accelerator")

#: Modules of ``frontends`` that host several front ends (the output-stationary engine): a
#: front end's own folder imports neither them nor another front end's folder.
FRONTEND_HUBS = {"bpsa.gateware.frontends.conv_forward"}


def _room(module):
    """``(room, front end)`` of a module of :mod:`bpsa.gateware`: its folder under
    ``gateware`` (or the top module's name) and, in ``frontends``, the front end's folder
    (``None`` for a module at the root of ``frontends``)."""
    parts = module.split(".")[2:]
    front = parts[1] if parts[:1] == ["frontends"] and len(parts) > 2 else None
    return (parts[0] if parts else None), front


def test_gateware_rooms_point_one_way():
    """Every module of the gateware sits in a room; a room imports only the rooms before it
    (:data:`GATEWARE_ROOMS`), and a front end's folder imports no other front end and no hub
    (:data:`FRONTEND_HUBS`)."""
    graph = _module_imports()
    wrong = []
    for module, deps in graph.items():
        if not module.startswith("bpsa.gateware."):
            continue
        room, front = _room(module)
        assert room in GATEWARE_ROOMS, f"{module} is in no room of GATEWARE_ROOMS"
        for dep in deps:
            if not dep.startswith("bpsa.gateware."):
                continue
            other, other_front = _room(dep)
            if GATEWARE_ROOMS.index(other) > GATEWARE_ROOMS.index(room):
                wrong.append(f"{module} -> {dep} (a later room)")
            elif front and room == other and (dep in FRONTEND_HUBS
                                              or other_front not in (None, front)):
                wrong.append(f"{module} -> {dep} (another front end or a hub)")
    assert not wrong, "imports between rooms against their order:\n" + "\n".join(sorted(wrong))


def test_string_module_names_are_edges():
    """The graph holds the module names passed as strings: each runner's testbenches (so the
    checks cannot silently read none), and every name is a module of the package (a moved
    testbench leaves no stale name behind)."""
    imports, strings = _import_graphs()
    graph = _module_imports()
    tb = "bpsa.sim.testbenches."
    assert f"{tb}tb_accelerator" in strings["bpsa.sim.accel_run"]
    assert {f"{tb}tb_array", f"{tb}tb_conv_forward", f"{tb}tb_conv_backward"} \
        <= strings["bpsa.sim.simcmd"]
    assert f"{tb}tb_accelerator" in graph["bpsa.sim.accel_run"]
    assert "bpsa.gateware.array.pe" in strings["bpsa.platform.tops"]
    modules = _modules()
    stale = sorted(f"{m} -> {n}" for m, names in strings.items() for n in names
                   if n not in modules)
    assert not stale, "module names that name no module:\n" + "\n".join(stale)


def test_string_module_names_read_from_every_loader():
    """Each way of naming a module by string is read, and nothing else: run_cocotb's module,
    importlib, ``__import__``, cocotb's ``test_module`` keyword and environment variable,
    ``module:attribute`` strings."""
    source = """
import importlib
from importlib import import_module
run_cocotb(config, "bpsa.a.run", top="pe")
importlib.import_module("bpsa.a.importlib")
import_module("bpsa.a.bare")
__import__("bpsa.a.dunder")
runner.test(test_module="bpsa.a.keyword", hdl_toplevel="pe")
runner.test(test_module=["bpsa.a.list1", "bpsa.a.list2"], hdl_toplevel="pe")
env = {"COCOTB_TEST_MODULES": "bpsa.a.env1,bpsa.a.env2"}
TOPS = {"pe": "bpsa.a.entry:PE"}
print("bpsa.a.printed")
run_cocotb(config, "numpy")
warnings.filterwarnings("ignore", module="bpsa.a.warned")
"""
    _, strings = _imports_of(source, "bpsa.a.probe", False, {})
    assert strings == {f"bpsa.a.{n}" for n in ("run", "importlib", "bare", "dunder", "keyword",
                                                "list1", "list2", "env1", "env2", "entry")}


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


#: The longest ``elaborate()`` a component may have (the rest goes into methods with one job).
ELABORATE_MAX_LINES = 120

def test_no_elaborate_over_120_lines():
    """Every ``elaborate()`` of the package, from its ``def`` to its last line, is at most
    :data:`ELABORATE_MAX_LINES` long."""
    import ast
    wrong, lengths = [], {}
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "elaborate":
                    lengths[f"{name}.{node.name}"] = item.end_lineno - item.lineno + 1
    for key, lines in lengths.items():
        if lines > ELABORATE_MAX_LINES:
            wrong.append(f"{key}.elaborate() is {lines} lines")
    assert len(lengths) > 30, "the check found too few components"
    assert not wrong, "\n".join(wrong)
