// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
// The I/O event of io.bpf.c. Rust reads it by the offsets noted here
// (crates/trace/src/io_abi.rs, `IoEvent::from_bytes`); the recording stores
// events in this layout, little-endian. A unit test checks those offsets
// against the layout the compiler gave this struct (the skeleton's twin).
#ifndef ONTIME_IO_EVENT_H
#define ONTIME_IO_EVENT_H

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
    IO_BLOCK = 16,
};

#define IO_NO_GROUP 0xffffffffu
#define IO_PATH_MAX 128
/* The file was opened with O_DIRECT. */
#define IO_F_DIRECT 1
/* A block request completed whose issue was not seen. */
#define IO_F_UNPAIRED 2

/* offset | what
 *  0 ts       completion (syscall exit, request completion), CLOCK_MONOTONIC
 *  8 latency  ns since the call entered / the request was issued where
 *             the kernel keeps that (blk stats), else made (iostat's await)
 * 16 offset   file position before the call (system calls) or byte address
 *             on the device (block)
 * 24 ino      inode of the file (system calls)
 * 32 ret      the call's return value / the request's error
 * 40 bytes    bytes asked for (count; 0 for fsync, readv/writev: vectors)
 *             or the request's size
 * 44 tid      calling thread / thread that issued the request
 * 48 dev      the file's device (s_dev) / the block device, major << 20 | minor
 * 52 group    the tenant (system calls); IO_NO_GROUP for block
 * 56 fd
 * 60 cpu
 * 62 kind, 63 flags
 * 64 rwbs[8]  the block layer's operation string ("R", "WS", "FWS", ...) */
struct io_event {
    __u64 ts;
    __u64 latency;
    __u64 offset;
    __u64 ino;
    __s64 ret;
    __u32 bytes;
    __u32 tid;
    __u32 dev;
    __u32 group;
    __u32 fd;
    __u16 cpu;
    __u8 kind;
    __u8 flags;
    char rwbs[8];
};

/* IO_OPENAT carries the path it was given. */
struct io_open_event {
    struct io_event ev;
    char path[IO_PATH_MAX];
};

/* Per device, summed over CPUs by the reader. */
struct dev_counts {
    __u64 bios;
    __u64 bio_bytes;
    __u64 merges;
    __u64 splits;
};

#endif
