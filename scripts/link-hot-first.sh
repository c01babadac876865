#!/bin/sh
# The linker of the image's binary on x86_64 (scripts/image-rootfs.sh and bench/run.sh pass it
# as `-C linker=`; rustc still drives its bundled lld through `cc`, as without it). It places
# the functions `hairpin proxy` runs (scripts/hot-symbols.txt) next to each other at the start
# of .text, then links as usual.
#
# Why: the kernel maps a binary's code 64 KiB (or a whole page-cache folio) at a time around
# each page fault. The 0.4 MB of code the proxy runs lay spread over 74 such windows of the
# 14 MB .text, so its resident memory was mostly pages of the binary it never ran (see
# crates/dataplane/README.md, "Resident memory").
#
# The list holds symbol names as keys that survive a rebuild: v0 names (image-rootfs.sh builds
# with `-C symbol-mangling-version=v0`; std's own code comes so too) without the crates'
# disambiguators, which change with a dependency's version or the compiler, and without the
# number LLVM gives a local copy. A key changes only when its function is renamed or moved, so
# a list that has gone stale costs memory, never correctness. What matched is written beside
# the binary, `<output>.hot-symbols`; scripts/image.sh prints it and fails when fewer than half
# of the listed names are found (then scripts/hot-symbols.sh renews the list).
set -eu
list="$(dirname "$0")/hot-symbols.txt"

out=""
prev=""
for arg in "$@"; do
    if [ "$prev" = "-o" ]; then out="$arg"; fi
    prev="$arg"
done

if [ -n "$out" ] && [ -s "$list" ]; then
    order="$out.hot-order"
    # The Rust code comes as the codegen units' objects (after fat LTO, std's code is in them
    # too); glibc's functions are listed by their plain names and found in its archive.
    objects=""
    for arg in "$@"; do
        case "$arg" in
            *.o) objects="$objects $arg" ;;
        esac
    done
    # shellcheck disable=SC2086 # the object paths rustc chose have no spaces
    { [ -z "$objects" ] || nm --defined-only -P $objects 2>/dev/null; } | awk -v list="$list" -v order="$order" '
        BEGIN {
            while ((getline line < list) > 0) {
                if (line == "" || line ~ /^#/ || (line in at)) continue
                at[line] = ++nkeys; key_at[nkeys] = line
            }
        }
        # The key of a name, as scripts/hot-symbols.sh writes it: without the number LLVM gives
        # a local copy (`.1234`, `.llvm.1234`); a v0 name without the crates'"'"' disambiguators
        # and with its back-references blanked (their offsets move with the disambiguators'"'"'
        # lengths); a legacy name without its hash.
        function key_of(name) {
            sub(/\.(llvm\.)?[0-9]+$/, "", name)
            if (name ~ /^_R/) {
                gsub(/Cs[0-9a-zA-Z]+_/, "C", name)
                gsub(/B[0-9a-zA-Z]*_/, "B_", name)
            } else {
                sub(/17h[0-9a-f]+E$/, "", name)
            }
            return name
        }
        $2 ~ /^[tTwW]$/ {
            key = key_of($1)
            if ((key in at) && !(($1) in seen)) {
                seen[$1] = 1; i = at[key]; count[i]++; placed[i, count[i]] = $1; n++
            }
        }
        # In the list'"'"'s order (what every proxy runs before what only some do); a C name
        # (glibc'"'"'s, in its archive rather than these objects) is passed on as it is.
        END {
            for (i = 1; i <= nkeys; i++) {
                if (count[i]) { m++; for (j = 1; j <= count[i]; j++) print placed[i, j] > order }
                else if (key_at[i] !~ /^_(ZN|R)/) { plain++; print key_at[i] > order }
            }
            printf "hot symbols: %d of %d Rust names found (%d functions placed first), %d C names passed on\n", m, nkeys - plain, n, plain
        }' > "$out.hot-symbols"
    exec cc "$@" "-Wl,--symbol-ordering-file=$order" -Wl,--no-warn-symbol-ordering
fi
exec cc "$@"
