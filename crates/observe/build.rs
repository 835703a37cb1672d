//! Compiles the BPF program and generates its libbpf-rs skeleton.
use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "src/bpf/sched.bpf.c";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    // clang -target bpf does not search the multiarch include directory
    // where <asm/types.h> lives on Debian.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = format!("-I/usr/include/{arch}-linux-gnu");
    SkeletonBuilder::new()
        .source(SRC)
        .clang_args([multiarch.as_str(), "-Wall", "-O2"])
        .build_and_generate(out.join("sched.skel.rs"))
        .unwrap_or_else(|e| {
            panic!("building {SRC} failed: {e:#}\n(setup: ./scripts/setup.sh installs clang and libbpf-dev)")
        });
    println!("cargo:rerun-if-changed={SRC}");
}
