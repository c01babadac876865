//! Listening sockets that work on every node: `[::]` dual-stack where the node has IPv6, and
//! IPv4 only where it has not.
//!
//! A listener planned as `[::]:port` takes IPv6 clients and, with `IPV6_V6ONLY` off, IPv4
//! clients too (as `::ffff:a.b.c.d`), so one socket serves IPv4-only, dual-stack and IPv6-only
//! clusters. `IPV6_V6ONLY` is set off explicitly, because its default comes from the node's
//! `net.ipv6.bindv6only`. On a node whose kernel has IPv6 switched off (`ipv6.disable=1`: no
//! AF_INET6 sockets at all, EAFNOSUPPORT) or whose network namespace has it disabled
//! (`net.ipv6.conf.all.disable_ipv6 = 1`), `[::]` falls back to `0.0.0.0`: the node is detected,
//! not assumed, and the caller logs which it got.

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;

use socket2::{Domain, Protocol, Socket, Type};

/// Where the kernel says whether IPv6 is disabled in this network namespace.
pub const DISABLE_IPV6: &str = "/proc/sys/net/ipv6/conf/all/disable_ipv6";

/// What a TCP socket was really bound to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    /// The address bound: the one asked for, or `0.0.0.0:port` after a fallback.
    pub addr: SocketAddr,
    /// Why `[::]` fell back to IPv4 only; `None` when it did not (or was not asked for).
    pub ipv4_only: Option<String>,
}

impl Bound {
    /// `"dual-stack"`, `"IPv4 only"` or `"IPv6 only"`, or `"single address"` for a listener on
    /// one address, for logs.
    pub fn families(&self) -> &'static str {
        match self.addr.ip() {
            ip if !ip.is_unspecified() => "single address",
            IpAddr::V6(_) => "dual-stack",
            IpAddr::V4(_) => "IPv4 only",
        }
    }
}

/// Binds a TCP socket (not listening yet) to `addr`, `configure` setting its options before
/// the bind. For the
/// IPv6 wildcard `[::]`, the socket is dual-stack (`IPV6_V6ONLY` off), or `0.0.0.0` of the same
/// port when this network namespace has no IPv6 (see the module documentation). Every other
/// address is bound as it is.
///
/// # Errors
/// The bind's error (an address in use, a permission), or `configure`'s.
pub fn bind_tcp(
    addr: SocketAddr,
    configure: impl Fn(&Socket) -> io::Result<()>,
) -> io::Result<(Socket, Bound)> {
    bind_tcp_with(addr, Path::new(DISABLE_IPV6), configure)
}

/// [`bind_tcp`] with the `disable_ipv6` file given (tests point it elsewhere).
pub fn bind_tcp_with(
    addr: SocketAddr,
    disable_ipv6: &Path,
    configure: impl Fn(&Socket) -> io::Result<()>,
) -> io::Result<(Socket, Bound)> {
    let wildcard_v6 = matches!(addr.ip(), IpAddr::V6(ip) if ip.is_unspecified());
    if !wildcard_v6 {
        let socket = open(addr, &configure)?;
        return Ok((
            socket,
            Bound {
                addr,
                ipv4_only: None,
            },
        ));
    }
    let ipv4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), addr.port());
    if ipv6_disabled(disable_ipv6) {
        let why = format!(
            "IPv6 is disabled in this network namespace ({} = 1)",
            disable_ipv6.display()
        );
        return Ok((
            open(ipv4, &configure)?,
            Bound {
                addr: ipv4,
                ipv4_only: Some(why),
            },
        ));
    }
    let dual = |socket: &Socket| {
        socket.set_only_v6(false)?;
        configure(socket)
    };
    match open(addr, &dual) {
        Ok(socket) => Ok((
            socket,
            Bound {
                addr,
                ipv4_only: None,
            },
        )),
        Err(err) if no_ipv6(&err) => Ok((
            open(ipv4, &configure)?,
            Bound {
                addr: ipv4,
                ipv4_only: Some(format!("this node has no IPv6 ({err})")),
            },
        )),
        Err(err) => Err(err),
    }
}

fn open(addr: SocketAddr, configure: &impl Fn(&Socket) -> io::Result<()>) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    configure(&socket)?;
    socket.bind(&addr.into())?;
    Ok(socket)
}

/// The errors of an IPv6 socket or bind on a node without IPv6: no AF_INET6 in the kernel
/// (EAFNOSUPPORT), or no IPv6 address to bind (EADDRNOTAVAIL).
pub fn no_ipv6(err: &io::Error) -> bool {
    let code = err.raw_os_error();
    code == Some(rustix::io::Errno::AFNOSUPPORT.raw_os_error())
        || code == Some(rustix::io::Errno::ADDRNOTAVAIL.raw_os_error())
}

