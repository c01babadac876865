//! Moving bytes both ways between the client and the upstream, in one task, with half-close.
//!
//! Reads go into one scratch buffer per worker thread and are written on at once; only bytes the
//! destination cannot take right now are kept, in a per-direction buffer allocated on first
//! need. An idle keep-alive connection therefore holds no buffer at all, and the hot buffer
//! stays in the worker's cache.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use socket2::SockRef;
use tokio::net::TcpStream;

use crate::metrics::RouteMetrics;

/// Size of each worker's scratch buffer: the most one read moves.
const SCRATCH_SIZE: usize = 64 * 1024;
/// The most one direction moves in one poll before letting the worker's other connections
/// run: a bulk transfer must not starve its neighbours (tail latency).
const BYTES_PER_POLL: usize = 256 * 1024;
/// Long-lived connections report their byte counts every this many bytes.
const FLUSH_EVERY: u64 = 1 << 20;

thread_local! {
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH_SIZE].into_boxed_slice());
}

/// Reads what `src` holds. A read that did not fill `buf` emptied the socket, so tokio's
/// readiness is cleared right away instead of by one more read that would fail with
/// `WouldBlock`: one syscall less per message. This is race-free for the same reason tokio's
/// own clearing is: `try_io` takes the readiness tick before the read and clears only if no
/// event arrived since, and EOF and errors (`READ_CLOSED`) are never cleared.
fn read_drained(src: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    let mut short = None;
    let result = src.try_io(tokio::io::Interest::READABLE, || {
        let n = (&*SockRef::from(src)).read(buf)?;
        if n > 0 && n < buf.len() {
            short = Some(n);
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    });
    match (result, short) {
        (Err(err), Some(n)) if err.kind() == io::ErrorKind::WouldBlock => Ok(n),
        (result, _) => result,
    }
}

/// One direction: `src` to `dst`.
#[derive(Debug, Default)]
struct Half {
    pending: Vec<u8>,
    written: usize,
    read_eof: bool,
    done: bool,
    unflushed: u64,
}

impl Half {
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        src: &TcpStream,
        dst: &TcpStream,
        last_activity: &mut Instant,
        counter: &prometheus_client::metrics::counter::Counter,
    ) -> Poll<io::Result<()>> {
        let mut moved = 0;
        loop {
            if moved >= BYTES_PER_POLL {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            if self.done {
                return Poll::Ready(Ok(()));
            }
            if self.written < self.pending.len() {
                ready!(dst.poll_write_ready(cx))?;
                match dst.try_write(&self.pending[self.written..]) {
                    Ok(n) => {
                        self.written += n;
                        if self.written == self.pending.len() {
                            self.pending.clear();
                            self.written = 0;
                        }
                    }
                    Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
                    Err(err) => return Poll::Ready(Err(err)),
                }
                continue;
            }
            if self.read_eof {
                // Half-close: the peer sent FIN, pass it on and keep the other direction open.
                match SockRef::from(dst).shutdown(Shutdown::Write) {
                    Ok(()) => {}
                    Err(err) if err.kind() == io::ErrorKind::NotConnected => {}
                    Err(err) => return Poll::Ready(Err(err)),
                }
                self.done = true;
                continue;
            }
            ready!(src.poll_read_ready(cx))?;
            let read = SCRATCH.with_borrow_mut(|buf| match read_drained(src, buf) {
                Ok(0) => {
                    self.read_eof = true;
                    Ok(0)
                }
                Ok(n) => self.forward(dst, &buf[..n]).map(|()| n),
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(0),
                Err(err) => Err(err),
            });
            let read = read?;
            if read > 0 {
                moved += read;
                *last_activity = Instant::now();
                self.unflushed += read as u64;
                if self.unflushed >= FLUSH_EVERY {
                    counter.inc_by(std::mem::take(&mut self.unflushed));
                }
            }
        }
    }

    /// Writes `data` to `dst` now, keeping what does not fit.
    fn forward(&mut self, dst: &TcpStream, data: &[u8]) -> io::Result<()> {
        // A direct write: tokio's cached readiness may not know yet that a fresh socket is
        // writable, and the kernel does. A WouldBlock here is caught up by `poll_write_ready`,
        // which then sees stale readiness once and clears it through `try_write`.
        let written = match (&*SockRef::from(dst)).write(data) {
            Ok(n) => n,
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => 0,
            Err(err) => return Err(err),
        };
        if written < data.len() {
            self.pending.extend_from_slice(&data[written..]);
        }
        Ok(())
    }
}

/// Both directions of one proxied connection.
#[derive(Debug)]
pub(crate) struct Duplex<'a> {
    client: &'a TcpStream,
    upstream: &'a TcpStream,
    metrics: &'a RouteMetrics,
    up: Half,
    down: Half,
    last_activity: Instant,
}

impl<'a> Duplex<'a> {
    pub(crate) fn new(
        client: &'a TcpStream,
        upstream: &'a TcpStream,
        metrics: &'a RouteMetrics,
    ) -> Self {
        Self {
            client,
            upstream,
            metrics,
            up: Half::default(),
            down: Half::default(),
            last_activity: Instant::now(),
        }
    }

    /// Writes the header that `encode` puts at the start of a buffer, followed by whatever the
    /// client has already sent, to the upstream in one write.
    pub(crate) fn send_first(
        &mut self,
        encode: impl FnOnce(&mut [u8]) -> io::Result<usize>,
    ) -> io::Result<()> {
        SCRATCH.with_borrow_mut(|buf| {
            let header = encode(buf)?;
            // Read the socket directly: tokio may not have seen the client's first bytes yet.
            let early = match (&*SockRef::from(self.client)).read(&mut buf[header..]) {
                Ok(0) => {
                    self.up.read_eof = true;
                    0
                }
                Ok(n) => n,
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => 0,
                Err(err) => return Err(err),
            };
            self.up.unflushed += early as u64;
            self.up.forward(self.upstream, &buf[..header + early])
        })
    }

    /// Moves bytes until both directions have finished (both sides sent FIN and everything
    /// was delivered) or one fails.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let up = self.up.poll(
            cx,
            self.client,
            self.upstream,
            &mut self.last_activity,
            &self.metrics.bytes_up,
        )?;
        let down = self.down.poll(
            cx,
            self.upstream,
            self.client,
            &mut self.last_activity,
            &self.metrics.bytes_down,
        )?;
        if up.is_ready() && down.is_ready() {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }

    /// When a byte last moved.
    pub(crate) fn last_activity(&self) -> Instant {
        self.last_activity
    }

    /// Adds the byte counts not reported yet to the metrics.
    pub(crate) fn flush_counts(&mut self) {
        self.metrics
            .bytes_up
            .inc_by(std::mem::take(&mut self.up.unflushed));
        self.metrics
            .bytes_down
            .inc_by(std::mem::take(&mut self.down.unflushed));
    }
}
