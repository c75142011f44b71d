#!/usr/bin/env bash
# Makes a cluster CA and one certificate per node for the raft port's mutual TLS, with
# openssl: `docs/cluster-certs.sh DIR ID...` writes DIR/ca.crt, DIR/ca.key and, for each node
# id, DIR/node<ID>.crt and DIR/node<ID>.key. Each node certificate names its node as the URI
# subject alternative name lsm-bloom://node/<ID> and is for server and client use. Keep
# ca.key offline; give each node its own .crt and .key, and ca.crt.
set -euo pipefail
dir=$1; shift
mkdir -p "$dir"; cd "$dir"
[ -f ca.key ] || openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -days 3650 -subj /CN=lsm-bloom-cluster-ca -keyout ca.key -out ca.crt 2>/dev/null
for id in "$@"; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=node$id" \
    -keyout "node$id.key" -out "node$id.csr" 2>/dev/null
  printf 'subjectAltName=URI:lsm-bloom://node/%s\nextendedKeyUsage=serverAuth,clientAuth\n' \
    "$id" > "node$id.ext"
  openssl x509 -req -in "node$id.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 825 \
    -extfile "node$id.ext" -out "node$id.crt" 2>/dev/null
  rm "node$id.csr" "node$id.ext"
done
