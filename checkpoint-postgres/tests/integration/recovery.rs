//! Connection loss: after the server drops every connection of the pool (as on a server
//! restart), the saver recovers by itself; a failure seen meanwhile is classified transient.

use crate::common;

use std::time::Duration;

use checkpoint_core::{CheckpointConfig, CheckpointMetadata, Error, PutOptions, Saver};
use checkpoint_postgres::PostgresSaver;
use checkpoint_postgres::sqlx::{self, PgPool};

#[tokio::test]
async fn saver_recovers_after_its_connections_are_killed() {
    let Some(url) = common::url() else {
        assert!(
            !checkpoint_conformance::servers_required(),
            "CHECKPOINT_TEST_POSTGRES_URL is required"
        );
        return;
    };
    let schema = common::unique_schema();
    let app = format!("recovery-{schema}");
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let saver = checkpoint_postgres::PostgresSaverBuilder::new(options.application_name(&app))
        .schema(&schema)
        .max_connections(4)
        .connect()
        .await
        .unwrap();
    saver.setup().await.unwrap();
    let mut c = checkpoint_core::Checkpoint::new();
    c.set("a", &1).unwrap();
    let v = c.channel_versions.clone();
    let cfg = saver
        .put(
            &CheckpointConfig::new("t"),
            c,
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();

    let admin = PgPool::connect(&url).await.unwrap();
    for _ in 0..3 {
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
        )
        .bind(&app)
        .fetch_all(&admin)
        .await
        .unwrap();
        assert!(
            !killed.is_empty(),
            "the saver had no open connection to kill"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut recovered = false;
        for _ in 0..20 {
            match saver.get_tuple(&cfg).await {
                Ok(Some(_)) => {
                    recovered = true;
                    break;
                }
                Ok(None) => panic!("data lost"),
                Err(e) => {
                    assert!(
                        e.is_transient(),
                        "a dropped connection must be transient: {e:?}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        assert!(recovered, "the saver did not recover");
    }
    // A saver pointed at a port where nothing listens fails transiently, not with a panic.
    let dead = PostgresSaver::builder("postgres://postgres@127.0.0.1:1/test")
        .unwrap()
        .pool_options(sqlx::postgres::PgPoolOptions::new().acquire_timeout(Duration::from_secs(1)))
        .connect_lazy()
        .unwrap();
    let err = dead
        .get_tuple(&CheckpointConfig::new("t"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert!(err.is_transient());
    // Debug output never shows a password.
    let with_password = PostgresSaver::builder("postgres://user:s3cr3t-pw@127.0.0.1:1/test")
        .unwrap()
        .connect_lazy()
        .unwrap();
    assert!(!format!("{with_password:?}").contains("s3cr3t"));
    common::drop_schemas(&url, &[schema]).await;
}

#[tokio::test]
async fn setup_is_idempotent_and_safe_concurrently() {
    let Some(url) = common::url() else {
        assert!(
            !checkpoint_conformance::servers_required(),
            "CHECKPOINT_TEST_POSTGRES_URL is required"
        );
        return;
    };
    let schema = common::unique_schema();
    // Independent pools, as separate processes would have.
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let (url, schema) = (url.clone(), schema.clone());
        tasks.push(tokio::spawn(async move {
            let saver = PostgresSaver::builder(&url)
                .unwrap()
                .schema(&schema)
                .max_connections(1)
                .connect()
                .await
                .unwrap();
            saver.setup().await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let saver = PostgresSaver::builder(&url)
        .unwrap()
        .schema(&schema)
        .connect()
        .await
        .unwrap();
    saver.setup().await.unwrap();
    saver.setup().await.unwrap();
    let langgraph: Vec<i32> = sqlx::query_scalar("SELECT v FROM checkpoint_migrations ORDER BY v")
        .fetch_all(saver.pool())
        .await
        .unwrap();
    assert_eq!(
        langgraph,
        (0..10).collect::<Vec<i32>>(),
        "LangGraph's migration numbering is kept exactly"
    );
    let own: i64 = sqlx::query_scalar("SELECT count(*) FROM checkpoint_rs_migrations")
        .fetch_one(saver.pool())
        .await
        .unwrap();
    assert!(own >= 9);
    // Value columns compress with lz4 where the server was built with it (PostgreSQL 14+;
    // before, there is no such setting to check).
    let lz4: Option<bool> = sqlx::query_scalar(
        "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'",
    )
    .fetch_optional(saver.pool())
    .await
    .unwrap()
    .flatten();
    let compression: Vec<String> = sqlx::query_scalar(
        "SELECT coalesce(to_jsonb(a) ->> 'attcompression', '') FROM pg_attribute a
         WHERE (attrelid, attname) IN (('checkpoint_blobs'::regclass, 'blob'),
             ('checkpoint_writes'::regclass, 'blob'), ('checkpoints'::regclass, 'checkpoint'))",
    )
    .fetch_all(saver.pool())
    .await
    .unwrap();
    let expected = if lz4 == Some(true) { "l" } else { "" };
    assert_eq!(compression, vec![expected; 3]);
    common::drop_schemas(&url, &[schema]).await;
}

#[tokio::test]
async fn a_schema_set_up_by_a_newer_version_is_refused() {
    let Some(url) = common::url_or_skip() else {
        return;
    };
    let (saver, schema) = common::fresh_saver(&url).await.unwrap();
    let own = |sql: &'static str| sqlx::query_scalar::<_, Option<i32>>(sql);
    let known = own("SELECT max(v) FROM checkpoint_rs_migrations")
        .fetch_one(saver.pool())
        .await
        .unwrap()
        .unwrap();
    // A newer LangGraph adding a migration to the tables both share is no reason to refuse.
    sqlx::query("INSERT INTO checkpoint_migrations (v) VALUES (999)")
        .execute(saver.pool())
        .await
        .unwrap();
    common::saver_in_schema(&url, &schema).await.unwrap();

    // A newer checkpoint-postgres (a rolling deploy, a rollback) set the schema up.
    sqlx::query("INSERT INTO checkpoint_rs_migrations (v) VALUES ($1)")
        .bind(known + 1)
        .execute(saver.pool())
        .await
        .unwrap();
    let builder = || PostgresSaver::builder(&url).unwrap().schema(&schema);
    let refused = |e: checkpoint_core::Error| {
        let message = e.chain();
        assert!(matches!(e, checkpoint_core::Error::Backend { .. }), "{e:?}");
        assert!(!e.is_transient());
        assert!(
            message.contains(&format!("migration {}", known + 1)),
            "{message}"
        );
        assert!(message.contains("upgrade"), "{message}");
    };
    refused(builder().connect().await.unwrap_err());
    // A lazily connected saver is refused at setup, which changes nothing.
    let lazy = builder().connect_lazy().unwrap();
    refused(lazy.setup().await.unwrap_err());
    let versions = own("SELECT max(v) FROM checkpoint_rs_migrations")
        .fetch_one(saver.pool())
        .await
        .unwrap();
    assert_eq!(versions, Some(known + 1));
    common::drop_schemas(&url, &[schema]).await;
}

#[tokio::test]
async fn the_integrity_scan_finds_a_lost_value_and_orphan_writes() {
    let Some(url) = common::url() else {
        assert!(
            !checkpoint_conformance::servers_required(),
            "CHECKPOINT_TEST_POSTGRES_URL is required"
        );
        return;
    };
    let (saver, schema) = common::fresh_saver(&url).await.unwrap();
    let pool = saver.pool().clone();
    checkpoint_conformance::integrity::integrity_scan_scenario(
        &saver,
        "scanned",
        |thread, version| async move {
            // LangGraph's layout keeps the version as text.
            let gone = sqlx::query(
                "DELETE FROM checkpoint_blobs WHERE thread_id = $1 AND channel = $2 AND version = $3",
            )
            .bind(&thread)
            .bind(checkpoint_conformance::integrity::LOST_CHANNEL)
            .bind(version.to_string())
            .execute(&pool)
            .await
            .unwrap();
            assert_eq!(gone.rows_affected(), 1);
        },
    )
    .await;
    common::drop_schemas(&url, &[schema]).await;
}

#[tokio::test]
async fn a_server_that_refuses_connections_is_named_as_the_reason() {
    // A port nothing listens on: bound, then released.
    let port = common::free_port().unwrap();
    let options: sqlx::postgres::PgConnectOptions =
        format!("postgres://postgres@127.0.0.1:{port}/postgres")
            .parse()
            .unwrap();
    let started = std::time::Instant::now();
    let e = checkpoint_postgres::PostgresSaverBuilder::new(options)
        .pool_options(
            sqlx::postgres::PgPoolOptions::new().acquire_timeout(Duration::from_millis(300)),
        )
        .connect()
        .await
        .unwrap_err();
    // sqlx reports only its pool's timeout; the saver says why it ran out.
    assert!(e.is_transient(), "{e:?}");
    let text = e.chain();
    assert!(text.contains("pool timed out"), "{text}");
    assert!(text.to_lowercase().contains("refused"), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// The server ends sessions idle for longer than `idle_session_timeout` (PostgreSQL 14+;
/// managed services set it), and a pooled connection finds the FATAL waiting at its next
/// call. Such a call runs again on a live connection, as after a restart; before, it failed
/// with a non-transient error after every idle spell.
#[tokio::test]
async fn sessions_the_server_ended_for_idling_are_replaced_without_failed_calls() {
    let Some(url) = common::url_or_skip() else {
        return;
    };
    let schema = common::unique_schema();
    let options: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let saver = checkpoint_postgres::PostgresSaverBuilder::new(
        options.options([("idle_session_timeout", "300")]),
    )
    .schema(&schema)
    .max_connections(3)
    .connect()
    .await
    .unwrap();
    saver.setup().await.unwrap();
    let mut head = CheckpointConfig::new("idle");
    for round in 0..4 {
        // Longer than the timeout, shorter than the pool's 10 s idle ping.
        tokio::time::sleep(Duration::from_millis(700)).await;
        let mut c = checkpoint_core::Checkpoint::new();
        c.set("round", &round).unwrap();
        let v = c.channel_versions.clone();
        head = saver
            .put(&head, c, CheckpointMetadata::new(), v, PutOptions::new())
            .await
            .unwrap_or_else(|e| panic!("put after idling, round {round}: {}", e.chain()));
        tokio::time::sleep(Duration::from_millis(700)).await;
        let latest = saver
            .get_tuple(&CheckpointConfig::new("idle"))
            .await
            .unwrap_or_else(|e| panic!("get_tuple after idling, round {round}: {}", e.chain()))
            .unwrap();
        assert_eq!(latest.config, head);
    }
    common::drop_schemas(&url, &[schema]).await;
}
