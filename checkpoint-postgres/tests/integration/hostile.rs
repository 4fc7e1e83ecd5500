//! Hostile input against the real server: SQL-looking identifiers, filter keys and values,
//! backslashes, NUL bytes, 1 MB strings and invalid UTF-8 in blobs are stored exactly or
//! rejected with `InvalidInput`, and nothing else in the database changes.

use crate::common;

use checkpoint_core::{
    CheckpointConfig, CheckpointMetadata, Error, ListOptions, PutOptions, PutWritesOptions, Saver,
    SaverExt, TypedValue, ValueType,
};
use checkpoint_postgres::{MAX_IDENTIFIER_BYTES, PostgresSaver, sqlx};

/// Tables in the schema and their row counts, to show nothing else changed.
async fn fingerprint(saver: &PostgresSaver, schema: &str) -> Vec<(String, i64)> {
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = $1 ORDER BY 1",
    )
    .bind(schema)
    .fetch_all(saver.pool())
    .await
    .unwrap();
    let mut out = Vec::new();
    for t in tables {
        let statement = format!("SELECT count(*) FROM \"{t}\"");
        let n: i64 = sqlx::query_scalar(&statement)
            .fetch_one(saver.pool())
            .await
            .unwrap();
        out.push((t, n));
    }
    out
}

