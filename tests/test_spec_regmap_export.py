"""The register map's exports against the one definition (``bpsa.spec.regmap``): the JSON
parses back to ``register_map``; the C header, compiled with gcc into a program that prints
its macros, gives every register offset, field, code and constant of the configuration; the
Markdown table has a row per register with the right number of cells."""

import json
import subprocess

import pytest

from bpsa.config import load_config
from bpsa.spec import errors, isa, regmap
from bpsa.spec.regmap_export import FORMATS, export, to_c_header, to_json, to_markdown

CONFIGS = [load_config("small"), load_config("paper16")]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_json_is_the_register_map(config):
    data = json.loads(to_json(config))
    want = json.loads(json.dumps(regmap.register_map(config)))
    assert {k: data[k] for k in want} == want
    assert data["config"] == config.name and data["generator_version"]
    assert data["error_codes"]["ERROR_REQUANT"] == errors.AccelError.REQUANT == 11


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_c_header_compiles_to_the_same_values(config, tmp_path):
    (tmp_path / "bpsa.h").write_text(to_c_header(config))
    m = regmap.register_map(config)
    names = [f"BPSA_{n}" for n in m["registers"]]
    names += [f"BPSA_{n}_VALUE" for n in regmap.config_words(config)]
    names += [f"BPSA_{n}_BITS" for n, r in m["registers"].items() if "bits" in r]
    names += ["BPSA_STATUS_ERROR_MASK", "BPSA_STATUS_DONE_MASK", "BPSA_CONTROL_START",
              "BPSA_PHASE_GRADIENT", "BPSA_MODE_ZERO_FREE", "BPSA_ERROR_TOO_LARGE",
              "BPSA_ERROR_DMA_BUS", "BPSA_MAP_VERSION_MINOR"]
    body = "\n".join(f'  printf("{n} %lu\\n", (unsigned long)({n}));' for n in names)
    (tmp_path / "main.c").write_text(f'#include <stdio.h>\n#include "bpsa.h"\n#include "bpsa.h"\n'
                                     f"int main(void) {{\n{body}\n  return 0;\n}}\n")
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Werror", "-o", str(tmp_path / "main"),
                    str(tmp_path / "main.c")], check=True, cwd=tmp_path)
    out = subprocess.run([str(tmp_path / "main")], check=True, capture_output=True,
                         text=True).stdout
    got = dict(line.split() for line in out.splitlines())
    got = {k: int(v) for k, v in got.items()}
    for n, r in m["registers"].items():
        assert got[f"BPSA_{n}"] == r["offset"] == regmap.REGISTER_MAP[n]
        if "bits" in r:
            assert got[f"BPSA_{n}_BITS"] == r["bits"]
    for n, v in regmap.config_words(config).items():
        assert got[f"BPSA_{n}_VALUE"] == v
    assert got["BPSA_STATUS_ERROR_MASK"] == 0xFF00 and got["BPSA_STATUS_DONE_MASK"] == 2
    assert got["BPSA_CONTROL_START"] == 1 << regmap.CONTROL_BITS["START"]
    assert got["BPSA_PHASE_GRADIENT"] == regmap.Phase.GRADIENT
    assert got["BPSA_MODE_ZERO_FREE"] == regmap.Mode.ZERO_FREE
    assert got["BPSA_ERROR_TOO_LARGE"] == errors.AccelError.TOO_LARGE
    assert got["BPSA_ERROR_DMA_BUS"] == errors.ERROR_DMA_BUS
    assert got["BPSA_MAP_VERSION_MINOR"] == regmap.MAP_VERSION[1]


def test_markdown_has_a_row_per_register():
    config = CONFIGS[0]
    text, isa_text = to_markdown(config).split("## Instructions")
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert len(rows) == len(regmap.REGISTERS)
    for line in rows:                    # six cells: no unescaped "|" in a description
        assert len(line.replace("\\|", "").split("|")) == 8, line
    for r in regmap.REGISTERS:
        assert f"| `{r.name}` | 0x{r.offset:03X} |" in text
    # the instruction set: a row per opcode and per field, in index order
    fields = isa.fields(config)
    rows = [line for line in isa_text.splitlines() if line.startswith("| `")]
    assert rows == [f"| `{f.key}` | {i} | {f.bits} | {f.doc} |" for i, f in enumerate(fields)]
    for op in isa.Opcode:
        assert f"| {op.name} | {int(op)} |" in isa_text


def test_c_header_and_json_carry_the_instruction_set():
    config = CONFIGS[0]
    header = to_c_header(config)
    for i, f in enumerate(isa.fields(config)):
        name = f"BPSA_FIELD_{f.struct.upper()}_{f.name.upper()}"
        assert f"#define {name} {i}u" in header and f"#define {name}_BITS {f.bits}u" in header
    assert f"#define BPSA_OP_END {int(isa.Opcode.END)}u" in header
    assert f"#define BPSA_INSN_OPCODE_SHIFT {isa.OPCODE_LSB}u" in header
    assert f"#define BPSA_ERROR_PROGRAM 0x{errors.ERROR_PROGRAM:02X}u" in header
    data = json.loads(to_json(config))["instructions"]
    assert data["opcodes"]["SET"] == isa.Opcode.SET
    assert [(f["struct"], f["name"], f["bits"]) for f in data["fields"]] == [
        (f.struct, f.name, f.bits) for f in isa.fields(config)]

def test_export_refuses_unknown_formats():
    assert set(FORMATS) == {"json", "c", "md"}
    assert export(CONFIGS[0], "md") == to_markdown(CONFIGS[0])
    with pytest.raises(ValueError, match="format must be one of"):
        export(CONFIGS[0], "yaml")


def test_docs_regmap_is_current():
    """``docs/architecture/regmap.md`` is the export of ``small`` (``bpsa regmap --config small
    --format md -o docs/architecture/regmap.md`` after a change of the map)."""
    from pathlib import Path
    doc = Path(__file__).resolve().parent.parent / "docs" / "architecture" / "regmap.md"
    assert doc.read_text() == to_markdown(load_config("small"))
