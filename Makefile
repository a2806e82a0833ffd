# dcl-beam: build, test, benchmark and demo targets. `make help` lists them.
SHELL := /bin/bash
.DEFAULT_GOAL := build

GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
LDFLAGS  := -X main.version=$(VERSION)
BIN      := bin
# Fashion-MNIST, from Debian's dataset-fashion-mnist package: the real data the tests and the
# demo use.
FASHION_MNIST ?= /usr/share/datasets/fashion-mnist
# The packages tested without -race are listed here once: NORACE_PKGS and BEAM_PKGS.
# Packages whose tests are numeric kernels: -race slows them 10x and they share no memory
# across goroutines that the race detector could check better than their own tests do.
NORACE_PKGS := ./trainstep/... ./gpu/... ./verify/... ./internal/jpeg/...
# Packages with amd64 assembly and Go loops for other builds, tested again with -tags purego
# (the loops arm64 and other architectures run).
PUREGO_PKGS := ./gpu/kernels/ ./gpu/cpu/ ./transforms/... ./internal/jpeg/...
# Packages whose tests run Beam pipelines in process. Beam v2.77.0's SDK harness has a data
# race of its own at worker shutdown (core/runtime/harness/harness.go: the receive loop closes
# respc at line 195 with no ordering after a bundle goroutine's send at line 213), which the
# race detector reports now and then, failing whichever test is running. `make test-race`
# runs them with -race anyway: read its reports, ignore that one.
BEAM_PKGS := ./pipelines/... ./cmd/... ./reproduce/... ./experiments/...
# -race turns on checkptr, and GoMLX's pure-Go backend (github.com/gomlx/compute v0.1.6,
# internal/gobackend/dot/matmul) turns uintptr arithmetic back into pointers, which checkptr
# stops as a fatal error ("pointer arithmetic result points to invalid allocation") in any
# test that runs a float64 matrix product there (analysis's NPC test through trainstep's
# float64 loss). checkptr stays on for every other module, ours included.
RACE_FLAGS := -race -gcflags='github.com/gomlx/compute/...=-d=checkptr=0'

TEST_TIMEOUT ?= 30m

# runwatch runs the long builds and tests so that none is silent for long: a build says every
# 20 s that it is still compiling, and go test's lines come as each package finishes, with a
# line naming what still runs after 20 s of quiet (internal/cmd/runwatch; standard library
# only, so it builds in seconds before anything else is downloaded).
RUNWATCH := $(GO) run ./internal/cmd/runwatch

# What travels to a GPU machine (make gpu-pack): the stripped, xz-compressed -tags cuda binary,
# Fashion-MNIST's four files and a few photographs from Debian's packages (scripts/photos.sh),
# at most GPU_PACK_MAX_MIB in all.
GPU_PACK        ?= .gpu
GPU_PACK_MAX_MIB ?= 60

# XLA's CPU PJRT plugin, installed by make deps (scripts/deps-xla-cpu.sh, which pins it): the
# xla-cpu backend's tests run the GPU's code path on it. XLA_PKGS are the packages with such
# tests, all named TestXLACPU*; built with the cuda tag, they run in their own step of make test.
XLA_CPU_PLUGIN := $(shell scripts/deps-xla-cpu.sh --path)
XLA_PKGS := ./gpu/cuda/ ./trainstep/ ./verify/ ./pipelines/ ./cmd/dcl/

.PHONY: help build build-cuda gpu-pack worker deps deps-go deps-data deps-torch deps-lightly deps-pyarrow deps-bench deps-flink deps-spark deps-xla-cpu generated test test-race test-flink test-spark bench bench-smoke lint demo docs clean

# help expands the variables the descriptions name, as make does for the recipes.
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}' | \
		sed $(foreach v,$(HELP_VARIABLES),-e 's|\$$($(v))|$($(v))|g')

# Every variable a target's help names, so that make help shows the value it has now.
HELP_VARIABLES = $(sort $(patsubst $$(%),%,$(shell grep -ohE '^[a-z-]+:.*## .*' $(MAKEFILE_LIST) | grep -oE '\$$\([A-Z_]+\)')))

