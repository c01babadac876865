//! A real DNS server on loopback (hickory-server, UDP and TCP on the same port) whose answers
//! the test changes while it runs: CoreDNS seen from a pod, before and after it reloads.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hickory_proto::op::{Metadata, ResponseCode};
use hickory_proto::rr::{RData, Record, RecordType, rdata};
use hickory_server::Server;
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;

/// The names it answers (lowercase, no trailing dot) and their addresses.
type Zone = Arc<Mutex<HashMap<String, Vec<IpAddr>>>>;

#[derive(Clone, Default)]
struct Handler {
    zone: Zone,
    queries: Arc<Mutex<Vec<String>>>,
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let info = request.request_info().expect("one query per request");
        let name = info.query.name().to_string();
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let qtype = info.query.query_type();
        self.queries
            .lock()
            .unwrap()
            .push(format!("{name} {qtype} {:?}", info.protocol));
        let addresses = self.zone.lock().unwrap().get(&name).cloned();
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = true;
        let builder = MessageResponseBuilder::from_message_request(request);
        let Some(addresses) = addresses else {
            metadata.response_code = ResponseCode::NXDomain;
            let response = builder.build(metadata, &[], &[], &[], &[]);
            return response_handle.send_response(response).await.unwrap();
        };
        let owner = info.query.original().name().clone();
        let records: Vec<Record> = addresses
            .into_iter()
            .filter_map(|ip| match (ip, qtype) {
                (IpAddr::V4(v4), RecordType::A) => Some(RData::A(rdata::A(v4))),
                (IpAddr::V6(v6), RecordType::AAAA) => Some(RData::AAAA(rdata::AAAA(v6))),
                _ => None,
            })
            .map(|rdata| Record::from_rdata(owner.clone(), 5, rdata))
            .collect();
        let response = builder.build(metadata, records.iter(), &[], &[], &[]);
        response_handle.send_response(response).await.unwrap()
    }
}

/// Serves `handler` on 127.0.0.1, UDP and TCP on one free port.
pub async fn serve<H: RequestHandler>(handler: H) -> (SocketAddr, Server<H>) {
    let mut server = Server::new(handler);
    // The same port for both, as a DNS server has: bind TCP first, then UDP on its port.
    let (tcp, udp) = loop {
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = tcp.local_addr().unwrap().port();
        if let Ok(udp) = tokio::net::UdpSocket::bind(("127.0.0.1", port)).await {
            break (tcp, udp);
        }
    };
    let addr = tcp.local_addr().unwrap();
    server.register_listener(tcp, Duration::from_secs(5), 64);
    server.register_socket(udp);
    (addr, server)
}

/// A running test DNS server.
pub struct TestDns {
    pub addr: SocketAddr,
    zone: Zone,
    queries: Arc<Mutex<Vec<String>>>,
    server: Server<Handler>,
}

impl TestDns {
    /// Starts on 127.0.0.1, one free port for UDP and TCP.
    pub async fn start() -> Self {
        let handler = Handler::default();
        let (zone, queries) = (handler.zone.clone(), handler.queries.clone());
        let (addr, server) = serve(handler).await;
        Self {
            addr,
            zone,
            queries,
            server,
        }
    }

    /// From now on, `name` answers with `ips`.
    pub fn set(&self, name: &str, ips: &[IpAddr]) {
        self.zone
            .lock()
            .unwrap()
            .insert(name.to_owned(), ips.to_vec());
    }

    /// Queries received so far, `name TYPE protocol`.
    pub fn queries(&self) -> Vec<String> {
        self.queries.lock().unwrap().clone()
    }

    pub async fn stop(mut self) {
        let _ = self.server.shutdown_gracefully().await;
    }
}
