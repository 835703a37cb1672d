//! Kernel receive stamps for the gateway's connections.
//!
//! Document 000's gateway emulator ran on a separate 32-core machine, so its
//! receive timestamps were untouched by the contention under test. In the
//! lab the gateway shares the contended CPUs, and a stamp taken in user
//! space when the handler runs carries the gateway's own scheduling delay.
//! The kernel's software receive stamp (`SO_TIMESTAMPNS`, taken when the
//! segment enters the gateway's network stack, in softirq) does not; the
//! gateway reads it with every `recvmsg` and keeps the user-space stamp
//! beside it, so each run can say how far the two differ.
//!
//! For TCP the kernel reports the stamp of the last segment a `recvmsg`
//! consumed. A request fits one segment and the crawler does not pipeline,
//! so the stamp of the read that completed a request is that request's
//! arrival.

use std::io;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

pub use ontime_core::kstamp::enable;

/// A TCP stream whose reads record the kernel's receive stamp of the data
/// they return, on CLOCK_MONOTONIC (0 while none has been seen).
pub struct StampedStream {
    inner: TcpStream,
    last_ns: Arc<AtomicU64>,
}

impl StampedStream {
    pub fn new(inner: TcpStream) -> (StampedStream, Arc<AtomicU64>) {
        let last_ns = Arc::new(AtomicU64::new(0));
        (
            StampedStream {
                inner,
                last_ns: last_ns.clone(),
            },
            last_ns,
        )
    }
}

pub(crate) use ontime_core::kstamp::recv_stamped;

impl AsyncRead for StampedStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let fd = this.inner.as_raw_fd();
        loop {
            ready!(this.inner.poll_read_ready(cx))?;
            // SAFETY: recv_stamped only writes into the unfilled part, and
            // we mark as filled exactly the bytes the kernel wrote.
            let unfilled = unsafe { buf.unfilled_mut() };
            match this
                .inner
                .try_io(Interest::READABLE, || recv_stamped(fd, unfilled, None))
            {
                Ok((n, stamp)) => {
                    // SAFETY: the kernel initialised n bytes of unfilled.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    if let Some(t) = stamp {
                        this.last_ns.store(t, Relaxed);
                    }
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for StampedStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Loopback delivers in the sender's softirq, which stamps the segment:
    /// a read returns the bytes and a stamp no later than the reader's clock.
    #[test]
    fn a_read_carries_the_kernel_receive_stamp() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = l.local_addr().unwrap();
            let mut client = TcpStream::connect(addr).await.unwrap();
            let (server, _) = l.accept().await.unwrap();
            enable(&server).unwrap();
            let (mut s, stamp) = StampedStream::new(server);
            // The kernel turns receive stamping on (a static key) from a
            // work item: exchange until it has (not a timing limit).
            let mut got = [0u8; 5];
            let (mut before, mut after) = (0, 0);
            for _ in 0..100 {
                before = ontime_core::MonoNs::now().0;
                client.write_all(b"hello").await.unwrap();
                s.read_exact(&mut got).await.unwrap();
                after = ontime_core::MonoNs::now().0;
                assert_eq!(&got, b"hello");
                if stamp.load(Relaxed) != 0 {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            let t = stamp.load(Relaxed);
            assert!(t != 0, "no kernel stamp in 100 reads");
            // The clock conversion may be off by the two clock reads; allow
            // a millisecond either side rather than a timing limit.
            assert!(
                t + 1_000_000 >= before && t <= after + 1_000_000,
                "{before} {t} {after}"
            );
        });
    }
}
