//! `hairpin echo` behind a real HAProxy sending PROXY v1 and v2 (with TLVs).

mod support;

use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::Duration;

use hairpin_testkit::{Haproxy, exchange, free_addr, http_get, wait_for_port};

struct Echo {
    child: Child,
    log: tempfile::NamedTempFile,
}

impl Echo {
    fn start(addr: SocketAddr, mode: &str) -> Self {
        Self::start_with(addr, mode, &[])
    }

    fn start_with(addr: SocketAddr, mode: &str, args: &[&str]) -> Self {
        let log = tempfile::NamedTempFile::new().unwrap();
        let child = support::hairpin_command()
            .args([
                "echo",
                "--listen",
                &addr.to_string(),
                "--proxy-protocol",
                mode,
            ])
            .args(args)
            .stdout(Stdio::null())
            .stderr(log.reopen().unwrap())
            .spawn()
            .unwrap();
        wait_for_port(addr, Duration::from_secs(10)).unwrap();
        Echo { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log.path()).unwrap_or_default()
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn echo_decodes_what_haproxy_sends() {
    let echo_addr = free_addr();
    let echo = Echo::start(echo_addr, "required");
    let v1 = free_addr();
    let v2 = free_addr();
    let _haproxy = Haproxy::start(
        &format!(
            "listen lb_v1\n  mode tcp\n  bind {v1}\n  server echo {echo_addr} send-proxy\n\n\
             listen lb_v2\n  mode tcp\n  bind {v2}\n  unique-id-format conn-%{{+X}}o%ci:%cp\n  \
             server echo {echo_addr} send-proxy-v2 proxy-v2-options unique-id,crc32c\n"
        ),
        &[v1, v2],
    )
    .expect("start haproxy");

    let (status, body) = http_get(v1, "shop.example.com", "/").unwrap();
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("header:        v1 PROXY TCP4"), "{body}");
    assert!(body.contains("source:        127.0.0.1:"), "{body}");
    assert!(body.contains(&format!("destination:   {v1}")), "{body}");
    assert!(body.contains("Host: shop.example.com"), "{body}");

    let (status, body) = http_get(v2, "shop.example.com", "/?format=json").unwrap();
    assert!(status.contains("200"), "{status}");
    let json: serde_json::Value =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(json["proxy"]["version"], "v2");
    assert_eq!(json["proxy"]["command"], "PROXY");
    assert_eq!(json["proxy"]["destination"], v2.to_string());
    let tlvs = json["proxy"]["tlvs"].as_array().unwrap();
    let find = |name: &str| {
        tlvs.iter()
            .find(|tlv| tlv["name"] == name)
            .and_then(|tlv| tlv["value"].as_str())
            .unwrap_or_else(|| panic!("no {name} TLV in {tlvs:?}"))
            .to_owned()
    };
    let unique = find("unique-id");
    // `%{+X}o` prints the client address in hex: 127.0.0.1 is 7F000001.
    assert!(unique.starts_with("conn-7F000001:"), "{unique}");
    assert!(find("crc32c").contains("verified"));

    // Straight to the echo server, without a header: closed, and the reason logged.
    let plain = exchange(
        echo_addr,
        b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        Duration::from_secs(5),
    )
    .unwrap();
    assert!(plain.is_empty(), "{}", String::from_utf8_lossy(&plain));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !echo.log().contains("without a valid PROXY header")
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        echo.log().contains("without a valid PROXY header"),
        "{}",
        echo.log()
    );
}

#[test]
fn optional_mode_reports_a_missing_header_plainly() {
    let echo_addr = free_addr();
    let _echo = Echo::start(echo_addr, "optional");
    let (status, body) = http_get(echo_addr, "shop.example.com", "/").unwrap();
    assert!(status.contains("200"), "{status}");
    assert!(
        body.contains("no PROXY header") && body.contains("for diagnosis only"),
        "{body}"
    );
}

#[test]
fn a_busy_address_is_a_clear_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let out = support::hairpin_command()
        .args(["echo", "--listen", &addr.to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on {addr}")),
        "{stderr}"
    );
}

#[test]
fn silent_and_headerless_connections_are_closed_and_logged_a_few_lines_at_a_time() {
    let echo_addr = free_addr();
    let echo = Echo::start_with(echo_addr, "required", &["--header-timeout", "300ms"]);
    let started = std::time::Instant::now();
    let mut silent = std::net::TcpStream::connect(echo_addr).unwrap();
    // Closed by the server at all is the check (without the header deadline it stays open and
    // the read times out); how soon after the 300 ms deadline is a figure.
    silent
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut answer = Vec::new();
    std::io::Read::read_to_end(&mut silent, &mut answer).expect("closed by the server");
    assert!(answer.is_empty());
    let closed = started.elapsed();
    assert!(
        closed >= Duration::from_millis(250),
        "closed before the header deadline: {closed:?}"
    );
    println!("figure: a silent connection closed after {closed:?} (header deadline 300 ms)");
    const FLOOD: usize = 40;
    for _ in 0..FLOOD {
        let plain = exchange(echo_addr, b"GET / HTTP/1.1\r\n\r\n", Duration::from_secs(5)).unwrap();
        assert!(plain.is_empty());
    }
    // The limiter lets 5 lines through per 10 s, then counts; a window may roll over once
    // during the test.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let logged = || echo.log().matches("without a valid PROXY header").count();
    while logged() < 5 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let lines = logged();
    assert!(
        (5..=10).contains(&lines),
        "{lines} lines for {} refused connections:\n{}",
        FLOOD + 1,
        echo.log()
    );
    assert!(
        echo.log()
            .contains("nothing received before the header deadline"),
        "{}",
        echo.log()
    );
}
