//! Moving bytes both ways between the client and the upstream, in one task, with half-close.
//!
//! Reads go into one scratch buffer per worker thread and are written on at once; only bytes the
//! destination cannot take right now are kept, in a per-direction buffer allocated on first
//! need. An idle keep-alive connection therefore holds no buffer at all, and the hot buffer
//! stays in the worker's cache. A direction with a large read ([`BULK_READ`]) is a bulk transfer:
//! it goes on through a pipe with `splice(2)` ([`crate::splice`]), without copies.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use socket2::SockRef;
use tokio::net::TcpStream;

use crate::metrics::RouteMetrics;
use crate::splice::Pipe;

/// Size of each worker's scratch buffer: the most one read moves.
const SCRATCH_SIZE: usize = 64 * 1024;
/// A read of at least this many bytes marks a bulk transfer: the direction splices from then on.
/// Not a read that fills the scratch buffer: a proxy that keeps up with its sender reads about
/// one segment at a time, and a segment is smaller than 64 KiB (65,483 bytes on loopback, whose
/// MTU is 64 KiB; at most 64 KiB from a NIC's GRO), so a full read came only when the proxy
/// had fallen behind, and on an idle machine a 10 MiB transfer was copied to the end (issue 32).
/// Requests and small responses stay well under it and keep the plain read and write.
const BULK_READ: usize = 16 * 1024;
/// The most one direction moves in one poll before letting the worker's other connections
/// run: a bulk transfer must not starve its neighbours (tail latency). The connection then
/// yields with `tokio::task::yield_now`, which the runtime wakes only after it has polled for
/// I/O: a plain self-wake would go back on the run queue ahead of every connection whose
/// socket became ready meanwhile, and the driver is polled only every 61 tasks.
const BYTES_PER_POLL: usize = 256 * 1024;
/// Long-lived connections report their byte counts every this many bytes.
const FLUSH_EVERY: u32 = 1 << 20;

thread_local! {
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH_SIZE].into_boxed_slice());
}

/// Reads what `src` holds, if tokio knows it is readable (`None` if it does not: no read was
/// made). A read that did not fill `buf` emptied the socket, so tokio's readiness is cleared
/// right away instead of by one more read that would fail with `WouldBlock`: one syscall less
/// per message. This is race-free for the same reason tokio's own clearing is: `try_io` takes
/// the readiness tick before the read and clears only if no event arrived since, and EOF and
/// errors (`READ_CLOSED`) are never cleared.
fn read_drained(src: &TcpStream, buf: &mut [u8]) -> Option<io::Result<usize>> {
    let mut called = false;
    let mut short = None;
    let result = src.try_io(tokio::io::Interest::READABLE, || {
        called = true;
        let n = (&*SockRef::from(src)).read(buf)?;
        if n > 0 && n < buf.len() {
            short = Some(n);
            return Err(io::ErrorKind::WouldBlock.into());
        }
        Ok(n)
    });
    if !called {
        return None;
    }
    Some(match (result, short) {
        (Err(err), Some(n)) if err.kind() == io::ErrorKind::WouldBlock => Ok(n),
        (result, _) => result,
    })
}

/// Bytes read that the destination could not take yet.
#[derive(Debug)]
struct Pending {
    bytes: Vec<u8>,
    written: usize,
}

/// One direction: `src` to `dst`. Every open connection carries two, so what only some
/// connections need, for some of the time, is boxed (issue 48: memory per open connection).
#[derive(Debug, Default)]
struct Half {
    /// What `dst` could not take (boxed, and freed once written: most writes go through
    /// whole, and an idle connection then holds no buffer).
    pending: Option<Box<Pending>>,
    read_eof: bool,
    done: bool,
    /// Stopped after moving [`BYTES_PER_POLL`]: wants to run again after the others.
    yielded: bool,
    /// Bytes moved and not yet counted in the metrics (fewer than [`FLUSH_EVERY`] plus one
    /// turn's share).
    unflushed: u32,
    /// A read of [`BULK_READ`] or more: splice from now on, if a pipe can be had.
    bulk: bool,
    /// The pipe of a direction that splices (boxed: most connections never splice, and
    /// every open connection carries this field).
    pipe: Option<Box<Pipe>>,
    /// Splicing failed for a reason other than the sockets' (a kernel or sandbox without
    /// `splice` for sockets): copy for good.
    no_splice: bool,
}

