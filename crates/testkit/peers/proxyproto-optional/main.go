// An optional-header PROXY protocol receiver, as Traefik runs one: an HTTP server behind
// github.com/pires/go-proxyproto's Listener, whose policy is USE for the trusted sources
// (a header is read when sent, a connection without one is served as is) and IGNORE for the
// others. It answers every request with the client address it saw: `remote_addr=<addr>`.
//
// Mirrors Traefik's buildProxyProtocolListener (traefik/traefik
// pkg/server/server_entrypoint_tcp.go, v2.11 to v3): `&proxyproto.Listener{Listener: listener,
// ReadHeaderTimeout: <entry point readTimeout>}` and a Policy returning proxyproto.USE for an
// upstream in `proxyProtocol.trustedIPs`, proxyproto.IGNORE otherwise (no Policy at all, that
// is USE for everyone, with `proxyProtocol.insecure`).
//
// Built by hairpin_testkit::ProxyprotoOptional against Debian's
// golang-github-pires-go-proxyproto-dev (GO111MODULE=off, GOPATH=/usr/share/gocode).
//
// Usage: proxyproto-optional <listen address> [trusted CIDR...] (no CIDR: insecure).
package main

import (
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: proxyproto-optional <listen address> [trusted CIDR...]")
	}
	var trusted []*net.IPNet
	for _, cidr := range os.Args[2:] {
		_, network, err := net.ParseCIDR(cidr)
		if err != nil {
			log.Fatalf("trusted IPs: %v", err)
		}
		trusted = append(trusted, network)
	}
	listener, err := net.Listen("tcp", os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	// Traefik v3's default entry point readTimeout (60s) is its header timeout.
	proxyListener := &proxyproto.Listener{Listener: listener, ReadHeaderTimeout: 60 * time.Second}
	if len(trusted) > 0 {
		proxyListener.Policy = func(upstream net.Addr) (proxyproto.Policy, error) {
			tcp, ok := upstream.(*net.TCPAddr)
			if !ok {
				return proxyproto.REJECT, fmt.Errorf("type error %v", upstream)
			}
			for _, network := range trusted {
				if network.Contains(tcp.IP) {
					return proxyproto.USE, nil
				}
			}
			return proxyproto.IGNORE, nil
		}
	}
	server := &http.Server{
		ReadTimeout: 60 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprintf(w, "remote_addr=%s", r.RemoteAddr)
		}),
	}
	log.Printf("listening on %s (trusted %v)", listener.Addr(), os.Args[2:])
	log.Fatal(server.Serve(proxyListener))
}
