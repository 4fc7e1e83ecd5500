//! The collections' indexes: creating them (`MongoSaver::setup`) and dropping the
//! collections.

use std::time::Duration;

use checkpoint_core::Result;
use mongodb::IndexModel;
use mongodb::bson::{Document, doc};
use mongodb::options::IndexOptions;

use crate::core::Inner;
use crate::error::driver;

/// Creates the indexes of every collection (see `MongoSaver::setup`).
pub(crate) async fn setup(i: &Inner) -> Result<()> {
    let unique = |name: &str, keys: Document| {
        IndexModel::builder()
            .keys(keys)
            .options(
                IndexOptions::builder()
                    .name(name.to_owned())
                    .unique(true)
                    .build(),
            )
            .build()
    };
    let plain = |name: &str, keys: Document| {
        IndexModel::builder()
            .keys(keys)
            .options(IndexOptions::builder().name(name.to_owned()).build())
            .build()
    };
    let ttl = |models: &mut Vec<IndexModel>| {
        if i.config.ttl.is_some() {
            models.push(
                IndexModel::builder()
                    .keys(doc! { "x": 1 })
                    .options(
                        IndexOptions::builder()
                            .name("ttl".to_owned())
                            .expire_after(Duration::ZERO)
                            .build(),
                    )
                    .build(),
            );
        }
    };
    let mut checkpoints = vec![
        unique("thread_ns_id", doc! { "t": 1, "n": 1, "c": -1 }),
        plain("thread_order", doc! { "t": 1, "s": -1 }),
        plain("global_order", doc! { "s": -1 }),
        plain("metadata_filter", doc! { "mk": 1 }),
    ];
    ttl(&mut checkpoints);
    let mut values = vec![unique(
        "thread_ns_channel_version",
        doc! { "t": 1, "n": 1, "ch": 1, "v": 1 },
    )];
    ttl(&mut values);
    let mut writes = vec![
        unique("thread_ns_id_task", doc! { "t": 1, "n": 1, "c": 1, "k": 1 }),
        plain("address", doc! { "a": 1 }),
    ];
    ttl(&mut writes);
    let mut chunks = vec![unique("thread_blob_seq", doc! { "t": 1, "b": 1, "i": 1 })];
    ttl(&mut chunks);
    let mut heads = vec![unique("thread_ns", doc! { "t": 1, "n": 1 })];
    ttl(&mut heads);
    for (coll, models) in [
        (&i.checkpoints, checkpoints),
        (&i.values, values),
        (&i.writes, writes),
        (&i.chunks, chunks),
        (&i.heads, heads),
    ] {
        coll.create_indexes(models).await.map_err(driver)?;
    }
    // Leases and the ledger are keyed by `_id` alone; create them so they exist before
    // the first transaction touches them (MongoDB before 4.4 cannot create collections
    // inside a transaction).
    for name in [&i.names.leases, &i.names.ledger] {
        let existing = i
            .database
            .list_collection_names()
            .filter(doc! { "name": name.as_str() })
            .await
            .map_err(driver)?;
        if existing.is_empty() {
            match i.database.create_collection(name.as_str()).await {
                Ok(()) => {}
                // Created concurrently by another process: fine.
                Err(e) if crate::error::codes(&e).contains(&48) => {}
                Err(e) => return Err(driver(e)),
            }
        }
    }
    Ok(())
}

/// Drops every collection of this configuration.
pub(crate) async fn drop_collections(inner: &Inner) -> Result<()> {
    for name in inner.names.all() {
        inner
            .database
            .collection::<Document>(name)
            .drop()
            .await
            .map_err(driver)?;
    }
    Ok(())
}