impl Half {
    fn poll(
        &mut self,
        cx: &mut Context<'_>,
        src: &TcpStream,
        dst: &TcpStream,
        other_done: bool,
        moved_any: &mut bool,
        counter: &prometheus_client::metrics::counter::Counter,
    ) -> Poll<io::Result<()>> {
        let mut moved = 0;
        loop {
            if moved >= BYTES_PER_POLL {
                self.yielded = true;
                return Poll::Pending;
            }
            if self.done {
                return Poll::Ready(Ok(()));
            }
            if self.pending.is_some() {
                ready!(self.poll_write_pending(cx, dst))?;
                continue;
            }
            if self.pipe.as_ref().is_some_and(|pipe| pipe.held > 0) {
                ready!(self.poll_drain_pipe(cx, dst))?;
                continue;
            }
            if self.read_eof {
                self.pass_on_eof(dst, other_done)?;
                self.done = true;
                continue;
            }
            ready!(src.poll_read_ready(cx))?;
            if self.bulk && self.pipe.is_none() && !self.no_splice {
                self.bulk = false;
                self.pipe = Pipe::take().map(Box::new);
            }
            let n = if self.pipe.is_some() {
                self.splice_from(src)?
            } else {
                self.copy(src, dst)?
            };
            if n > 0 {
                moved += n;
                *moved_any = true;
                self.count(n, counter);
            }
        }
    }

    /// Writes what `dst` could not take earlier.
    fn poll_write_pending(
        &mut self,
        cx: &mut Context<'_>,
        dst: &TcpStream,
    ) -> Poll<io::Result<()>> {
        let Some(pending) = self.pending.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        ready!(dst.poll_write_ready(cx))?;
        match dst.try_write(&pending.bytes[pending.written..]) {
            Ok(n) => {
                pending.written += n;
                if pending.written == pending.bytes.len() {
                    self.pending = None;
                }
            }
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Poll::Ready(Err(err)),
        }
        Poll::Ready(Ok(()))
    }

    /// Splices what the pipe holds on to `dst`.
    fn poll_drain_pipe(&mut self, cx: &mut Context<'_>, dst: &TcpStream) -> Poll<io::Result<()>> {
        let Some(pipe) = self.pipe.as_mut() else {
            return Poll::Ready(Ok(()));
        };
        ready!(dst.poll_write_ready(cx))?;
        match dst.try_io(tokio::io::Interest::WRITABLE, || pipe.drain_into(dst)) {
            Ok(_) => {}
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            Err(err) => return Poll::Ready(Err(err)),
        }
        Poll::Ready(Ok(()))
    }

    /// Half-close: the peer sent FIN, pass it on and keep the other direction open. If the
    /// other direction is finished too, both sockets are closed right now, and closing a
    /// socket whose input was read to the end sends the FIN: one syscall less per connection.
    fn pass_on_eof(&self, dst: &TcpStream, other_done: bool) -> io::Result<()> {
        if other_done {
            return Ok(());
        }
        match SockRef::from(dst).shutdown(Shutdown::Write) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == io::ErrorKind::NotConnected => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// A bulk read: from `src` into the pipe, with `splice(2)`. The bytes moved (0 at EOF,
    /// when `src` is not readable, or when splice turns out not to work for these sockets:
    /// then this direction copies for good).
    fn splice_from(&mut self, src: &TcpStream) -> io::Result<usize> {
        let Some(pipe) = self.pipe.as_mut() else {
            return Ok(0);
        };
        let read = src.try_io(tokio::io::Interest::READABLE, || pipe.fill_from(src));
        let unsupported = matches!(&read, Err(err) if err.raw_os_error().is_some_and(|code| {
            code == rustix::io::Errno::INVAL.raw_os_error()
                || code == rustix::io::Errno::NOSYS.raw_os_error()
        }));
        if unsupported {
            // No splice for these sockets here: the pipe is empty, copy instead.
            self.pipe = None;
            self.no_splice = true;
            return Ok(0);
        }
        self.note_read(read)
    }

    /// A read into the worker's scratch buffer, written on to `dst` at once (what `dst`
    /// cannot take is kept). The bytes read; a read of [`BULK_READ`] or more marks a bulk
    /// transfer.
    fn copy(&mut self, src: &TcpStream, dst: &TcpStream) -> io::Result<usize> {
        let read = SCRATCH.with_borrow_mut(|buf| {
            let read =
                read_drained(src, buf).unwrap_or_else(|| Err(io::ErrorKind::WouldBlock.into()));
            let n = self.note_read(read)?;
            if n > 0 {
                self.forward(dst, &buf[..n])?;
            }
            Ok::<_, io::Error>(n)
        })?;
        if read > 0 {
            self.bulk = read >= BULK_READ;
        }
        Ok(read)
    }

    /// Counts bytes moved, reporting them every [`FLUSH_EVERY`].
    fn count(&mut self, n: usize, counter: &prometheus_client::metrics::counter::Counter) {
        self.unflushed += n as u32;
        if self.unflushed >= FLUSH_EVERY {
            counter.inc_by(u64::from(std::mem::take(&mut self.unflushed)));
        }
    }

    /// What a read from `src` means for this direction: `Ok(0)` is the peer's FIN (noted),
    /// `WouldBlock` is nothing to read right now (also 0), other counts are bytes read.
    fn note_read(&mut self, read: io::Result<usize>) -> io::Result<usize> {
        match read {
            Ok(0) => {
                self.read_eof = true;
                Ok(0)
            }
            Ok(n) => Ok(n),
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(err) => Err(err),
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
            // Only ever after the previous pending bytes were all written (a direction reads
            // only then), so this starts a new buffer.
            self.pending = Some(Box::new(Pending {
                bytes: data[written..].to_vec(),
                written: 0,
            }));
        }
        Ok(())
    }
}

/// What [`Duplex::poll`] reports when it is ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Progress {
    /// Both directions are finished.
    Done,
    /// A direction moved its share for this turn: call `tokio::task::yield_now` before polling
    /// again (no waker is registered for it).
    Yield,
    /// One direction has just finished and the other has not (reported once): the connection
    /// now waits on one side only. Poll again at once.
    HalfClosed,
}

