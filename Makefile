# Two commands: `make` (install, build the book, grade the example class) and `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
ASSIGNMENTS := $(notdir $(wildcard solutions/*))
CHROMIUM ?= /usr/bin/chromium
VIZ_JS := book/_static/viz-global.js
NODE := node_modules/.package-lock.json
LABEXT := labextension
LABEXT_NODE := $(LABEXT)/node_modules/.package-lock.json
LABEXT_BUILT := $(LABEXT)/dist/package.json
export PYTHONHASHSEED := 0
export OMP_WAIT_POLICY := PASSIVE
export CHROMIUM
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)

.PHONY: all install book exercises grade postgres graphviz npm lint test test-quick test-exercise test-full bench mutation \
        gpu-wheels gpu-check \
        clean

all: book grade

$(BIN)/activate:
	@command -v $(PYTHON) >/dev/null || { echo "Python 3.11 is required ($(PYTHON) not found)"; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(VENV)/.requirements: requirements.txt | $(BIN)/activate
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

# The course's package in editable mode, and its JupyterLab extension (labextension/) as pip installs it: a Python
# distribution of its own (course-check) whose data files JupyterLab finds in .venv/share/jupyter/labextensions.
$(VENV)/.installed: $(VENV)/.requirements pyproject.toml $(LABEXT_BUILT) $(LABEXT)/pyproject.toml $(LABEXT)/install.json
	$(PY) -m pip install --quiet --no-deps -e .
	$(PY) -m pip install --quiet --no-deps --force-reinstall ./$(LABEXT)
	touch $@

# The course's Python in .venv, and what its commands take from npm: MathJax typesets the feedback pages' math when
# nbgrader generate_feedback writes them.
install: $(VENV)/.installed $(NODE)

book: install graphviz $(VIZ_JS)
	$(BIN)/jupyter-book build --all -W -n --keep-going .

# Write into solutions/ what each graded cell grades (and the visible training run's settings), from the hidden suites.
.PHONY: criteria
criteria: install
	$(PY) -m autograder.authoring.criteria $(ASSIGNMENTS)

# Regenerate the learner release exercises/ from the one source, solutions/.
exercises: criteria
	$(PY) -m autograder.authoring.release $(ASSIGNMENTS)

# Grade the bundled example class with the real nbgrader, print its gradebook, and write the class report of each
# assignment it submits, all in its own folder and gradebook, _build/examples: never the course's grading folder
# (_build/grading, or GRADING_DIR), which nbgrader's commands use for the instructor's own class. The feedback pages'
# math is typeset by MathJax in node (npm's mathjax).
grade: install $(NODE)
	$(PY) -m autograder.classroom.grade_examples --grading-dir _build/examples

# The browser that tests/test_site.py drives: Debian's Chromium, installed when missing.
$(CHROMIUM):
	$(SUDO) apt-get update -qq
	$(SUDO) apt-get install -y -qq chromium

# The database server that tests/test_class.py starts for a PostgreSQL gradebook: Debian's, installed when missing.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql; }

# The layout engine of autograder/graph/ (the book's graphs, the feedback's, the CLI's): Debian's Graphviz.
graphviz:
	@command -v dot >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq graphviz; }

# What the project takes from npm, pinned in package-lock.json: Graphviz compiled to WebAssembly, JupyterHub's proxy
# (configurable-http-proxy), which tests/test_hub.py runs in front of a real hub, and MathJax, which typesets the
# feedback pages' math when they are written.
$(NODE): package.json package-lock.json | npm
	npm ci --ignore-scripts --no-audit --no-fund --loglevel=error

# Node.js and npm: Debian's, installed when missing (the extension's builder, rspack, needs Node.js 20.19 or later).
npm:
	@command -v npm >/dev/null || { \
	  $(SUDO) apt-get update -qq && \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm; }

# The JupyterLab extension ("Check my work" in the notebook toolbar and the Run menu): TypeScript against JupyterLab's
# packages, from npm with its own package-lock.json, compiled by tsc and bundled by JupyterLab's builder into dist/.
$(LABEXT_NODE): $(LABEXT)/package.json $(LABEXT)/package-lock.json | npm
	cd $(LABEXT) && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error

LABEXT_SOURCES := $(LABEXT)/tsconfig.json $(wildcard $(LABEXT)/src/* $(LABEXT)/schema/* $(LABEXT)/style/*)
$(LABEXT_BUILT): $(LABEXT_NODE) $(LABEXT_SOURCES) $(VENV)/.requirements
	cd $(LABEXT) && node_modules/.bin/tsc
	$(BIN)/jupyter-builder build $(LABEXT)

# Served with the site: the interactive graph page lays the graph out again in the reader's browser when a group is
# collapsed or expanded.
$(VIZ_JS): $(NODE)
	cp node_modules/@viz-js/viz/dist/viz-global.js $@

# The linters, configured in pyproject.toml: ruff on everything, mypy on the autograder package.
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# The test tiers are pytest markers (tests/conftest.py, docs/testing.md): quick, nbgrader, browser, gpu, full.
# CI (.ci/run) runs make test, then make test-full: every test.
TEST_NEEDS := $(CHROMIUM) postgres graphviz $(VIZ_JS) $(NODE)

test-quick: install
	$(BIN)/pytest -n 2 -q -m quick tests

# One exercise's own loop: every test of the course that checks an exercise, for ASG alone (what tests/test_scaffold.py
# runs on an exercise it adds): `make test-exercise ASG=rope`.
EXERCISE_TESTS := tests/test_release.py tests/test_exercises.py tests/test_variants.py tests/test_contract.py \
                  tests/test_static.py tests/test_guard.py
test-exercise:
	@test -n "$(ASG)" || { echo "usage: make test-exercise ASG=<assignment>"; exit 2; }
	@test -x $(BIN)/pytest || $(MAKE) install
	$(BIN)/pytest -q -p no:cacheprovider -m "not full" -k "$(ASG)" $(EXERCISE_TESTS)

test: lint $(TEST_NEEDS)
	$(BIN)/pytest -n 2 --dist loadgroup --durations=15 -m "not full" tests

# What make test leaves out or samples, whole: the book built (its experiments run) and its site in a browser, the
# classes of attackers and the red team, every known mistake of examples/variants/ (make test: one per graded cell, on
# the cells it can reach) also on its whole notebook, every correct alternative beside CPU hogs (docs/testing.md).
test-full: install $(TEST_NEEDS)
	$(BIN)/pytest -n 2 --dist loadgroup --durations=15 -m full tests

# Measurements, not pass/fail: speed against torch's own layers, memory, the speed check's calibration,
# where one notebook's grading time goes, trusted grading against plain nbgrader on the same notebooks,
# gradebook locking under concurrent writers, a class of 30 learners x every assignment on Dask, and the check
# service through its HTTP endpoint (one learner alone, eight at once, requests over the rate limit), what the
# library ban proves, flags and notes for honest idioms and routes to a library version, and its reading time, and
# how near correct answers come to the error a drawn call allows them (bench/results/rounding.md), the speed ratio of
# correct code against the reference, quiet and loaded, each round's blind corpus graded (bench/results/blind.md,
# blind-round2.md to blind-round6.md, each against its grading before the suites changed for it), one notebook, one
# score: each known mistake graded 20 times, the fused attention kernel's registers and spills at every block size
# the notebook allows, and its time against torch's flash backend (on a CUDA device; it says it skipped without one).
bench: install
	$(PY) bench/speed.py
	$(PY) bench/profile.py
	$(PY) bench/plain_nbgrader.py --rounds 2 --learners 3
	$(PY) bench/gradebook_locks.py --procs 8 16 32 --learners 2
	$(PY) bench/class_grading.py $(ASSIGNMENTS)
	$(PY) bench/check_service.py $(ASSIGNMENTS)
	$(PY) bench/library_ban.py --grade
	$(PY) bench/rounding.py
	$(PY) bench/self_speed.py --reps 10 --out bench/results/self-speed.md
	$(PY) bench/self_speed.py --reps 10 --hogs 2 --out bench/results/self-speed-loaded.md
	$(PY) bench/sdpa_speed_inputs.py --out bench/results/sdpa-speed-inputs-quiet.md
	$(PY) bench/sdpa_speed_inputs.py --hogs 2 --out bench/results/sdpa-speed-inputs-loaded.md
	$(PY) bench/blind.py --json bench/results/blind.json
	$(PY) bench/blind.py --report bench/results/blind-6f12630.json bench/results/blind.json > bench/results/blind.md
	$(PY) bench/blind.py --round 2 --json bench/results/blind-round2.json
	$(PY) bench/blind.py --report bench/results/blind-round2-before.json bench/results/blind-round2.json \
	  > bench/results/blind-round2.md
	$(PY) bench/blind.py --round 3 --json bench/results/blind-round3.json
	$(PY) bench/blind.py --report bench/results/blind-round3-before.json bench/results/blind-round3.json \
	  > bench/results/blind-round3.md
	$(PY) bench/blind.py --round 4 --json bench/results/blind-round4.json
	$(PY) bench/blind.py --report bench/results/blind-round4-before.json bench/results/blind-round4.json \
	  > bench/results/blind-round4.md
	$(PY) bench/blind.py --round 5 --json bench/results/blind-round5.json
	$(PY) bench/blind.py --report bench/results/blind-round5-before.json bench/results/blind-round5.json \
	  > bench/results/blind-round5.md
	$(PY) bench/blind.py --round 6 --json bench/results/blind-round6.json
	$(PY) bench/blind.py --report bench/results/blind-round6-before.json bench/results/blind-round6.json \
	  > bench/results/blind-round6.md
	$(PY) bench/stability.py --gradings 20 --out bench/results/stability.md
	$(PY) bench/fused_attention_spills.py --out bench/results/fused-attention-spills.md
	$(PY) bench/fused_attention_speed.py --gradings 10
	$(MAKE) mutation
	$(MAKE) test-full

# The hidden suites measured by mutation testing: mutants of every graded part's reference, those an oracle on the
# part's contract shows wrong graded by the suite (autograder/authoring/mutation.py): bench/results/mutation.md.
mutation: install
	$(PY) -m autograder.authoring.mutation $(ASSIGNMENTS) --out bench/results

# On a machine with an NVIDIA GPU and no network: the course in a virtual environment on that machine's CUDA build
# of torch, the GPU tests, the speed rule's calibration, GPU memory and a class graded on the GPU, results in
# _build/gpu-check.txt (bench/gpu_check.sh). gpu-wheels fetches beforehand, where PyPI is reachable, the packages
# such a machine's Python (3.12) lacks (bench/gpu-requirements.txt) into .whl/.
gpu-wheels: install
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
	  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 -d .whl -r bench/gpu-requirements.txt

gpu-check:
	bash bench/gpu_check.sh

clean:
	rm -rf _build