/// Whether the `disable_ipv6` file says 1. An unreadable file (no procfs, a kernel without
/// IPv6 has no such file either) says nothing: the bind itself then tells.
fn ipv6_disabled(path: &Path) -> bool {
    std::fs::read_to_string(path).is_ok_and(|text| text.trim() == "1")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    fn listener(socket: Socket) -> TcpListener {
        socket.listen(16).unwrap();
        socket.into()
    }

    fn flag(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file
    }

    fn echo_peer(listener: &TcpListener) -> SocketAddr {
        let (mut stream, peer) = listener.accept().unwrap();
        stream.write_all(b"x").unwrap();
        peer
    }

    fn connect(addr: SocketAddr) {
        let mut stream = TcpStream::connect(addr).unwrap();
        let mut buf = [0u8; 1];
        stream.read_exact(&mut buf).unwrap();
    }

    #[test]
    fn the_ipv6_wildcard_is_dual_stack_where_ipv6_is_enabled() {
        let enabled = flag("0\n");
        let (socket, bound) =
            bind_tcp_with("[::]:0".parse().unwrap(), enabled.path(), |_| Ok(())).unwrap();
        assert_eq!(bound.ipv4_only, None);
        assert_eq!(bound.families(), "dual-stack");
        assert!(!socket.only_v6().unwrap(), "IPV6_V6ONLY must be off");
        let listener = listener(socket);
        let port = listener.local_addr().unwrap().port();
        // An IPv4 client arrives v4-mapped, an IPv6 one as itself: both on the one socket.
        let v4 = std::thread::spawn(move || connect(SocketAddr::from(([127, 0, 0, 1], port))));
        assert_eq!(
            echo_peer(&listener).ip().to_canonical(),
            IpAddr::from([127, 0, 0, 1])
        );
        v4.join().unwrap();
        let v6 = std::thread::spawn(move || connect(SocketAddr::new("::1".parse().unwrap(), port)));
        assert_eq!(echo_peer(&listener).ip(), "::1".parse::<IpAddr>().unwrap());
        v6.join().unwrap();
    }

    #[test]
    fn the_ipv6_wildcard_falls_back_to_ipv4_where_ipv6_is_disabled() {
        let disabled = flag("1\n");
        let (socket, bound) = bind_tcp_with("[::]:0".parse().unwrap(), disabled.path(), |socket| {
            socket.set_reuse_address(true)
        })
        .unwrap();
        assert_eq!(bound.addr, "0.0.0.0:0".parse().unwrap());
        assert_eq!(bound.families(), "IPv4 only");
        let why = bound.ipv4_only.clone().unwrap();
        assert!(
            why.contains("disable_ipv6") || why.contains(&disabled.path().display().to_string()),
            "{why}"
        );
        assert!(socket.reuse_address().unwrap(), "configure still runs");
        let listener = listener(socket);
        let local = listener.local_addr().unwrap();
        assert!(local.is_ipv4(), "{local}");
        let port = local.port();
        let client = std::thread::spawn(move || connect(SocketAddr::from(([127, 0, 0, 1], port))));
        assert_eq!(echo_peer(&listener).ip(), IpAddr::from([127, 0, 0, 1]));
        client.join().unwrap();
    }

    #[test]
    fn other_addresses_are_bound_as_they_are() {
        let disabled = flag("1");
        for addr in ["127.0.0.1:0", "0.0.0.0:0", "[::1]:0"] {
            let addr: SocketAddr = addr.parse().unwrap();
            let (socket, bound) = bind_tcp_with(addr, disabled.path(), |_| Ok(())).unwrap();
            assert_eq!(bound.addr, addr);
            assert_eq!(bound.ipv4_only, None);
            assert_eq!(
                socket.local_addr().unwrap().as_socket().unwrap().ip(),
                addr.ip()
            );
        }
    }

    #[test]
    fn an_unreadable_flag_leaves_the_decision_to_the_bind() {
        let (_, bound) = bind_tcp_with(
            "[::]:0".parse().unwrap(),
            Path::new("/nonexistent/disable_ipv6"),
            |_| Ok(()),
        )
        .unwrap();
        assert_eq!(bound.ipv4_only, None);
    }

    #[test]
    fn only_the_no_ipv6_errors_fall_back() {
        let errno = |e: rustix::io::Errno| io::Error::from_raw_os_error(e.raw_os_error());
        assert!(no_ipv6(&errno(rustix::io::Errno::AFNOSUPPORT)));
        assert!(no_ipv6(&errno(rustix::io::Errno::ADDRNOTAVAIL)));
        assert!(!no_ipv6(&errno(rustix::io::Errno::ADDRINUSE)));
        assert!(!no_ipv6(&errno(rustix::io::Errno::ACCESS)));
        assert!(!no_ipv6(&io::Error::other("not an OS error")));
    }

    #[test]
    fn a_busy_port_is_an_error_not_a_fallback() {
        let busy = TcpListener::bind("[::]:0").unwrap();
        let port = busy.local_addr().unwrap().port();
        let enabled = flag("0");
        let err = bind_tcp_with(SocketAddr::from(([0u16; 8], port)), enabled.path(), |_| {
            Ok(())
        })
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse, "{err}");
    }
}
