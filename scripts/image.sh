#!/usr/bin/env bash
# Build hairpin's image with buildah from the Containerfile (nothing is pulled: FROM scratch,
# the filesystem comes from scripts/image-rootfs.sh), then run it:
#   - `hairpin --version` and `hairpin echo` inside the image, as the image's user (65532),
#     in the host network namespace, the echo listening on 127.0.0.1 only;
#   - a client on loopback (curl, sending a PROXY v1 header) must get its own header back;
#   - prints the image size against the 20 MB target (uncompressed) and fails above 22 MB.
# Also fails when the Dockerfile's final stage no longer matches the Containerfile.
#
# The binary is built with the `image` cargo profile (fat LTO at opt-level z, code generation in
# 16 units: see Cargo.toml) into its own target directory, kept across runs so CI only
# rebuilds what changed: HAIRPIN_IMAGE_TARGET_DIR (default ~/.cache/hairpin/target-image).
# buildah's storage lives in HAIRPIN_IMAGE_STORAGE (default ~/.cache/hairpin/containers).
# Needs root (or a user buildah can run as); scripts/install-test-deps.sh installs buildah,
# curl and ca-certificates when missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# The issue's target is under 20 MB; it is printed as PASS or MISS, like the bench's targets.
# The build fails only above MAX_BYTES, a guard against a real regression (such as a lost
# strip or LTO), not the target itself.
TARGET_BYTES=$((20 * 1000 * 1000))
MAX_BYTES=$((22 * 1000 * 1000))
TAG="localhost/hairpin:ci"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/hairpin"
export CARGO_TARGET_DIR="${HAIRPIN_IMAGE_TARGET_DIR:-$cache/target-image}"
storage="${HAIRPIN_IMAGE_STORAGE:-$cache/containers}"

# 1. Both image definitions describe the same image: from the last FROM on, the Dockerfile
#    equals the Containerfile, except that it copies the rootfs out of its build stage.
final_stage() {
    awk '/^FROM /{stage=""} {stage = stage $0 "\n"} END{printf "%s", stage}' "$1" \
        | grep -v '^#' | sed -e 's/ --from=build / /' -e 's#^COPY /rootfs/ #COPY rootfs/ #'
}
if ! diff -u <(final_stage Dockerfile) <(final_stage Containerfile); then
    echo "image: the final stages of Dockerfile and Containerfile differ (above); keep them equal" >&2
    exit 1
fi

scripts/install-test-deps.sh

work="$(mktemp -d)"
ctr=""
echo_pid=""
# vfs storage and chroot isolation: no overlay mount and no OCI runtime (runc/crun) needed.
bah() { buildah --root "$storage/root" --runroot "$storage/run" --storage-driver vfs "$@"; }
port=""
# The echo server inside the image, found by its unique command line and its executable.
echo_servers() {
    [[ -n "$port" ]] || return 0
    for pid in $(pgrep -f "hairpin echo --listen 127.0.0.1:$port" || true); do
        if [[ "$(readlink "/proc/$pid/exe" 2>/dev/null)" == */hairpin ]]; then echo "$pid"; fi
    done
}
cleanup() {
    # `buildah run` does not pass a signal on to the chrooted process: end the server itself.
    for pid in $(echo_servers); do kill "$pid" 2>/dev/null || true; done
    if [[ -n "$echo_pid" ]]; then kill "$echo_pid" 2>/dev/null || true; wait "$echo_pid" 2>/dev/null || true; fi
    if [[ -n "$ctr" ]]; then bah rm "$ctr" >/dev/null 2>&1 || true; fi
    # The previous run's image, untagged by this one, would pile up run after run.
    bah rmi --prune >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

# 2. The filesystem: static binary (timed: the build dominates), CA bundle,
#    /etc/passwd and /etc/group.
start=$SECONDS
scripts/image-rootfs.sh "$work/rootfs"
echo "image: static build (profile image) and rootfs took $((SECONDS - start)) s" >&2

# 3. The image.
bah build --quiet --isolation chroot --layers=false -f Containerfile -t "$TAG" "$work" >/dev/null
user="$(bah inspect --type image --format '{{.OCIv1.Config.User}}' "$TAG")"
# (Go template syntax of buildah 1.28: no `json` function; a list prints as `[a b]`.)
entrypoint="$(bah inspect --type image --format '{{.OCIv1.Config.Entrypoint}}' "$TAG")"
if [[ "$user" != "65532:65532" || "$entrypoint" != '[/hairpin]' ]]; then
    echo "image: expected user 65532:65532 and entrypoint [/hairpin], got $user $entrypoint" >&2
    exit 1
fi
ctr="$(bah from --quiet "$TAG")"
run() { bah run --isolation chroot --network host "$ctr" -- "$@"; }

# 4. Run it.
run /hairpin --version
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
run /hairpin echo --listen "127.0.0.1:$port" --proxy-protocol required --log-format text \
    >"$work/echo.log" 2>&1 &
echo_pid=$!
for _ in $(seq 100); do
    curl --silent --max-time 1 --output /dev/null "http://127.0.0.1:$port/" 2>/dev/null && break
    grep -q "listening" "$work/echo.log" 2>/dev/null && break
    kill -0 "$echo_pid" 2>/dev/null || { cat "$work/echo.log" >&2; echo "image: echo exited" >&2; exit 1; }
    sleep 0.1
done
answer="$(curl --silent --show-error --max-time 5 --haproxy-protocol "http://127.0.0.1:$port/image-check")"
if ! grep -q "image-check" <<<"$answer" || ! grep -qi "proxy" <<<"$answer"; then
    echo "image: the echo inside the image did not answer with the request and its PROXY header:" >&2
    echo "$answer" >&2
    cat "$work/echo.log" >&2
    exit 1
fi
# The server runs as the image's user, not as root.
echo_uid=""
for pid in $(echo_servers); do
    echo_uid="$(stat -c %u "/proc/$pid")"
done
if [[ "$echo_uid" != 65532 ]]; then
    echo "image: the echo server runs as uid '${echo_uid:-?}', not 65532" >&2
    exit 1
fi
echo "image: hairpin echo in the image (uid $echo_uid) answered a loopback client with its PROXY header"

# 5. Size: the uncompressed filesystem, which is the single layer.
bytes="$(du -sb "$work/rootfs" | cut -f1)"
echo "image: $TAG is $((bytes / 1000)) kB uncompressed ($(bah images --format '{{.Size}}' "$TAG") as buildah reports it); target $((TARGET_BYTES / 1000)) kB: $( (( bytes <= TARGET_BYTES )) && echo PASS || echo "MISS by $(( (bytes - TARGET_BYTES) / 1000 )) kB"); fails above $((MAX_BYTES / 1000)) kB"
if (( bytes > MAX_BYTES )); then
    echo "image: too large" >&2
    exit 1
fi