build: ## build bin/dcl (pure Go, CPU backend)
	@echo "build: $(BIN)/dcl (the first build downloads and compiles every dependency; docs/development.md, The first run)"
	@$(RUNWATCH) -label "build: $(BIN)/dcl" -packages -- $(GO) build -v -ldflags "$(LDFLAGS)" -o $(BIN)/dcl ./cmd/dcl

build-cuda: ## build bin/dcl-cuda with the XLA/CUDA backend (needs cgo; the PJRT plugin is loaded at run time)
	CGO_ENABLED=1 $(GO) build -tags cuda -ldflags "$(LDFLAGS)" -o $(BIN)/dcl-cuda ./cmd/dcl

gpu-pack: deps-data ## $(GPU_PACK)/: the cuda binary (stripped, xz), Fashion-MNIST and photographs, for scripts/gpu-check.sh on a GPU machine
	@test -f $(FASHION_MNIST)/train-images-idx3-ubyte.gz || { echo "gpu-pack: no Fashion-MNIST in $(FASHION_MNIST) (make deps-data, or FASHION_MNIST=PATH)"; exit 1; }
	mkdir -p $(BIN) $(GPU_PACK)/fashion-mnist
	CGO_ENABLED=1 $(GO) build -tags cuda -trimpath -ldflags "-s -w $(LDFLAGS)" -o $(BIN)/dcl-cuda ./cmd/dcl
	xz -T0 -6 -c $(BIN)/dcl-cuda > $(GPU_PACK)/dcl-cuda.xz.tmp && mv $(GPU_PACK)/dcl-cuda.xz.tmp $(GPU_PACK)/dcl-cuda.xz
	cp $(FASHION_MNIST)/{train-images-idx3-ubyte,train-labels-idx1-ubyte,t10k-images-idx3-ubyte,t10k-labels-idx1-ubyte}.gz $(GPU_PACK)/fashion-mnist/
	scripts/photos.sh $(GPU_PACK)/photos || echo "gpu-pack: WARNING: no photographs; the JPEG feeding test will cut upscaled Fashion-MNIST"
	@size=$$(du -sm $(GPU_PACK) | cut -f1); \
	if [ $$size -gt $(GPU_PACK_MAX_MIB) ]; then echo "gpu-pack: $(GPU_PACK) is $$size MiB, over $(GPU_PACK_MAX_MIB) MiB"; exit 1; fi; \
	echo "gpu-pack: $(GPU_PACK) is $$size MiB: copy it with the repository to the GPU machine and run scripts/gpu-check.sh OUTDIR there"

worker: ## build the Beam worker binary: the same program, CGO_ENABLED=0, linux/amd64
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/dcl-worker-linux-amd64 ./cmd/dcl

deps: deps-go deps-data deps-torch deps-lightly deps-pyarrow deps-xla-cpu ## install what the tests and the demo need: Go modules and tools, Debian's dataset-fashion-mnist and python3-torch, lightly's losses, pyarrow, XLA's CPU plugin

deps-go:
	@echo "deps: Go modules (go mod download) and staticcheck"
	@$(RUNWATCH) -label "deps: go mod download" -- $(GO) mod download
	@$(RUNWATCH) -label "deps: staticcheck" -packages -- $(GO) build -v -o /dev/null honnef.co/go/tools/cmd/staticcheck

# deps-data installs Debian's dataset-fashion-mnist when it is missing and it can (as root or
# with password-less sudo). It only warns when it cannot: the tests that read it then skip,
# and `dcl demo` says how to point it at a copy (--input=PATH). CI checks it is there.
deps-data:
	@if [ -f $(FASHION_MNIST)/train-images-idx3-ubyte.gz ]; then \
		echo "deps: Fashion-MNIST found in $(FASHION_MNIST)"; \
	elif command -v apt-get >/dev/null 2>&1; then \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo -n"; \
		echo "deps: installing Debian package dataset-fashion-mnist"; \
		$$SUDO apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || \
		{ $$SUDO apt-get update -q >/dev/null 2>&1 && $$SUDO apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1; } || \
		echo "deps: WARNING: could not install dataset-fashion-mnist (needs root or sudo); tests that read it will skip, and the demo needs --input=PATH (make demo FASHION_MNIST=PATH)"; \
	else \
		echo "deps: WARNING: no apt-get here; get Fashion-MNIST's four IDX files and run make demo FASHION_MNIST=PATH"; \
	fi

