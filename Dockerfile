# syntax=docker/dockerfile:1
#
# hairpin: one static binary on an empty base (no shell, no libc, non-root), for publishing.
#
#   docker buildx build --platform linux/amd64,linux/arm64 -t ghcr.io/hairpin-rs/hairpin:dev .
#
# Each platform is compiled natively in its own builder (on arm64 runners, or under QEMU with
# `docker run --privileged --rm tonistiigi/binfmt --install arm64`), so no cross linker is
# needed. scripts/image-rootfs.sh builds the static binary and assembles the whole image
# filesystem (binary, CA bundle, /etc/passwd with user 65532); CI builds the same image from
# the Containerfile with buildah (scripts/image.sh), which checks that the final stages agree.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
COPY image ./image
COPY scripts/image-rootfs.sh scripts/link-hot-first.sh scripts/hot-symbols.txt ./scripts/
# The release workflow passes the commit; `hairpin_build_info` reports it.
ARG HAIRPIN_GIT_COMMIT
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target,sharing=locked \
    scripts/image-rootfs.sh /rootfs

FROM scratch
COPY --from=build /rootfs/ /
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["/hairpin"]
CMD ["--help"]