/// Both directions of one proxied connection.
#[derive(Debug)]
pub(crate) struct Duplex<'a> {
    client: &'a TcpStream,
    upstream: &'a TcpStream,
    metrics: &'a RouteMetrics,
    up: Half,
    down: Half,
    /// Bytes moved since the idleness check last looked (a flag, not a clock read per
    /// read: the check runs on a tick anyway).
    moved_any: bool,
    /// When the idleness check last saw bytes moved (or the connection started).
    active_at: Instant,
    /// [`Progress::HalfClosed`] was reported.
    half_closed: bool,
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
            moved_any: false,
            active_at: Instant::now(),
            half_closed: false,
        }
    }

    /// Writes the header that `encode` puts at the start of a buffer (possibly none), followed
    /// by whatever the client has already sent, to the upstream in one write.
    pub(crate) fn send_first(
        &mut self,
        encode: impl FnOnce(&mut [u8]) -> io::Result<usize>,
    ) -> io::Result<()> {
        SCRATCH.with_borrow_mut(|buf| {
            let header = encode(buf)?;
            // Through tokio if it has seen the client's first bytes (so that a short read clears
            // its readiness), else straight from the socket: they may be there all the same.
            let early = read_drained(self.client, &mut buf[header..])
                .unwrap_or_else(|| (&*SockRef::from(self.client)).read(&mut buf[header..]));
            let early = self.up.note_read(early)?;
            self.up.unflushed += early as u32;
            if header + early == 0 {
                // No header (a route without one) and nothing from the client yet.
                return Ok(());
            }
            self.up.forward(self.upstream, &buf[..header + early])
        })
    }

    /// Moves bytes until both directions have finished (both sides sent FIN and everything
    /// was delivered) or one fails, or until a direction has moved its share for this turn.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<Progress>> {
        let up = self.up.poll(
            cx,
            self.client,
            self.upstream,
            self.down.done,
            &mut self.moved_any,
            &self.metrics.bytes_up,
        )?;
        let down = self.down.poll(
            cx,
            self.upstream,
            self.client,
            self.up.done,
            &mut self.moved_any,
            &self.metrics.bytes_down,
        )?;
        if up.is_ready() && down.is_ready() {
            Poll::Ready(Ok(Progress::Done))
        } else if (up.is_ready() || down.is_ready()) && !self.half_closed {
            self.half_closed = true;
            // The FIN was the last activity: the half-close timeout counts from it.
            self.moved_any = true;
            Poll::Ready(Ok(Progress::HalfClosed))
        } else if std::mem::take(&mut self.up.yielded) | std::mem::take(&mut self.down.yielded) {
            Poll::Ready(Ok(Progress::Yield))
        } else {
            Poll::Pending
        }
    }

    /// Whether one direction has finished and the other not ([`Progress::HalfClosed`] was
    /// reported).
    pub(crate) fn is_half_closed(&self) -> bool {
        self.half_closed
    }

    /// The client's socket.
    pub(crate) fn client(&self) -> &'a TcpStream {
        self.client
    }

    /// The route's metrics.
    pub(crate) fn metrics(&self) -> &'a RouteMetrics {
        self.metrics
    }

    /// When the connection was last seen active, as of `now`: `now` if bytes moved since
    /// the previous call, else what that call answered. Called on each idleness tick, this
    /// is at most one tick later than the last byte really moved.
    pub(crate) fn active_at(&mut self, now: Instant) -> Instant {
        if std::mem::take(&mut self.moved_any) {
            self.active_at = now;
        }
        self.active_at
    }

    /// Adds the byte counts not reported yet to the metrics.
    pub(crate) fn flush_counts(&mut self) {
        self.metrics
            .bytes_up
            .inc_by(u64::from(std::mem::take(&mut self.up.unflushed)));
        self.metrics
            .bytes_down
            .inc_by(u64::from(std::mem::take(&mut self.down.unflushed)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::task::{Wake, Waker};

    const ROOM: u32 = 4 << 20;

    struct CountingWaker(AtomicUsize);

    impl Wake for CountingWaker {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// A connected pair on loopback, both ends with room for a few MiB: the proxy's end and
    /// a blocking peer.
    async fn pair() -> (TcpStream, std::net::TcpStream) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(ROOM).unwrap();
        socket.set_send_buffer_size(ROOM).unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let listener = socket.listen(1).unwrap();
        let peer =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        peer.set_recv_buffer_size(ROOM as usize).unwrap();
        peer.set_send_buffer_size(ROOM as usize).unwrap();
        peer.connect(&listener.local_addr().unwrap().into())
            .unwrap();
        let (ours, _) = listener.accept().await.unwrap();
        (ours, peer.into())
    }

    #[tokio::test(flavor = "current_thread")]
    async fn reads_smaller_than_the_scratch_buffer_switch_a_bulk_transfer_to_splice() {
        let (client, client_peer) = pair().await;
        let (upstream, mut upstream_peer) = pair().await;
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = crate::ProxyMetrics::register(&mut registry).route("test");
        let waker = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let as_waker = Waker::from(waker);
        let mut cx = Context::from_waker(&as_waker);
        let mut duplex = Duplex::new(&client, &upstream, &metrics);
        // One segment at a time, each under the 64 KiB scratch buffer (as a proxy that keeps
        // up with its sender reads them): the first is copied, and marks the direction bulk.
        let segment = vec![7; 60_000];
        let mut total = 0;
        for _ in 0..3 {
            upstream_peer.write_all(&segment).unwrap();
            total += segment.len();
            let deadline = Instant::now() + std::time::Duration::from_secs(10);
            while duplex.down.unflushed < total as u32 && Instant::now() < deadline {
                let _ = duplex.poll(&mut cx);
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        }
        assert!(
            duplex.down.pipe.is_some(),
            "a direction reading 60,000 bytes at a time splices"
        );
        drop(duplex);
        drop(client);
        drop(upstream_peer);
        let mut peer = client_peer;
        let mut got = Vec::new();
        peer.read_to_end(&mut got).unwrap();
        assert_eq!(got.len(), total, "every byte reaches the client");
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_direction_that_moved_its_share_yields_without_waking_itself() {
        let (client, client_peer) = pair().await;
        let (upstream, mut upstream_peer) = pair().await;
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = crate::ProxyMetrics::register(&mut registry).route("test");
        let total = BYTES_PER_POLL + 64 * 1024;
        // Queue more than one turn's share at the upstream before polling.
        upstream_peer.write_all(&vec![7; total]).unwrap();
        let reader = std::thread::spawn(move || {
            let mut peer = client_peer;
            let mut got = Vec::new();
            peer.read_to_end(&mut got).unwrap();
            got
        });

        let waker = Arc::new(CountingWaker(AtomicUsize::new(0)));
        let as_waker = Waker::from(waker.clone());
        let mut cx = Context::from_waker(&as_waker);
        let mut duplex = Duplex::new(&client, &upstream, &metrics);
        // The upstream's bytes may still be on their way through loopback: poll until the
        // first turn is used up.
        let mut first = duplex.poll(&mut cx);
        while first.is_pending() {
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            first = duplex.poll(&mut cx);
        }
        assert!(
            matches!(first, Poll::Ready(Ok(Progress::Yield))),
            "moving {BYTES_PER_POLL} bytes ends the turn: {first:?}"
        );
        let wakes = waker.0.load(Ordering::SeqCst);
        assert_eq!(
            wakes, 0,
            "a yielding connection must not wake itself (it would run again before the I/O driver is polled)"
        );

        // The rest moves on later turns.
        let deadline = Instant::now() + std::time::Duration::from_secs(10);
        while (duplex.down.unflushed < total as u32
            || duplex.down.pending.is_some()
            || duplex.down.pipe.as_ref().is_some_and(|pipe| pipe.held > 0))
            && Instant::now() < deadline
        {
            let _ = duplex.poll(&mut cx);
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        drop(duplex);
        drop(client);
        let got = reader.join().unwrap();
        assert_eq!(got.len(), total, "every byte reaches the client");
    }
}