#[tokio::test]
async fn sql_looking_and_oversized_input_is_exact_or_rejected() {
    let Some(url) = common::url() else {
        assert!(
            !checkpoint_conformance::servers_required(),
            "CHECKPOINT_TEST_POSTGRES_URL is required"
        );
        return;
    };
    let (saver, schema) = common::fresh_saver(&url).await.unwrap();
    // A sentinel thread whose data must survive everything below.
    let mut sentinel = checkpoint_core::Checkpoint::new();
    sentinel.set("a", "keep me").unwrap();
    let v = sentinel.channel_versions.clone();
    saver
        .put(
            &CheckpointConfig::new("sentinel"),
            sentinel.clone(),
            CheckpointMetadata::new(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();

    let megabyte = "x".repeat(1 << 20);
    let hostile = [
        "'); DROP TABLE checkpoints;--",
        "\"; DROP SCHEMA public CASCADE; --",
        "$1",
        "$$ || pg_sleep(5) || $$",
        "\\",
        "\\\\'\\0",
        "a\0b",
        "%_*",
        "E'\\x00'",
        megabyte.as_str(),
    ];
    let mut stored = 0;
    for h in hostile {
        let before = fingerprint(&saver, &schema).await;
        let mut c = checkpoint_core::Checkpoint::new();
        c.set(h, h).unwrap();
        c.set_typed(
            "raw",
            TypedValue::new(ValueType::Json, vec![0xff, 0xfe, 0x00, b'{']),
        );
        let v = c.channel_versions.clone();
        let meta = CheckpointMetadata::new().with(h, h).with("v", h);
        let config = CheckpointConfig::new(h).with_ns(h);
        match saver
            .put(&config, c.clone(), meta.clone(), v, PutOptions::new())
            .await
        {
            Ok(got) => {
                stored += 1;
                let t = saver.get_tuple(&got).await.unwrap().unwrap();
                assert_eq!(t.checkpoint, c, "{h:?}");
                assert_eq!(t.metadata, meta);
                let listed = saver
                    .list_all(ListOptions::new().filter(h, h))
                    .await
                    .unwrap();
                assert_eq!(listed.len(), 1, "filter on {h:?}");
                saver
                    .put_writes(
                        &got,
                        vec![(h.to_owned(), TypedValue::from_bytes(vec![0xc1, 0xff]))],
                        h,
                        PutWritesOptions::new().task_path(h),
                    )
                    .await
                    .unwrap();
                let t = saver.get_tuple(&got).await.unwrap().unwrap();
                assert_eq!(t.pending_writes[0].channel, h);
                assert_eq!(&t.pending_writes[0].value.bytes[..], &[0xc1, 0xff]);
            }
            Err(Error::InvalidInput { reason }) => {
                assert!(
                    h.contains('\0') || h.len() > MAX_IDENTIFIER_BYTES,
                    "{h:?} rejected: {reason}"
                );
                assert_eq!(
                    fingerprint(&saver, &schema).await,
                    before,
                    "a rejected put changed the database"
                );
            }
            Err(e) => panic!("{h:?}: {e:?}"),
        }
        // Filters built from hostile text are data: they match nothing here.
        let none = saver
            .list_all(ListOptions::new().filter("v", format!("{h}' OR '1'='1")))
            .await
            .unwrap();
        assert!(none.is_empty());
    }
    assert!(
        stored >= 8,
        "the SQL-looking identifiers must be storable, stored {stored}"
    );
    // Values and metadata may be large: a 1 MB metadata value and filter value are exact.
    let mut c = checkpoint_core::Checkpoint::new();
    c.set("a", &1).unwrap();
    let v = c.channel_versions.clone();
    let meta = CheckpointMetadata::new().with("big", megabyte.clone());
    let got = saver
        .put(
            &CheckpointConfig::new("big-meta"),
            c,
            meta.clone(),
            v,
            PutOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(saver.get_tuple(&got).await.unwrap().unwrap().metadata, meta);
    assert_eq!(
        saver
            .list_all(ListOptions::new().filter("big", megabyte.clone()))
            .await
            .unwrap()
            .len(),
        1
    );
    // NUL inside metadata is rejected (JSONB cannot hold it) without touching anything.
    let before = fingerprint(&saver, &schema).await;
    let mut c = checkpoint_core::Checkpoint::new();
    c.set("a", &1).unwrap();
    let v = c.channel_versions.clone();
    let r = saver
        .put(
            &CheckpointConfig::new("nul-meta"),
            c,
            CheckpointMetadata::new().with("k", "a\0b"),
            v,
            PutOptions::new(),
        )
        .await;
    assert!(matches!(r, Err(Error::InvalidInput { .. })), "{r:?}");
    assert_eq!(fingerprint(&saver, &schema).await, before);
    // The sentinel and the schema's tables are intact.
    let s = saver
        .get_tuple(&CheckpointConfig::new("sentinel"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.checkpoint, sentinel);
    let tables: Vec<String> = fingerprint(&saver, &schema)
        .await
        .into_iter()
        .map(|(t, _)| t)
        .collect();
    assert_eq!(
        tables,
        [
            "checkpoint_blobs",
            "checkpoint_leases",
            "checkpoint_ledger",
            "checkpoint_migrations",
            "checkpoint_rs_migrations",
            "checkpoint_threads",
            "checkpoint_writes",
            "checkpoints"
        ]
    );
    common::drop_schemas(&url, &[schema]).await;
}

/// `import` checks every tuple before it sends anything: one hostile tuple (a NUL in a
/// metadata string, a task id too long to index) among valid ones is `InvalidInput` and
/// the database is unchanged.
#[tokio::test]
async fn import_rejects_the_whole_call_before_writing() {
    let Some(url) = common::url() else {
        assert!(
            !checkpoint_conformance::servers_required(),
            "CHECKPOINT_TEST_POSTGRES_URL is required"
        );
        return;
    };
    let (saver, schema) = common::fresh_saver(&url).await.unwrap();
    let source = checkpoint_core::InMemorySaver::new();
    let chain = checkpoint_conformance::fixtures::put_chain(&source, "t", "", 3, "r")
        .await
        .unwrap();
    checkpoint_conformance::fixtures::put_two_writes(&source, &chain[2].config, "task")
        .await
        .unwrap();
    let mut tuples = source.list_all(ListOptions::thread("t")).await.unwrap();
    tuples.reverse();
    let before = fingerprint(&saver, &schema).await;
    let mut nul = tuples.clone();
    nul[1].metadata = nul[1].metadata.clone().with("bad", "a\0b");
    let mut long_task = tuples.clone();
    long_task[2].pending_writes[0].task_id = "x".repeat(MAX_IDENTIFIER_BYTES + 1);
    for bad in [nul, long_task] {
        let err = saver.import(bad).await.unwrap_err();
        assert!(matches!(err, Error::InvalidInput { .. }), "{err:?}");
        assert_eq!(fingerprint(&saver, &schema).await, before);
    }
    saver.import(tuples.clone()).await.unwrap();
    let mut back = saver.list_all(ListOptions::thread("t")).await.unwrap();
    back.reverse();
    assert_eq!(back, tuples);
    common::drop_schemas(&url, &[schema]).await;
}