# deps-torch installs Debian's PyTorch (python3-torch, python3-torchvision, python3-numpy) for
# the test that loads `dcl export`'s files in PyTorch (TestExportMatchesPyTorch, which reads
# the safetensors file itself: Debian has no safetensors package). Like deps-data it only
# warns where apt cannot install, and that test then skips.
TORCH_PYTHON ?= /usr/bin/python3
deps-torch:
	@if $(TORCH_PYTHON) -c 'import torch, torchvision, numpy' >/dev/null 2>&1; then \
		echo "deps: PyTorch found for $(TORCH_PYTHON)"; \
	elif command -v apt-get >/dev/null 2>&1; then \
		SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo -n"; \
		echo "deps: installing Debian packages python3-torch python3-torchvision python3-numpy (about 1 GB, a few minutes)"; \
		if $$SUDO apt-get install -y -q --no-install-recommends python3-torch python3-torchvision python3-numpy >/dev/null 2>&1 || \
		{ $$SUDO apt-get update -q >/dev/null 2>&1 && $$SUDO apt-get install -y -q --no-install-recommends python3-torch python3-torchvision python3-numpy >/dev/null 2>&1; }; then \
			echo "deps: PyTorch installed for $(TORCH_PYTHON)"; \
		else \
			echo "deps: WARNING: could not install python3-torch (needs root or sudo); the PyTorch export test will skip"; \
		fi; \
	else \
		echo "deps: WARNING: no apt-get here; the PyTorch export test will skip without python3 with torch and torchvision"; \
	fi

# deps-xla-cpu fetches XLA's CPU PJRT plugin (a pinned wheel, by version and SHA-256, with the
# machine's pip) into the user's cache folder, where the xla-cpu backend finds it. Like
# deps-data it only warns when it cannot; the xla-cpu tests then skip, and CI checks it is there.
deps-xla-cpu:
	@scripts/deps-xla-cpu.sh

# deps-lightly makes $(LIGHTLY_VENV), a virtual environment over Debian's python3-torch
# (--system-site-packages) holding lightly, installed by hash and without its dependencies
# (trainstep/testdata/lightly-requirements.txt says why), for TestLossMatchesLightly. It is
# remade when the requirements file changes; like deps-torch it only warns where it cannot
# install, and that test then skips.
LIGHTLY_VENV         := .cache/lightly
LIGHTLY_REQUIREMENTS := trainstep/testdata/lightly-requirements.txt
deps-lightly: deps-torch
	@if [ -x $(LIGHTLY_VENV)/bin/python ] && cmp -s $(LIGHTLY_REQUIREMENTS) $(LIGHTLY_VENV)/requirements.txt && \
		$(LIGHTLY_VENV)/bin/python -c 'import lightly.loss' >/dev/null 2>&1; then \
		echo "deps: lightly $$($(LIGHTLY_VENV)/bin/python -c 'import lightly; print(lightly.__version__)') found in $(LIGHTLY_VENV)"; \
	elif ! $(TORCH_PYTHON) -c 'import torch' >/dev/null 2>&1; then \
		echo "deps: WARNING: no PyTorch for $(TORCH_PYTHON), so no lightly in $(LIGHTLY_VENV); the comparison with lightly's losses will skip"; \
	else \
		echo "deps: installing lightly into $(LIGHTLY_VENV) (pinned by hash in $(LIGHTLY_REQUIREMENTS), over $(TORCH_PYTHON)'s PyTorch)"; \
		rm -rf $(LIGHTLY_VENV); \
		if $(TORCH_PYTHON) -m venv --system-site-packages $(LIGHTLY_VENV) && \
			$(LIGHTLY_VENV)/bin/pip install -q --disable-pip-version-check --no-deps --require-hashes -r $(LIGHTLY_REQUIREMENTS) && \
			$(LIGHTLY_VENV)/bin/python -c 'import lightly.loss' && cp $(LIGHTLY_REQUIREMENTS) $(LIGHTLY_VENV)/requirements.txt; then \
			echo "deps: lightly installed in $(LIGHTLY_VENV)"; \
		else \
			rm -rf $(LIGHTLY_VENV); \
			echo "deps: WARNING: could not install lightly (python3-venv missing, or PyPI out of reach); the comparison with lightly's losses will skip"; \
		fi; \
	fi

