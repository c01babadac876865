# Everyday commands. CI runs `.ci/run`, which is fmt-check + lint + test.
.PHONY: run test fmt lint ci bench generate fuzz-build fn-lengths sizes hot-symbols

run:  ## the main job on the bundled example, no cluster needed
	cargo run --release -- plan -f examples/cluster.yaml

test: ## the whole suite (installs nginx/haproxy/wrk/iproute2/iptables when missing)
	./scripts/test.sh

fmt:
	cargo fmt --all

lint:
	cargo clippy --workspace --all-targets -- -D warnings

ci:
	./.ci/run

fn-lengths: ## the ten longest functions in crates/*/src (`--top N`, `--max L`)
	python3 scripts/fn-lengths.py

sizes: ## the ten longest impl blocks and files in crates/*/src, tests aside (`--crate C`, `--max-impl L`, `--max-file L`)
	python3 scripts/sizes.py

generate: ## the Hairpin CRD from its Rust type, then the static manifest from the chart
	cargo run -q -- crd > charts/hairpin/crds/hairpin.io_hairpins.yaml
	./scripts/render-manifest.sh

bench: ## proxy vs HAProxy vs direct nginx, on loopback
	./bench/run.sh

hot-symbols: ## renew the functions the image links first (scripts/hot-symbols.txt; needs valgrind)
	./scripts/hot-symbols.sh
