#!/usr/bin/env bash
# Installs the real peers the test suite drives (nginx, HAProxy, wrk, etcd for the real
# kube-apiserver in ../shared/peers/kubernetes, Go and go-proxyproto's source for the
# optional-header peer in crates/testkit/peers/proxyproto-optional), the tools the network-namespace labs need
# (iproute2, iptables, nftables, curl, openssl for the apiserver's certificates) and what scripts/image.sh needs
# (buildah, the CA bundle it copies into the image), but only when something is missing.
# Debian/Ubuntu only; run as root (or with passwordless sudo).
set -euo pipefail

need=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need+=(nginx-light)
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || need+=(haproxy)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v go >/dev/null 2>&1 || need+=(golang-go)
[ -f /usr/share/gocode/src/github.com/pires/go-proxyproto/protocol.go ] || need+=(golang-github-pires-go-proxyproto-dev)
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || need+=(iproute2)
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || need+=(iptables)
command -v curl >/dev/null 2>&1 || need+=(curl)
command -v etcd >/dev/null 2>&1 || [ -x /usr/bin/etcd ] || need+=(etcd-server)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || need+=(nftables)
command -v buildah >/dev/null 2>&1 || need+=(buildah)
[ -s /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)

if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
echo "install-test-deps: installing ${need[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The packages start system services we do not want: the tests run their own instances.
for svc in nginx haproxy etcd; do
  $sudo systemctl disable --now "$svc" >/dev/null 2>&1 || $sudo service "$svc" stop >/dev/null 2>&1 || true
done
