//! Bulk transfers through a pipe with `splice(2)`: the bytes go from one socket to the pipe and
//! from the pipe to the other socket inside the kernel, as page references, instead of being
//! copied into the proxy's buffer and back. A direction switches to it once a read fills the
//! scratch buffer (a bulk transfer); small messages keep the plain read and write, which cost
//! the same two syscalls and no pipe.
//!
//! Pipes are pooled process-wide and their number is capped ([`MAX_PIPES`], two descriptors
//! each): a connection that cannot get one (the cap, or no descriptor left) keeps copying.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use rustix::pipe::{PipeFlags, SpliceFlags, fcntl_setpipe_size, pipe_with, splice};

/// The most pipes open at once, pooled or in use: two descriptors each, counted in the
/// proxy's reserve of descriptors.
pub(crate) const MAX_PIPES: usize = 128;
/// The capacity asked for each pipe (the default is 64 KiB): fewer splices per byte. Linux
/// lets an unprivileged process go up to `fs.pipe-max-size`, 1 MiB by default; if refused,
/// the pipe keeps its default size.
const PIPE_SIZE: usize = 256 * 1024;

static IDLE: Mutex<Vec<OwnedPipe>> = Mutex::new(Vec::new());
static OPEN: AtomicUsize = AtomicUsize::new(0);

#[derive(Debug)]
struct OwnedPipe {
    read: OwnedFd,
    write: OwnedFd,
    capacity: usize,
}

/// A pipe taken from the pool; back to it when dropped empty.
#[derive(Debug)]
pub(crate) struct Pipe {
    pipe: Option<OwnedPipe>,
    /// Bytes in the pipe, not yet spliced out.
    pub(crate) held: usize,
}

impl Pipe {
    /// A pipe from the pool, or a new one; `None` at the cap or when no descriptor is left.
    pub(crate) fn take() -> Option<Self> {
        let pooled = IDLE
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        let pipe = match pooled {
            Some(pipe) => pipe,
            None => {
                if OPEN.fetch_add(1, Ordering::Relaxed) >= MAX_PIPES {
                    OPEN.fetch_sub(1, Ordering::Relaxed);
                    return None;
                }
                match open() {
                    Ok(pipe) => pipe,
                    Err(_) => {
                        OPEN.fetch_sub(1, Ordering::Relaxed);
                        return None;
                    }
                }
            }
        };
        Some(Self {
            pipe: Some(pipe),
            held: 0,
        })
    }

    /// Splices what `src` holds into the (empty) pipe: the bytes moved, 0 at end of stream.
    /// `WouldBlock` means `src` has nothing now: the pipe is empty, so it cannot be full.
    pub(crate) fn fill_from(&mut self, src: impl AsFd) -> io::Result<usize> {
        let pipe = self
            .pipe
            .as_ref()
            .expect("a taken pipe is present until dropped");
        debug_assert_eq!(self.held, 0, "fill only an empty pipe");
        let n = splice(
            src,
            None,
            &pipe.write,
            None,
            pipe.capacity,
            SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
        )?;
        self.held += n;
        Ok(n)
    }

    /// Splices what the pipe holds to `dst`: the bytes moved. `WouldBlock` means `dst` is full:
    /// the pipe holds bytes, so it cannot be empty.
    pub(crate) fn drain_into(&mut self, dst: impl AsFd) -> io::Result<usize> {
        let pipe = self
            .pipe
            .as_ref()
            .expect("a taken pipe is present until dropped");
        let n = splice(
            &pipe.read,
            None,
            dst,
            None,
            self.held,
            SpliceFlags::MOVE | SpliceFlags::NONBLOCK,
        )?;
        self.held -= n;
        Ok(n)
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        let Some(pipe) = self.pipe.take() else {
            return;
        };
        if self.held == 0 {
            let mut idle = IDLE
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            idle.push(pipe);
        } else {
            // Bytes of a connection that ended early: closing the pipe discards them.
            drop(pipe);
            OPEN.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

fn open() -> io::Result<OwnedPipe> {
    let (read, write) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
    let capacity = fcntl_setpipe_size(&write, PIPE_SIZE)
        .or_else(|_| rustix::pipe::fcntl_getpipe_size(&write))?;
    Ok(OwnedPipe {
        read,
        write,
        capacity,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    #[test]
    fn bytes_cross_a_pipe_between_sockets_and_the_pipe_goes_back_to_the_pool() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut from = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (src, _) = listener.accept().unwrap();
        let dst_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let dst = std::net::TcpStream::connect(dst_listener.local_addr().unwrap()).unwrap();
        let (mut to, _) = dst_listener.accept().unwrap();
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        from.write_all(&data).unwrap();
        drop(from);

        let mut pipe = Pipe::take().expect("a pipe");
        let mut moved = 0;
        loop {
            let n = pipe.fill_from(&src).unwrap();
            if n == 0 {
                break;
            }
            while pipe.held > 0 {
                moved += pipe.drain_into(&dst).unwrap();
            }
        }
        assert_eq!(moved, data.len());
        drop(dst);
        let mut got = Vec::new();
        to.read_to_end(&mut got).unwrap();
        assert_eq!(got, data);

        drop(pipe);
        let pooled = IDLE.lock().unwrap().len();
        assert!(pooled >= 1, "an empty pipe goes back to the pool");
    }
}
