#!/usr/bin/env bash
# Build the static hairpin binary and assemble the image's whole filesystem in OUT_DIR.
# Both image definitions use it, so they hold the same files: the Dockerfile (multi-arch,
# for publishing) runs it in its build stage, scripts/image.sh (CI, buildah) on the host.
#
#   scripts/image-rootfs.sh OUT_DIR
#   scripts/image-rootfs.sh --rustflags   (prints the RUSTFLAGS it builds with: bench/run.sh uses them)
#
# OUT_DIR gets: /hairpin (static: glibc linked with +crt-static, cargo profile `image`; glibc
# >= 2.34 has the `files` and `dns` NSS modules built in, so name resolution needs no shared
# library), the CA bundle of the build machine's Debian ca-certificates package, and
# image/rootfs/ (/etc/passwd and /etc/group with the non-root user 65532, /etc/nsswitch.conf).
set -euo pipefail
cd "$(dirname "$0")/.."

out="${1:?usage: image-rootfs.sh OUT_DIR | --rustflags}"
target="$(rustc -vV | sed -n 's/^host: //p')"
# Static and not position-independent: a static-pie carries a relocation table (1.5 MB here)
# that an image's binary, never loaded at a random address by a dynamic loader, does not need.
rustflags="-C target-feature=+crt-static -C relocation-model=static"
# On x86_64 rustc links through its bundled lld, which can order functions: the ones the proxy
# runs go first, next to each other (scripts/link-hot-first.sh; other targets link as before).
# It finds them by their v0 symbol names, which name a generic function's type arguments (the
# legacy names give every instance the same name); the binary is stripped, so no one reads them.
if [[ "$target" == x86_64-unknown-linux-gnu ]]; then
    rustflags="$rustflags -C symbol-mangling-version=v0 -C linker=$PWD/scripts/link-hot-first.sh"
fi
if [[ "$out" == --rustflags ]]; then
    echo "$rustflags"
    exit 0
fi
target_dir="${CARGO_TARGET_DIR:-target}"
ca_bundle=/etc/ssl/certs/ca-certificates.crt

if [[ ! -s "$ca_bundle" ]]; then
    echo "image-rootfs: $ca_bundle is missing; install Debian's ca-certificates package" >&2
    exit 1
fi

# (`bench/run.sh` builds with the same flags by default, to bench what the image ships.)
RUSTFLAGS="$rustflags" cargo build --profile image --locked -p hairpin --target "$target"
bin="$target_dir/$target/image/hairpin"
# A static binary has no program interpreter; ldd says "not a dynamic executable" or
# "statically linked" and lists no library.
if ldd "$bin" 2>/dev/null | grep -q '=>'; then
    echo "image-rootfs: $bin is dynamically linked:" >&2
    ldd "$bin" >&2
    exit 1
fi

# What the linker placed first (link-hot-first.sh writes it beside the linked file in deps/).
if [[ "$target" == x86_64-unknown-linux-gnu ]]; then
    report="$(ls -t "$target_dir/$target/image/deps/"hairpin-*.hot-symbols 2>/dev/null | head -1)"
    if [[ -z "$report" ]]; then
        echo "image-rootfs: scripts/link-hot-first.sh wrote no report: was the binary linked by it?" >&2
        exit 1
    fi
    echo "image-rootfs: $(cat "$report")" >&2
    read -r found listed < <(sed -n 's/^hot symbols: \([0-9]*\) of \([0-9]*\) .*/\1 \2/p' "$report")
    if (( ${found:-0} * 2 < ${listed:-1} )); then
        echo "image-rootfs: fewer than half of scripts/hot-symbols.txt's names are in the binary: renew it with scripts/hot-symbols.sh" >&2
        exit 1
    fi
fi

rm -rf "$out"
mkdir -p "$out/etc/ssl/certs"
cp -a image/rootfs/. "$out/"
# The profile keeps the symbols (see Cargo.toml); the image's binary has none.
strip -o "$out/hairpin" "$bin"
chmod 0755 "$out/hairpin"
install -m 0644 "$ca_bundle" "$out/etc/ssl/certs/ca-certificates.crt"
"$out/hairpin" --version
