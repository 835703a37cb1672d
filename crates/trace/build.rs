//! With the `bpf` feature, compiles every BPF program `src/bpf/NAME.bpf.c`
//! into a libbpf-rs skeleton `NAME.skel.rs` (a new capture, e.g. block or
//! syscall tracepoints for io, is a new file there). The programs include
//! the event layouts from ontime-recording's `abi/` headers, the one
//! definition its build.rs generates the Rust side from.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "bpf")]
    skeleton();
}

#[cfg(feature = "bpf")]
fn skeleton() {
    use libbpf_cargo::SkeletonBuilder;
    use std::env;
    use std::path::PathBuf;

    /// The event headers, beside the recording format (a build script
    /// runs in its crate's directory).
    const ABI: &str = "../recording/abi";

    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    // clang -target bpf does not search the multiarch include directory
    // where <asm/types.h> lives on Debian.
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    let multiarch = format!("-I/usr/include/{arch}-linux-gnu");
    let abi = format!("-I{ABI}");
    let mut sources: Vec<PathBuf> = std::fs::read_dir("src/bpf")
        .expect("src/bpf exists")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".bpf.c"))
        .collect();
    sources.sort();
    for src in sources {
        let name = src
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".bpf.c"))
            .expect("NAME.bpf.c")
            .to_string();
        SkeletonBuilder::new()
            .source(&src)
            .clang_args([multiarch.as_str(), "-Isrc/bpf", abi.as_str(), "-Wall", "-O2"])
            .build_and_generate(out.join(format!("{name}.skel.rs")))
            .unwrap_or_else(|e| {
                panic!(
                    "building {} failed: {e:#}\n(setup: ./scripts/setup.sh installs clang and libbpf-dev)",
                    src.display()
                )
            });
        println!("cargo:rerun-if-changed={}", src.display());
    }
    println!("cargo:rerun-if-changed=src/bpf");
    println!("cargo:rerun-if-changed={ABI}");
}
