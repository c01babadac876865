//! The image's linker on x86_64 (scripts/link-hot-first.sh) reads scripts/hot-symbols.txt, a
//! file cargo does not know: a renewed list must relink the binary.
fn main() {
    println!("cargo:rerun-if-changed=../../scripts/hot-symbols.txt");
}
