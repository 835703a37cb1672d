//! What the kernel offers to see a VMM's asynchronous I/O on its images,
//! found at run time: io_uring's tracepoints (QEMU's `aio=io_uring`), and
//! the iomap direct-I/O tracepoints with the kiocb flag that marks Linux
//! AIO (QEMU's `aio=native`), whose bit the kernel prints in the
//! tracepoint's format.

use std::path::Path;

/// The kiocb flag bits of this kernel the AIO programs test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IocbFlags {
    /// IOCB_AIO_RW: the request came through io_submit.
    pub aio_rw: u32,
    /// IOCB_WRITE.
    pub write: u32,
}

/// io_uring's submit, file lookup and completion tracepoints (the
/// layouts of Linux 5.19 and later) are all there.
pub fn uring_tracepoints(tracefs: &Path) -> bool {
    ["io_uring_submit_req", "io_uring_file_get", "io_uring_complete"]
        .iter()
        .all(|e| tracefs.join("events/io_uring").join(e).join("format").exists())
}

/// IOCB_AIO_RW and IOCB_WRITE as iomap_dio_rw_begin's format prints them;
/// None where the kernel has no such tracepoint or does not mark Linux AIO.
pub fn iocb_flags(tracefs: &Path) -> Option<IocbFlags> {
    let format = std::fs::read_to_string(tracefs.join("events/iomap/iomap_dio_rw_begin/format")).ok()?;
    // The BPF programs are tp_btf: the tracepoint must carry the kiocb.
    let _ = std::fs::read_to_string(tracefs.join("events/iomap/iomap_dio_complete/format")).ok()?;
    Some(IocbFlags {
        aio_rw: flag_bit(&format, "AIO_RW")?,
        write: flag_bit(&format, "WRITE")?,
    })
}

/// The bit `__print_flags` gives `name`: `{ (1 << 23), "AIO_RW" }`.
fn flag_bit(format: &str, name: &str) -> Option<u32> {
    let quoted = format!("\"{name}\"");
    format.split('{').find_map(|entry| {
        let entry = entry.split('}').next()?;
        if !entry.contains(&quoted) {
            return None;
        }
        let shift = entry.split("1 <<").nth(1)?;
        let digits: String = shift.trim_start().chars().take_while(char::is_ascii_digit).collect();
        let bit: u32 = digits.parse().ok()?;
        (bit < 32).then(|| 1u32 << bit)
    })
}

/// Why Linux AIO on `image` would pass the iomap hooks by, if it would: a
/// block device's direct I/O does not go through a file system, and only
/// file systems that do direct I/O through iomap fire its tracepoints.
pub fn aio_unseen_on(image: &Path) -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(image).ok()?;
    if meta.file_type().is_block_device() {
        return Some("a block device: its direct I/O has no tracepoint".into());
    }
    let c = std::ffi::CString::new(image.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: a NUL-terminated path and a zeroed statfs the call fills.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    const EXT4: i64 = 0xEF53;
    const XFS: i64 = 0x5846_5342;
    const BTRFS: i64 = 0x9123_683E;
    let fs = st.f_type as i64;
    (![EXT4, XFS, BTRFS].contains(&fs)).then(|| {
        format!("its file system (magic {fs:#x}) is not one that does direct I/O through iomap: ext4, xfs, btrfs")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flags as Linux 6.18 prints them in iomap_dio_rw_begin's format.
    const FORMAT: &str = r#"print fmt: "dev %d:%d ino 0x%lx flags %s", REC->ino, __print_flags(REC->ki_flags, "|", { ( int) (( __kernel_rwf_t)0x00000001), "HIPRI" }, { ( int) (( __kernel_rwf_t)0x00000002), "DSYNC" }, { (1 << 16), "EVENTFD"}, { (1 << 17), "DIRECT" }, { (1 << 18), "WRITE" }, { (1 << 19), "WAITQ" }, { (1 << 23), "AIO_RW" }, { (1 << 24), "AIO_HAS_METADATA" }), REC->aio"#;

    #[test]
    fn flag_bits_are_read_from_the_format() {
        assert_eq!(flag_bit(FORMAT, "AIO_RW"), Some(1 << 23));
        assert_eq!(flag_bit(FORMAT, "WRITE"), Some(1 << 18));
        assert_eq!(flag_bit(FORMAT, "DSYNC"), None, "not a shift");
        assert_eq!(flag_bit(FORMAT, "NOWAIT"), None);
    }

    #[test]
    fn a_file_on_tmpfs_is_named_as_unseen_for_linux_aio() {
        let dir = tempfile::tempdir_in("/dev/shm").expect("a directory on tmpfs");
        let f = dir.path().join("img");
        std::fs::write(&f, b"x").unwrap();
        assert!(aio_unseen_on(&f).is_some_and(|w| w.contains("iomap")));
    }
}
