//! kv_server's TLS port for Redis clients (feature `tls`), with Redis 6's flags: a client
//! with a certificate the CA signed is served (redis-cli `--tls`, when installed, and a
//! rustls client); one without is refused before any command, and the plain port goes on.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use common::certs::{Ca, NodeCert};
use common::kv::{call, connect, free_port, redis_tools, start_with, stop};
use lsm_bloom::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use lsm_bloom::rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};

fn write(dir: &Path, name: &str, cert: &NodeCert) {
    std::fs::write(dir.join(format!("{name}.crt")), &cert.cert_pem).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), &cert.key_pem).unwrap();
}

/// A rustls client of `ca`'s server, presenting `client` when given.
fn tls_client(
    ca: &Ca,
    client: Option<&NodeCert>,
    port: u16,
) -> StreamOwned<ClientConnection, TcpStream> {
    let mut roots = RootCertStore::empty();
    roots.add(ca.der()).unwrap();
    let provider = Arc::new(lsm_bloom::rustls::crypto::ring::default_provider());
    let b = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some(c) => b
            .with_client_auth_cert(
                vec![CertificateDer::from(c.cert.to_vec())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(c.key.clone())),
            )
            .unwrap(),
        None => b.with_no_client_auth(),
    };
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let conn = ClientConnection::new(Arc::new(config), name).unwrap();
    let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    StreamOwned::new(conn, sock)
}

/// Sends one command and reads until a full line comes back (or the connection ends).
fn ask(s: &mut impl ReadWrite, cmd: &[u8]) -> std::io::Result<String> {
    s.write_all(cmd)?;
    s.flush()?;
    let mut got = Vec::new();
    let mut b = [0u8; 256];
    while !got.ends_with(b"\r\n") {
        match s.read(&mut b)? {
            0 => break,
            n => got.extend_from_slice(&b[..n]),
        }
    }
    Ok(String::from_utf8_lossy(&got).into_owned())
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

#[test]
fn tls_clients_with_a_certificate_are_served_and_others_refused() {
    let t = tempfile::tempdir().unwrap();
    let certs = t.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    let ca = Ca::new("kv_server tls test");
    std::fs::write(certs.join("ca.crt"), ca.pem()).unwrap();
    let server_cert = ca.loopback_server();
    let client_cert = ca.node(1);
    write(&certs, "server", &server_cert);
    write(&certs, "client", &client_cert);
    let (port, tls_port) = (free_port(), free_port());
    let p = |n: &str| certs.join(n).to_str().unwrap().to_owned();
    let server = start_with(
        &t.path().join("db"),
        port,
        &[
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &p("server.crt"),
            "--tls-key-file",
            &p("server.key"),
            "--tls-ca-cert-file",
            &p("ca.crt"),
        ],
    );

    // A rustls client with a certificate of the CA: served.
    let mut c = tls_client(&ca, Some(&client_cert), tls_port);
    assert_eq!(
        ask(&mut c, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv1\r\n").unwrap(),
        "+OK\r\n"
    );
    assert_eq!(
        ask(&mut c, b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n").unwrap(),
        "$2\r\nv1\r\n"
    );

    // Without a client certificate: the handshake fails, nothing is served.
    let mut anon = tls_client(&ca, None, tls_port);
    let r = ask(&mut anon, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv2\r\n");
    assert!(
        !r.as_ref().is_ok_and(|s| s.starts_with('+')),
        "a client without a certificate was served: {r:?}"
    );

    // Plaintext on the TLS port is not a command.
    let mut plain = TcpStream::connect(("127.0.0.1", tls_port)).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let r = ask(&mut plain, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv3\r\n");
    assert!(!r.as_ref().is_ok_and(|s| s.starts_with('+')), "{r:?}");

    // redis-cli --tls, as a Redis user would connect.
    if redis_tools() {
        let cli = |extra: &[&str], args: &[&str]| {
            let out = Command::new("redis-cli")
                .args([
                    "--tls",
                    "--cacert",
                    &p("ca.crt"),
                    "-p",
                    &tls_port.to_string(),
                ])
                .args(extra)
                .args(args)
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        };
        let with_cert = ["--cert", &p("client.crt"), "--key", &p("client.key")];
        assert_eq!(cli(&with_cert, &["SET", "cli", "yes"]), "OK");
        assert_eq!(cli(&with_cert, &["GET", "cli"]), "yes");
        assert_ne!(
            cli(&[], &["SET", "k", "v4"]),
            "OK",
            "redis-cli without a certificate"
        );
    }

    // Only the authenticated writes happened; the plain port serves as before.
    let mut s = connect(port);
    assert_eq!(call(&mut s, &[b"GET", b"k"]), b"$2\r\nv1\r\n");
    stop(server);
}
