//! `rediss://`: a private `redis-server` with TLS on a port of its own (and a plain port for
//! inspection), a self-signed certificate made by the test.

use std::time::Duration;

use checkpoint_conformance::fixtures::{step, val};
use checkpoint_core::{CheckpointConfig, CheckpointMetadata, PutOptions, Saver};
use checkpoint_redis::{RedisSaverBuilder, redis};

use crate::common::{free_ports, redis_binaries, scratch_dir, spawn_server, watchdog};

/// A TLS server: its plain URL, its TLS port, and the process (killed when dropped by the
/// watchdog at the latest). `None` (skipped) without `redis-server`.
fn tls_server() -> Option<(std::process::Child, String, u16)> {
    if let Err(reason) = redis_binaries() {
        assert!(!checkpoint_conformance::servers_required(), "{reason}");
        eprintln!("SKIPPED: {reason}");
        return None;
    }
    let dir = scratch_dir("tls");
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])
            .unwrap();
    let (cert_file, key_file) = (dir.join("server.crt"), dir.join("server.key"));
    std::fs::write(&cert_file, cert.pem()).unwrap();
    std::fs::write(&key_file, signing_key.serialize_pem()).unwrap();
    let port = free_ports(7301, 2).unwrap();
    let tls_port = (port + 1).to_string();
    let server = spawn_server(
        port,
        &dir,
        &[
            "--tls-port",
            &tls_port,
            "--tls-cert-file",
            cert_file.to_str().unwrap(),
            "--tls-key-file",
            key_file.to_str().unwrap(),
            "--tls-ca-cert-file",
            cert_file.to_str().unwrap(),
            "--tls-auth-clients",
            "no",
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    watchdog(&[server.id()], &dir, Duration::from_secs(600));
    Some((server, format!("redis://127.0.0.1:{port}"), port + 1))
}

#[tokio::test]
async fn rediss_urls_connect_over_tls_and_verify_the_server() {
    let Some((mut server, plain, tls_port)) = tls_server() else {
        return;
    };
    // Verification off (`#insecure`): the saver works over TLS.
    let saver = RedisSaverBuilder::new(format!("rediss://127.0.0.1:{tls_port}/#insecure"))
        .key_prefix("tls")
        .build()
        .await
        .unwrap();
    let thread = CheckpointConfig::new("over-tls");
    let (cp, versions) = step(None, &[("messages", Some(val(serde_json::json!(["hi"]))))]);
    let stored = saver
        .put(
            &thread,
            cp,
            CheckpointMetadata::new(),
            versions,
            PutOptions::compare_and_set(),
        )
        .await
        .unwrap();
    let loaded = saver.get_tuple(&thread).await.unwrap().unwrap();
    assert_eq!(loaded.config, stored);
    // It is this server that holds the thread (read through its plain port).
    let client = redis::Client::open(plain.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("tls:*over-tls*")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!keys.is_empty());

    // Verified (the default), a certificate nobody the system trusts signed is refused.
    let refused = RedisSaverBuilder::new(format!("rediss://127.0.0.1:{tls_port}"))
        .key_prefix("tls")
        .build()
        .await
        .unwrap_err();
    assert!(refused.chain().contains("certificate"), "{refused:?}");
    // A plain client on the TLS port gets an error, not a hang or a panic.
    let plaintext = RedisSaverBuilder::new(format!("redis://127.0.0.1:{tls_port}"))
        .key_prefix("tls")
        .connect_timeout(Duration::from_secs(2))
        .response_timeout(Duration::from_secs(2))
        .build()
        .await;
    assert!(plaintext.is_err());
    let _ = server.kill();
}
