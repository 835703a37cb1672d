//! With the `bpf` feature, compiles every BPF program `src/bpf/NAME.bpf.c`
//! (document 003's stamp and check) into a libbpf-rs skeleton `NAME.skel.rs`.
fn main() {
    #[cfg(feature = "bpf")]
    skeleton();
}

#[cfg(feature = "bpf")]
fn skeleton() {
    use libbpf_cargo::SkeletonBuilder;
    use std::path::PathBuf;
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    // clang -target bpf does not search the multiarch include directory
    // where <asm/types.h> lives on Debian.
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = format!("-I/usr/include/{arch}-linux-gnu");
    let src = PathBuf::from("src/bpf/channel.bpf.c");
    SkeletonBuilder::new()
        .source(&src)
        .clang_args([multiarch.as_str(), "-Isrc/bpf", "-Wall", "-O2"])
        .build_and_generate(out.join("channel.skel.rs"))
        .unwrap_or_else(|e| {
            panic!(
                "building {} failed: {e:#}\n(setup: ./scripts/setup.sh installs clang and libbpf-dev)",
                src.display()
            )
        });
    println!("cargo:rerun-if-changed=src/bpf");
}