# deps-pyarrow makes $(PYARROW_VENV), a virtual environment of its own (pyarrow refuses Debian's
# numpy 1.x) holding pyarrow and numpy, installed by hash from $(PYARROW_REQUIREMENTS), for the
# test that reads an embedding file with Arrow's own Parquet reader. It is remade when the
# requirements file changes; like deps-lightly it only warns where it cannot install, and that
# test then skips.
PYARROW_VENV         := .cache/pyarrow
PYARROW_REQUIREMENTS := shards/embeddings/testdata/pyarrow-requirements.txt
deps-pyarrow:
	@if [ -x $(PYARROW_VENV)/bin/python ] && cmp -s $(PYARROW_REQUIREMENTS) $(PYARROW_VENV)/requirements.txt && \
		$(PYARROW_VENV)/bin/python -c 'import pyarrow.parquet' >/dev/null 2>&1; then \
		echo "deps: pyarrow $$($(PYARROW_VENV)/bin/python -c 'import pyarrow; print(pyarrow.__version__)') found in $(PYARROW_VENV)"; \
	else \
		echo "deps: installing pyarrow and numpy into $(PYARROW_VENV) (pinned by hash in $(PYARROW_REQUIREMENTS); about 70 MB)"; \
		rm -rf $(PYARROW_VENV); \
		if $(TORCH_PYTHON) -m venv $(PYARROW_VENV) && \
			$(PYARROW_VENV)/bin/pip install -q --disable-pip-version-check --no-deps --only-binary=:all: --require-hashes -r $(PYARROW_REQUIREMENTS) && \
			$(PYARROW_VENV)/bin/python -c 'import pyarrow.parquet' && cp $(PYARROW_REQUIREMENTS) $(PYARROW_VENV)/requirements.txt; then \
			echo "deps: pyarrow installed in $(PYARROW_VENV)"; \
		else \
			rm -rf $(PYARROW_VENV); \
			echo "deps: WARNING: could not install pyarrow (python3-venv missing, no wheel for this Python, or PyPI out of reach); the test reading embeddings with pyarrow will skip"; \
		fi; \
	fi

# deps-bench installs the references of scripts/cpu_compare.py, which make test never needs:
# PyTorch 2.15 from PyPI in $(TORCH_BENCH_VENV) (pinned by hash in $(TORCH_BENCH_REQUIREMENTS),
# which says what it leaves out; about 4.5 GB, most of it CUDA libraries torch will not load
# without), and Debian's OpenBLAS (libopenblas0-pthread, numpy's BLAS for the GEMM row), the
# compilers and Python headers torch.compile's C++ back end builds with.
TORCH_BENCH_VENV         := .cache/torch-bench
TORCH_BENCH_REQUIREMENTS := scripts/torch-bench-requirements.txt
deps-bench: deps-torch ## PyTorch 2.15 ($(TORCH_BENCH_VENV), about 4.5 GB) and Debian's OpenBLAS, for scripts/cpu_compare.py
	@SUDO=""; [ "$$(id -u)" = 0 ] || SUDO="sudo -n"; \
	if dpkg -s libopenblas0-pthread python3-dev g++ >/dev/null 2>&1; then \
		echo "deps: libopenblas0-pthread, python3-dev and g++ found"; \
	else \
		echo "deps: installing Debian packages libopenblas0-pthread python3-dev g++"; \
		$$SUDO apt-get install -y -q --no-install-recommends libopenblas0-pthread python3-dev g++ >/dev/null 2>&1 || \
		{ $$SUDO apt-get update -q >/dev/null 2>&1 && $$SUDO apt-get install -y -q --no-install-recommends libopenblas0-pthread python3-dev g++ >/dev/null 2>&1; } || \
		{ echo "deps: could not install libopenblas0-pthread python3-dev g++ (needs root or sudo)"; exit 1; }; \
	fi
	@if [ -x $(TORCH_BENCH_VENV)/bin/python ] && cmp -s $(TORCH_BENCH_REQUIREMENTS) $(TORCH_BENCH_VENV)/requirements.txt; then \
		echo "deps: PyTorch $$($(TORCH_BENCH_VENV)/bin/python -c 'import torch; print(torch.__version__)' 2>/dev/null) found in $(TORCH_BENCH_VENV)"; \
	else \
		echo "deps: installing PyTorch into $(TORCH_BENCH_VENV) (pinned by hash in $(TORCH_BENCH_REQUIREMENTS); about 4.5 GB, minutes)"; \
		rm -rf $(TORCH_BENCH_VENV) && /usr/bin/python3 -m venv $(TORCH_BENCH_VENV) && \
		$(TORCH_BENCH_VENV)/bin/pip install -q --disable-pip-version-check --no-deps --require-hashes -r $(TORCH_BENCH_REQUIREMENTS) && \
		$(TORCH_BENCH_VENV)/bin/python -c 'import torch; torch.ones(2) @ torch.ones(2)' && \
		cp $(TORCH_BENCH_REQUIREMENTS) $(TORCH_BENCH_VENV)/requirements.txt && \
		echo "deps: PyTorch installed in $(TORCH_BENCH_VENV)" || \
		{ rm -rf $(TORCH_BENCH_VENV); echo "deps: could not install PyTorch into $(TORCH_BENCH_VENV)"; exit 1; }; \
	fi

# deps-flink fetches Beam's Flink job server and Flink's own jars from Maven Central into
# .cache/flink (FLINK_CACHE), pinned by deploy/flink/jars.sha256; the newest Beam release whose
# Flink runner Maven Central serves with all its dependencies (docs/flink.md).
deps-flink: ## fetch Beam's Flink job server and Flink 1.19's jars (Maven Central, checksummed) into .cache/flink
	@scripts/flink.sh deps

# deps-spark fetches Beam's Spark job server and the Spark it is built against from Maven
# Central into .cache/spark (SPARK_CACHE), pinned by deploy/spark/jars.sha256 (docs/runners.md).
deps-spark: ## fetch Beam's Spark job server and Spark 3.2's jars (Maven Central, checksummed) into .cache/spark
	@scripts/spark.sh deps

# test-flink runs the pipelines on Flink: the job server's embedded Flink and a standalone
# session cluster of two TaskManagers, PROCESS workers started by Beam's boot loader from the
# cgo-free worker binary, every output compared with prism's. It fails, never skips, without
# Java or the jars. Its files (the JVMs', the workers', the tests') go into a folder of its
# own, removed when it ends, however it ends. Its tests' logs (the versions, the cluster, each
# comparison with prism) are printed as they come. FLINK_TESTS=Embedded or =Cluster runs one part.
test-flink: deps-flink worker ## run every Beam job on Flink (embedded and a 2-TaskManager cluster, one killed) and compare with prism
	@tmp="$$(mktemp -d "$${TMPDIR:-/tmp}/dcl-test-flink-XXXXXX")" && trap 'rm -rf "$$tmp"' EXIT && \
	TMPDIR="$$tmp" DCL_FLINK_REQUIRED=1 DCL_WORKER_BINARY=$(CURDIR)/$(BIN)/dcl-worker-linux-amd64 $(RUNWATCH) -gotest -v -label "test-flink" -- \
		$(GO) test -json -count=1 -timeout $(TEST_TIMEOUT) -run '^TestFlink$(FLINK_TESTS)' ./cmd/dcl/

# test-spark runs the jobs of test-flink's embedded part but reproduce (preprocess stored and
# online, embed, knn, linear, npc) on Beam's Spark job server, Spark in local[2] in its JVM,
# with the same PROCESS workers, every output compared with prism's; like test-flink it fails
# without Java or the jars and keeps its files in a folder of its own.
test-spark: deps-spark worker ## run the Beam jobs on Spark (local[2], Beam's Spark job server) and compare with prism
	@tmp="$$(mktemp -d "$${TMPDIR:-/tmp}/dcl-test-spark-XXXXXX")" && trap 'rm -rf "$$tmp"' EXIT && \
	TMPDIR="$$tmp" DCL_SPARK_REQUIRED=1 DCL_WORKER_BINARY=$(CURDIR)/$(BIN)/dcl-worker-linux-amd64 $(RUNWATCH) -gotest -v -label "test-spark" -- \
		$(GO) test -json -count=1 -timeout $(TEST_TIMEOUT) -run '^TestSpark$$' ./cmd/dcl/

# test and bench-smoke run go test -json through runwatch, which prints go test's own lines
# (ok, FAIL, the failed tests' output) as each package finishes, and exits with its status.
test: deps generated ## run every test (race detector on all but the numeric kernels and the Beam packages)
	DCL_FASHION_MNIST=$(FASHION_MNIST) DCL_TORCH_PYTHON=$(TORCH_PYTHON) DCL_LIGHTLY_PYTHON=$(CURDIR)/$(LIGHTLY_VENV)/bin/python DCL_PYARROW_PYTHON=$(CURDIR)/$(PYARROW_VENV)/bin/python $(RUNWATCH) -gotest -label "test (race)" -- \
		$(GO) test -json $(RACE_FLAGS) -timeout $(TEST_TIMEOUT) $$(comm -23 <($(GO) list ./... | sort) <($(GO) list $(NORACE_PKGS) $(BEAM_PKGS) | sort))
	DCL_FASHION_MNIST=$(FASHION_MNIST) DCL_TORCH_PYTHON=$(TORCH_PYTHON) DCL_LIGHTLY_PYTHON=$(CURDIR)/$(LIGHTLY_VENV)/bin/python DCL_PYARROW_PYTHON=$(CURDIR)/$(PYARROW_VENV)/bin/python $(RUNWATCH) -gotest -label "test" -- \
		$(GO) test -json -timeout $(TEST_TIMEOUT) $(NORACE_PKGS) $(BEAM_PKGS)
	@# The GPU's code path (go-xla, the XLA backend, the same StableHLO) on XLA's CPU plugin.
	@if [ -f $(XLA_CPU_PLUGIN) ]; then \
		DCL_FASHION_MNIST=$(FASHION_MNIST) DCL_XLA_CPU_PLUGIN=$(XLA_CPU_PLUGIN) CGO_ENABLED=1 $(RUNWATCH) -gotest -label "test (xla-cpu)" -- \
			$(GO) test -json -p 1 -tags cuda -run XLACPU -timeout $(TEST_TIMEOUT) $(XLA_PKGS); \
	else \
		echo "test (xla-cpu): SKIPPED: no XLA CPU plugin at $(XLA_CPU_PLUGIN) (make deps-xla-cpu could not fetch it; it said why): the XLA backend's tests did not run"; \
	fi
	@# Builds without the amd64 assembly (arm64, -tags purego) run the kernels' Go loops instead.
	$(RUNWATCH) -gotest -label "test (purego)" -- \
		$(GO) test -json -tags purego -timeout $(TEST_TIMEOUT) $(PUREGO_PKGS)
	@# Peak-memory bounds mean nothing under -race (it multiplies memory): measured without it.
	DCL_FASHION_MNIST=$(FASHION_MNIST) $(RUNWATCH) -gotest -label "test (memory)" -- \
		$(GO) test -json -timeout $(TEST_TIMEOUT) -run '^TestDecodeMemoryIsBounded$$' ./transforms/datasets/
	$(MAKE) --no-print-directory bench-smoke

test-race: ## the race detector on the Beam packages too (expect Beam's own harness race now and then)
	DCL_FASHION_MNIST=$(FASHION_MNIST) $(GO) test $(RACE_FLAGS) -timeout $(TEST_TIMEOUT) $$(comm -23 <($(GO) list ./... | sort) <($(GO) list $(NORACE_PKGS) | sort))

bench-smoke: ## run every benchmark once, small, so none rots
	DCL_FASHION_MNIST=$(FASHION_MNIST) $(RUNWATCH) -gotest -label "bench-smoke" -- \
		$(GO) test -json -run '^$$' -bench . -benchtime 1x -short -timeout $(TEST_TIMEOUT) ./...

bench: ## run the benchmarks for real (figures go to BENCHMARKS.md); BENCH=regexp COUNT=n PKGS=packages (default ./...)
	DCL_FASHION_MNIST=$(FASHION_MNIST) $(GO) test -run '^$$' -bench '$(or $(BENCH),.)' -count $(or $(COUNT),5) -timeout 120m $(or $(PKGS),./...)

generated: ## check that go generate's outputs are committed as go generate makes them now
	@if git rev-parse --git-dir >/dev/null 2>&1; then \
		$(GO) generate ./... && \
		git diff --exit-code --stat -- $$(git grep -lE '^// Code generated .* DO NOT EDIT' -- ':!third_party') || \
		{ echo "generated: go generate changed the files above: commit what it makes"; exit 1; }; \
	else echo "generated: not a git checkout; go generate's outputs not checked"; fi

lint: generated ## go vet and staticcheck, on the pure-Go and the cuda builds; builds the cuda binary too
	$(RUNWATCH) -label "lint: go vet" -- $(GO) vet ./...
	$(RUNWATCH) -label "lint: staticcheck" -- $(GO) tool staticcheck ./...
	CGO_ENABLED=0 $(GO) build ./...
	CGO_ENABLED=1 $(GO) vet -tags cuda ./...
	CGO_ENABLED=1 $(GO) tool staticcheck -tags cuda ./gpu/cuda/...
	CGO_ENABLED=1 $(GO) build -tags cuda -o /dev/null ./cmd/dcl
	@if command -v shellcheck >/dev/null 2>&1; then shellcheck scripts/*.sh; else echo "lint: no shellcheck here; scripts/*.sh not checked"; fi
	@# third_party/go-xla is upstream's code, formatted as its authors did, plus our patch files.
	scripts/vendor-go-xla.sh --check
	@test -z "$$(gofmt -l $$(find . -name '*.go' -not -path './third_party/*'))" || { echo "gofmt needed on:"; gofmt -l $$(find . -name '*.go' -not -path './third_party/*'); exit 1; }

demo: deps-data build ## a scaled-down reproduction on Fashion-MNIST (minutes on 2 free cores; the README says how long it took): demo-out/report.md
	$(BIN)/dcl demo --input=$(FASHION_MNIST) --output=demo-out
	@$(GO) run ./internal/cmd/docsgen --check >/dev/null 2>&1 && echo "demo: the README's demo section is this run's results" || \
		echo "demo: the README's demo section is not this run's results (another machine or code version): make docs rewrites it from demo-out"

# Every generated section of the docs (README.md, BENCHMARKS.md, docs/*.md) and the figures in
# docs/demo/, docs/gpu-experiment/, from the results kept under docs/: the demo's from demo-out
# when it holds one, and, with GPU_RUN=DIR, a GPU experiment's run directory (unpacked
# experiment-state.tgz). internal/cmd/docsgen lists the sections and what each is made from.
GPU_RUN ?=
docs: ## rewrite every generated section of the docs from the kept results (and demo-out, GPU_RUN=DIR)
	$(GO) run ./internal/cmd/docsgen --demo=demo-out $(if $(GPU_RUN),--gpu=$(GPU_RUN))

clean: ## remove build outputs and the GPU pack (not .gpu-work/, the GPU experiment's state)
	rm -rf $(BIN) $(GPU_PACK)
