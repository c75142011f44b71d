//! The raft port's mutual TLS with certificates made as README says (`docs/cluster-certs.sh`,
//! openssl): a node serves with them, a peer with its own certificate authenticates, and a
//! certificate is held to the node it names.

use std::process::Command;

use lsm_bloom::replication::tcp::{PeerAuth, RaftServer, TcpNetwork};
use lsm_bloom::replication::{BasicNode, ReplicatedDb};

use crate::cluster::fast_config;

pub async fn openssl_certificates_authenticate_nodes() {
    let t = tempfile::tempdir().unwrap();
    let certs = t.path().join("certs");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/cluster-certs.sh");
    let out = Command::new("bash")
        .arg(script)
        .arg(&certs)
        .args(["1", "2"])
        .output()
        .expect("bash and openssl (.ci/run installs openssl)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let auth = |id: u64, as_id: u64| {
        PeerAuth::tls_from_pem(
            "prod",
            as_id,
            &certs.join(format!("node{id}.crt")),
            &certs.join(format!("node{id}.key")),
            &certs.join("ca.crt"),
        )
    };
    let e = auth(1, 2)
        .err()
        .expect("node 1's certificate taken as node 2's");
    assert!(e.to_string().contains("names node 1, not node 2"), "{e}");

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (a1, a2) = (auth(1, 1).unwrap(), auth(2, 2).unwrap());
    let db = ReplicatedDb::open(
        2,
        t.path().join("n2"),
        fast_config(),
        TcpNetwork::new(a2.clone()),
    )
    .await
    .unwrap();
    let mut server = RaftServer::serve(listener, db.clone(), a2).unwrap();
    db.initialize([(2, BasicNode::new(addr.clone()))].into())
        .await
        .unwrap();
    assert!(
        a1.connect(&addr, 2).await.is_ok(),
        "node 1 could not reach node 2"
    );
    let e = a1.connect(&addr, 3).await.unwrap_err();
    assert!(e.to_string().contains("certificate of node 2"), "{e}");
    server.shutdown().await;
    db.shutdown().await.unwrap();
}
