# nki_workbench developer entry points.  Only system python3 is needed to start:
# `make install` creates .venv and installs the package (editable) with all extras.

PYTHON3 ?= python3
VENV    ?= .venv
PY      := $(VENV)/bin/python
# The editable install records whether nki_workbench/ was a regular package (had __init__.py)
# when it ran; if it was not, a later __init__.py is ignored outside the repo root (e.g. in a
# Jupyter kernel started in notebooks/).  A separate stamp name forces one re-install then.
STAMP   := $(VENV)/.installed$(if $(wildcard nki_workbench/__init__.py),,-noinit)

.PHONY: install test lab bench bench-all lint clean notebooks nbval labext demo chromium

# The JupyterLab extension (extensions/nki_workbench_labext): its built assets are committed, so
# installing it copies them into the venv and needs no node (see that folder's README.md).
LABEXT       := extensions/nki_workbench_labext
LABEXT_STAMP := $(VENV)/.installed-labext

install: $(STAMP) $(LABEXT_STAMP)

$(PY):
	$(PYTHON3) -m venv $(VENV)

# Re-install only when pyproject.toml changes (editable install: code edits need no re-install).
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e ".[all]"
	rm -f $(VENV)/.installed $(VENV)/.installed-noinit
	touch $(STAMP)

$(LABEXT_STAMP): $(LABEXT)/pyproject.toml $(wildcard $(LABEXT)/nki_workbench_labext/labextension/static/*) | $(STAMP)
	$(PY) -m pip install --force-reinstall --no-deps ./$(LABEXT)
	touch $(LABEXT_STAMP)

# Rebuild the extension's committed assets after editing its src/ or style/ (needs node + npm registry).
labext: install
	cd $(LABEXT) && PATH="$(CURDIR)/$(VENV)/bin:$$PATH" jlpm install && \
		PATH="$(CURDIR)/$(VENV)/bin:$$PATH" jlpm build:prod && $(CURDIR)/$(PY) build_stamp.py --write
	$(PY) -m pip install --force-reinstall --no-deps ./$(LABEXT)
	touch $(LABEXT_STAMP)

# Two xdist workers on two cores: one BLAS thread each (OpenBLAS busy-waits when threads
# outnumber cores, which made small matmuls ~50x slower).
# One pass: the simulator tests (tests/sim) are parametrised over both executors, the numpy
# interpreter and the compiled JAX program (tests/sim/conftest.py), which must pass the same
# numpy references; the import-contract test (tests/unit/test_layers.py) runs with the rest.
test: install chromium
	OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(PY) -m pytest -n 2 tests --ignore=tests/browser
	@if ls notebooks/*.ipynb >/dev/null 2>&1; then $(MAKE) --no-print-directory nbval; \
	else echo "no notebooks/*.ipynb: skipping nbval"; fi
	OPENBLAS_NUM_THREADS=1 $(PY) -m pytest -p no:xdist -p no:cacheprovider tests/browser

# Debian's chromium for tests/browser (Playwright drives it; never a downloaded browser).
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
		$$SUDO apt-get update && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; }

# One command shows a newcomer everything: an HTML report of the bundled example kernels.
demo: install
	mkdir -p artifacts
	$(VENV)/bin/nki-workbench report -o artifacts/demo.html
	@echo "open artifacts/demo.html in a browser"

# Tutorials under nbval: 01 strict (every output compared, after the sanitizers), the others lax
# (only cells marked `# NBVAL_CHECK_OUTPUT` are compared; every cell must still run).
NBVAL    := OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(PY) -m pytest -p no:cacheprovider -q \
	-p tests.notebooks.nbval_history --nbval-current-env \
	--nbval-sanitize-with tests/notebooks/nbval_sanitize.cfg
NB_STRICT := notebooks/01_quickstart.ipynb
nbval: install
	$(NBVAL) --nbval $(NB_STRICT)
	$(NBVAL) --nbval-lax $(addprefix --ignore=,$(NB_STRICT)) notebooks; rc=$$?; \
		if [ $$rc -eq 5 ]; then echo "nbval: no other notebooks"; rc=0; fi; exit $$rc

# Re-execute every tutorial and save its outputs in place (commit the result).  Widget state is
# not stored: it would add hundreds of KB per notebook; the static views carry the outputs.
notebooks: install
	@set -e; for nb in notebooks/[0-9]*.ipynb; do echo "== $$nb"; \
		OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 $(VENV)/bin/jupyter nbconvert --to notebook \
		--execute --inplace --ExecutePreprocessor.timeout=120 \
		--ExecutePreprocessor.store_widget_state=False "$$nb"; done

# JupyterLab refuses to start as root without --allow-root (containers, CI, binder-like images
# run as root); LAB_ARGS passes more options, e.g. LAB_ARGS="--no-browser --port 8899".
LAB_ARGS ?=
LAB_ROOT := $(if $(filter 0,$(shell id -u)),--allow-root)
lab: install
	$(VENV)/bin/jupyter lab $(LAB_ROOT) $(LAB_ARGS) notebooks/

# The peer table (bench/peers.py: numpy, numpy tiles, interpreter, compiled, auto, Pallas);
# BENCH_ARGS=--quick for the two-minute version.  bench-all runs every other script too.
BENCH_ARGS ?=
bench: install
	$(PY) bench/peers.py $(BENCH_ARGS)

bench-all: install
	@set -e; for f in bench/*.py; do \
		case "$$f" in bench/peers_kernels.py|bench/calibration_kernels.py) continue;; esac; \
		echo "== $$f"; $(PY) "$$f"; \
	done

lint: install
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .hypothesis artifacts
	find . -path ./.git -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +
