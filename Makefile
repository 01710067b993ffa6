# Meganeura-C - top-level driver. `make demo` and `make test` do all the
# set-up on a fresh Debian 12 machine (missing packages, MNIST data).
#   make            build (release) into build/release
#   make demo       train the MNIST MLP on the CPU backend
#   make test       unit tests (release + ASan/UBSan), 60 s of fuzzing (split
#                   between the fuzzers: safetensors, graph, tokenizer,
#                   config.json, images, WAV, inference bundles, onnx), CLI
#                   checks, the ONNX conformance data
#   make data       fetch and convert MNIST once (cache: $XDG_CACHE_HOME/meganeura)
#   make lm-demo    train a tiny Llama on the Jargon File (Debian jargon-text), generate
#   make install    build, then install under PREFIX (default /usr/local), staged
#                   under DESTDIR if given: the program, libmeganeura.so/.a,
#                   headers, meganeura.pc, the man page, the Python package
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
FUZZ_SECONDS ?= 60
# A Vulkan test with no Vulkan device exits 77 and ctest shows it skipped;
# `make test` (which installs lavapipe) makes that a failure instead, so a
# machine that lost its driver cannot pass by skipping every Vulkan test.
# `make test MN_REQUIRE_VULKAN=0` allows the skips.
MN_REQUIRE_VULKAN ?= 1
export MN_REQUIRE_VULKAN
# each fuzzer gets an equal share of FUZZ_SECONDS (at least 1 s)
FUZZ_TARGETS := fuzz_safetensors fuzz_graph fuzz_tokenizer fuzz_hf_config fuzz_image fuzz_wav fuzz_bundle fuzz_onnx
FUZZ_EACH = $(shell s=$$(( $(FUZZ_SECONDS) / $(words $(FUZZ_TARGETS)) )); [ $$s -ge 1 ] && echo $$s || echo 1)
BIN := build/release/meganeura
PREFIX ?= /usr/local
DESTDIR ?=

.PHONY: all deps build asan fuzz data demo lm-demo test install install-files clean

all: build

deps:
	@scripts/deps.sh

build: deps
	@cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build build/release -j$(JOBS)

asan: deps
	@cmake -S . -B build/asan -DCMAKE_BUILD_TYPE=Debug -DMN_SANITIZE=ON >/dev/null
	@cmake --build build/asan -j$(JOBS)

fuzz: deps
	@cmake -S . -B build/fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug -DMN_FUZZ=ON -DMN_VULKAN=OFF >/dev/null
	@cmake --build build/fuzz -j$(JOBS) --target $(FUZZ_TARGETS)

data: build
	@scripts/mnist.sh $(BIN)

demo: build data
	$(BIN) train mnist

lm-demo: build
	scripts/lm-demo.sh $(BIN)

test: build asan fuzz data
	ctest --test-dir build/release --output-on-failure -j$(JOBS)
	ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan/vulkan-drivers.supp ctest --test-dir build/asan --output-on-failure -j$(JOBS) -LE slow
	for f in $(FUZZ_TARGETS); do tests/fuzz/run_fuzz.sh build/fuzz/tests/$$f $(FUZZ_EACH) || exit 1; done

# install-files installs what $(INSTALL_FROM) holds (tests/install_check.sh
# runs it on the tree ctest tested); install builds first. ldconfig refreshes
# the loader's cache after a real (not staged) install as root into /usr or
# /usr/local.
INSTALL_FROM ?= build/release
install: build
	@$(MAKE) --no-print-directory install-files

install-files:
	DESTDIR="$(DESTDIR)" cmake --install "$(INSTALL_FROM)" --prefix "$(PREFIX)"
	@case "$(DESTDIR):$(PREFIX):$$(id -u)" in :/usr:0|:/usr/local:0) ldconfig ;; esac

clean:
	rm -rf build
