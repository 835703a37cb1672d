// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// The I/O event of io.bpf.c and the map values its reader shares: the one
// definition shared by the BPF program (crates/trace/src/bpf/io.bpf.c
// includes this file) and Rust (whose `IoEvent`, kinds, flags, `DevCounts`
// and `AppCounts` crates/recording/build.rs generates from it, in the form
// event.h describes; define prefixes: IO_F_: u8, IO_NO_GROUP and
// IO_LAYER_: u32, IO_ dropped; IO_PATH_MAX: usize). The recording stores
// events in this layout, little-endian. ontime-trace's layout test checks
// the generated layouts against the ones the compiler gave these structs
// (the skeleton's twins, from the BPF object's BTF).
#ifndef ONTIME_IO_EVENT_H
#define ONTIME_IO_EVENT_H

/* Kinds of I/O event. */
enum io_kind {
    IO_READ = 1,
    IO_WRITE = 2,
    IO_PREAD = 3,
    IO_PWRITE = 4,
    IO_READV = 5,
    IO_WRITEV = 6,
    IO_FSYNC = 7,
    IO_FDATASYNC = 8,
    IO_OPENAT = 9,
    /* QEMU's thread pool reads and writes its images with these. */
    IO_PREADV = 10,
    IO_PWRITEV = 11,
    /* QEMU's aio=io_uring: one io_uring request, submit to completion. */
    IO_URING_READ = 12,
    IO_URING_WRITE = 13,
    IO_URING_FSYNC = 14,
    /* QEMU's aio=native: one Linux AIO direct read or write, from the
     * file system's start of it (iomap) to its completion. */
    IO_AIO_READ = 17,
    IO_AIO_WRITE = 18,
    /* A request of the block layer on a watched device. */
    IO_BLOCK = 16,
};

/* No tenant (the group of block events). */
#define IO_NO_GROUP 0xffffffffu
/* Bytes of the path an IO_OPENAT event carries after it. */
#define IO_PATH_MAX 128
/* The file was opened with O_DIRECT. */
#define IO_F_DIRECT 1
/* A block request completed whose issue was not seen; or an asynchronous
 * request begun whose completion was not seen by the recording's end (in
 * flight then, or completed where the host hides the events: `bytes` is
 * what it asked for, `ret` 0). */
#define IO_F_UNPAIRED 2
/* A value of the `devices` map: a tenant's virtual disk (its loop device). */
#define IO_LAYER_VIRTUAL 1
/* A value of the `devices` map: the disk under a tenant's image. */
#define IO_LAYER_PHYSICAL 2

/* One I/O: a system call of a tenant on a regular file, or a block
 * request on a watched device. */
struct io_event {
    /* Completion (syscall exit, request completion), CLOCK_MONOTONIC. */
    __u64 ts;
    /* ns since the call entered / the request was issued where the kernel
     * keeps that (blk stats), else made (iostat's await). */
    __u64 latency;
    /* File position before the call, or byte address on the device. */
    __u64 offset;
    /* Inode of the file (system calls). */
    __u64 ino;
    /* Return value of the call (bytes moved, or -errno); the request's
     * error. */
    __s64 ret;
    /* Bytes asked for (0 for fsync; readv/writev: vectors), or the
     * request's size. */
    __u32 bytes;
    /* Calling thread, or thread that issued the request. */
    __u32 tid;
    /* The file's device (s_dev) or the block device; kernel encoding,
     * major << 20 | minor. */
    __u32 dev;
    /* The tenant (system calls); IO_NO_GROUP for block. */
    __u32 group;
    __u32 fd;
    __u16 cpu;
    __u8 kind;
    __u8 flags;
    /* The block layer's operation string ("R", "WS", "FWS", ...). */
    char rwbs[8];
};

/* IO_OPENAT carries the path it was given (C only: Rust reads the path
 * at IO_EVENT_SIZE, IO_PATH_MAX bytes). */
struct io_open_event {
    struct io_event ev;
    char path[IO_PATH_MAX];
};

/* The application layer as counters (the mode without syscall
 * tracepoints): what the tracked groups' threads that exited during the
 * recording read and wrote, less what they had done before it began (the
 * `exited_io` map's values); a thread's counters when the recording began
 * (the `io_baseline` map's values, written by the reader). */
struct app_counts {
    __u64 rchar;
    __u64 wchar;
    __u64 syscr;
    __u64 syscw;
};

/* Bios queued, merged and split on a device (the `dev_counts` map's
 * values, per CPU; the reader sums them). */
struct dev_counts {
    __u64 bios;
    __u64 bio_bytes;
    __u64 merges;
    __u64 splits;
};

#endif
