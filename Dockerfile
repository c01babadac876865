# syntax=docker/dockerfile:1
#
# hairpin: one static binary on distroless/static (no shell, no libc, non-root).
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/hairpin-rs/hairpin:dev .
#
# Each platform is compiled natively in its own builder (on arm64 runners, or under QEMU with
# `docker run --privileged --rm tonistiigi/binfmt --install arm64`), so no cross linker is
# needed. The binary is linked statically against glibc (`+crt-static`): glibc >= 2.34 has
# the `files` and `dns` NSS modules built in, so name resolution works without any shared
# library in the image.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
# Dependencies first, so source edits do not rebuild them.
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target,sharing=locked \
    set -eux; \
    target="$(rustc -vV | sed -n 's/^host: //p')"; \
    RUSTFLAGS="-C target-feature=+crt-static" \
      cargo build --release --locked -p hairpin --target "$target"; \
    cp "target/$target/release/hairpin" /hairpin; \
    # Fail the build if anything is still dynamically linked.
    ! ldd /hairpin 2>/dev/null | grep -q '=>'; \
    /hairpin --version

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /hairpin /hairpin
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["/hairpin"]
CMD ["--help"]
