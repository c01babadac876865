#!/usr/bin/env bash
# Build the static hairpin binary and assemble the image's whole filesystem in OUT_DIR.
# Both image definitions use it, so they hold the same files: the Dockerfile (multi-arch,
# for publishing) runs it in its build stage, scripts/image.sh (CI, buildah) on the host.
#
#   scripts/image-rootfs.sh OUT_DIR
#
# OUT_DIR gets: /hairpin (static: glibc linked with +crt-static, cargo profile `image`; glibc
# >= 2.34 has the `files` and `dns` NSS modules built in, so name resolution needs no shared
# library), the CA bundle of the build machine's Debian ca-certificates package, and
# image/rootfs/ (/etc/passwd and /etc/group with the non-root user 65532, /etc/nsswitch.conf).
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:?usage: image-rootfs.sh OUT_DIR}"
target="$(rustc -vV | sed -n 's/^host: //p')"
target_dir="${CARGO_TARGET_DIR:-target}"
ca_bundle=/etc/ssl/certs/ca-certificates.crt

if [[ ! -s "$ca_bundle" ]]; then
    echo "image-rootfs: $ca_bundle is missing; install Debian's ca-certificates package" >&2
    exit 1
fi

# Static and not position-independent: a static-pie carries a relocation table (1.5 MB here)
# that an image's binary, never loaded at a random address by a dynamic loader, does not need.
# (`bench/run.sh` builds the same way by default, to bench what the image ships: keep them in step.)
RUSTFLAGS="-C target-feature=+crt-static -C relocation-model=static" \
    cargo build --profile image --locked -p hairpin --target "$target"
bin="$target_dir/$target/image/hairpin"
# A static binary has no program interpreter; ldd says "not a dynamic executable" or
# "statically linked" and lists no library.
if ldd "$bin" 2>/dev/null | grep -q '=>'; then
    echo "image-rootfs: $bin is dynamically linked:" >&2
    ldd "$bin" >&2
    exit 1
fi

rm -rf "$out"
mkdir -p "$out/etc/ssl/certs"
cp -a image/rootfs/. "$out/"
install -m 0755 "$bin" "$out/hairpin"
install -m 0644 "$ca_bundle" "$out/etc/ssl/certs/ca-certificates.crt"
"$out/hairpin" --version
