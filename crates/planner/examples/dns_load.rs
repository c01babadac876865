//! A DNS load generator for `bench/dns_tax.py` (the DNS tax in `bench/run.sh`): UDP queries
//! to one server on loopback, `WINDOW` of them in flight, for `SECONDS`, then one line of
//! counts on stdout. Std only, so the benchmark needs nothing but the project's build (no
//! dnsperf).
//!
//! ```text
//! cargo run --release -p hairpin-planner --example dns_load -- PORT QUERIES SECONDS [WINDOW]
//! ```
//!
//! QUERIES holds one query a line, `NAME TYPE` (TYPE: A, AAAA, PTR, TXT, MX, ANY; A when
//! absent), sent in turn. Prints `completed N lost N seconds S rcodes 0:N,3:N`. A query whose
//! answer has not come within 100 ms counts as lost and is replaced.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

fn qtype(name: &str) -> Option<u16> {
    Some(match name.to_ascii_uppercase().as_str() {
        "A" => 1,
        "NS" => 2,
        "PTR" => 12,
        "MX" => 15,
        "TXT" => 16,
        "AAAA" => 28,
        "ANY" => 255,
        _ => return None,
    })
}

/// The wire form of a query for `name` (RD set), with ID 0 (set per send).
fn encode(name: &str, ty: u16) -> Result<Vec<u8>, String> {
    let mut out = vec![0, 0, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!("bad name {name:?}"));
        }
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out.extend_from_slice(&ty.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    Ok(out)
}

fn parse_queries(text: &str) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or_default();
        let ty = match words.next() {
            None => 1,
            Some(t) => qtype(t).ok_or_else(|| format!("unknown type {t:?}"))?,
        };
        out.push(encode(name, ty)?);
    }
    if out.is_empty() {
        return Err("no queries".into());
    }
    Ok(out)
}

struct Counts {
    completed: u64,
    lost: u64,
    rcodes: BTreeMap<u8, u64>,
}

fn run(port: u16, queries: &[Vec<u8>], seconds: f64, window: usize) -> std::io::Result<Counts> {
    let socket = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
    socket.connect(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))?;
    socket.set_read_timeout(Some(Duration::from_millis(100)))?;
    // In flight: by ID, the time sent.
    let mut sent_at: Vec<Option<Instant>> = vec![None; 65536];
    let mut in_flight = 0usize;
    let (mut next_id, mut next_query) = (0u16, 0usize);
    let mut counts = Counts {
        completed: 0,
        lost: 0,
        rcodes: BTreeMap::new(),
    };
    let mut send = |sent_at: &mut Vec<Option<Instant>>, in_flight: &mut usize| {
        let mut q = queries[next_query % queries.len()].clone();
        next_query += 1;
        // Skip IDs still in flight (after losses the window wraps around them).
        while sent_at[usize::from(next_id)].is_some() {
            next_id = next_id.wrapping_add(1);
        }
        q[..2].copy_from_slice(&next_id.to_be_bytes());
        sent_at[usize::from(next_id)] = Some(Instant::now());
        next_id = next_id.wrapping_add(1);
        *in_flight += 1;
        socket.send(&q)
    };
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(seconds);
    let mut buf = [0u8; 4096];
    while Instant::now() < end {
        while in_flight < window {
            send(&mut sent_at, &mut in_flight)?;
        }
        match socket.recv(&mut buf) {
            Ok(n) if n >= 4 => {
                let id = u16::from_be_bytes([buf[0], buf[1]]);
                if sent_at[usize::from(id)].take().is_some() {
                    in_flight -= 1;
                    counts.completed += 1;
                    *counts.rcodes.entry(buf[3] & 0x0f).or_default() += 1;
                }
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                // Nothing for 100 ms: whatever is in flight is lost.
                let now = Instant::now();
                for slot in sent_at.iter_mut() {
                    if slot.is_some_and(|t| now - t >= Duration::from_millis(100)) {
                        *slot = None;
                        in_flight -= 1;
                        counts.lost += 1;
                    }
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(counts)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: dns_load PORT QUERIES SECONDS [WINDOW]";
    let (port, path, seconds, window) = match args.as_slice() {
        [p, q, s] => (p, q, s, "20"),
        [p, q, s, w] => (p, q, s, w.as_str()),
        _ => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let parsed = (
        port.parse::<u16>(),
        seconds.parse::<f64>(),
        window.parse::<usize>(),
    );
    let (Ok(port), Ok(seconds), Ok(window)) = parsed else {
        eprintln!("{usage}");
        std::process::exit(2);
    };
    let queries = match std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| parse_queries(&t))
    {
        Ok(q) => q,
        Err(e) => {
            eprintln!("dns_load: {path}: {e}");
            std::process::exit(2);
        }
    };
    let started = Instant::now();
    match run(port, &queries, seconds, window.clamp(1, 60_000)) {
        Ok(c) => {
            let rcodes: Vec<String> = c.rcodes.iter().map(|(k, v)| format!("{k}:{v}")).collect();
            println!(
                "completed {} lost {} seconds {:.3} rcodes {}",
                c.completed,
                c.lost,
                started.elapsed().as_secs_f64(),
                rcodes.join(",")
            );
        }
        Err(e) => {
            eprintln!("dns_load: {e}");
            std::process::exit(1);
        }
    }
}
