//! Seed 002: approval resumes are retried and raced; the email goes out once, the proposal is
//! upserted by a deterministic key, and one run per case happens at a time.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use checkpoint_core::writes::INTERRUPT;
use checkpoint_core::{
    CheckpointConfig, CheckpointMetadata, Error, ListOptions, PutOptions, PutWritesOptions, Saver,
    SaverExt, Source, TypedValue,
};
use serde_json::{Value, json};

use super::{ScenarioError, ScenarioResult, check, step, unique_thread, within};
use crate::{EffectKey, Idempotent, IdempotentConfig, OnceError, Origin};

/// The case-management side: proposals (unique on `proposal_key`) and the email queue (no
/// deduplication of its own, so only the ledger keeps the email single).
#[derive(Debug, Default)]
struct CaseSystem {
    proposals: Mutex<BTreeMap<String, Value>>,
    upserts: AtomicUsize,
    emails: Mutex<Vec<String>>,
    active_runs: AtomicUsize,
    max_active_runs: AtomicUsize,
}

impl CaseSystem {
    fn upsert_proposal(&self, key: &str, proposal: Value) {
        self.upserts.fetch_add(1, Ordering::SeqCst);
        self.proposals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key.to_owned(), proposal);
    }

    fn send_email(&self, job_id: &str) {
        self.emails
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(job_id.to_owned());
    }

    fn emails(&self) -> Vec<String> {
        self.emails
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn proposal_count(&self) -> usize {
        self.proposals
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

#[derive(Debug)]
struct SmtpTimeout;

impl std::fmt::Display for SmtpTimeout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SMTP timeout")
    }
}

impl std::error::Error for SmtpTimeout {}

/// One resume of the approval: the gate node re-runs from the top (proposal upsert), then
/// the execute node sends the email once per execution key, then the next checkpoint is
/// committed. Serialized per case.
async fn resume(
    idem: Idempotent<Arc<dyn Saver>>,
    gate: CheckpointConfig,
    system: Arc<CaseSystem>,
    email_fails: bool,
) -> Result<String, ScenarioError> {
    let guard = idem.lock_thread(&gate.thread_id).await?;
    let active = system.active_runs.fetch_add(1, Ordering::SeqCst) + 1;
    system.max_active_runs.fetch_max(active, Ordering::SeqCst);
    let result = run_resume(&idem, &gate, &system, email_fails).await;
    system.active_runs.fetch_sub(1, Ordering::SeqCst);
    guard.release().await;
    result
}

async fn run_resume(
    idem: &Idempotent<Arc<dyn Saver>>,
    gate: &CheckpointConfig,
    system: &Arc<CaseSystem>,
    email_fails: bool,
) -> Result<String, ScenarioError> {
    // gate_or_execute re-runs from the top on resume: its side effect is an upsert.
    let proposal_key = EffectKey::for_task(gate, "gate_or_execute", "proposal")?;
    system.upsert_proposal(
        proposal_key.as_str(),
        json!({"action": "SEND_FOLLOWUP", "status": "APPROVED"}),
    );
    tokio::task::yield_now().await;
    // execute_action: the email, once per execution key (the job id is the key).
    let sender = Arc::clone(system);
    let sent = idem
        .once_for_task(
            gate,
            "execute_action",
            "send_email",
            move |ctx| async move {
                if email_fails {
                    return Err(SmtpTimeout);
                }
                sender.send_email(&ctx.key);
                Ok(ctx.key)
            },
        )
        .await;
    let job_id = match sent {
        Ok(once) => once.value,
        Err(OnceError::Effect(e)) => return Err(ScenarioError::Failed(format!("email: {e}"))),
        Err(OnceError::Saver(e)) => return Err(e.into()),
        Err(other) => return Err(ScenarioError::Failed(other.to_string())),
    };
    // commit_state: the next checkpoint, a child of the gate. Compare-and-set makes a
    // second resume's commit a no-op conflict instead of a fork.
    let Some(head) = idem.get_tuple(gate).await? else {
        return Err(ScenarioError::Failed("the gate checkpoint is gone".into()));
    };
    let (next, versions) = step(
        Some(&head.checkpoint),
        vec![(
            "case",
            TypedValue::msgpack(&json!({"status": "EXECUTED", "job": job_id}))?,
        )],
    );
    let options = if idem.capabilities().compare_and_set {
        PutOptions::compare_and_set()
    } else {
        PutOptions::new()
    };
    match idem
        .put(
            gate,
            next,
            CheckpointMetadata::for_step(Source::Loop, 3),
            versions,
            options,
        )
        .await
    {
        Ok(_) | Err(Error::Conflict { .. }) => Ok(job_id),
        Err(e) => Err(e.into()),
    }
}

/// Seed 002 (see the [module docs](super)).
///
/// A case pauses for human approval. One resume attempt fails to send (the claim is
/// abandoned, nothing is sent); then eight resumes race. Exactly one email is sent and
/// every resume reports its job id, the proposal exists once (upserted by its key on every
/// re-run), runs never overlap, and the gate gets one committed child. With leases, a
/// second process waits for the first, and a holder whose lease was taken over is fenced.
pub async fn seed_002_approval_resume_sends_email_once(saver: Arc<dyn Saver>) -> ScenarioResult {
    let caps = saver.capabilities();
    if !caps.ledger {
        return Err(ScenarioError::Unsupported("the idempotency ledger"));
    }
    let thread = unique_thread("case");
    let (gate_checkpoint, versions) = step(
        None,
        vec![(
            "case",
            TypedValue::msgpack(&json!({"status": "PENDING_APPROVAL"}))?,
        )],
    );
    let gate = saver
        .put(
            &CheckpointConfig::new(&thread),
            gate_checkpoint,
            CheckpointMetadata::for_step(Source::Loop, 2),
            versions,
            PutOptions::new(),
        )
        .await?;
    saver
        .put_writes(
            &gate,
            vec![(
                INTERRUPT.to_owned(),
                TypedValue::msgpack(&json!({"type": "HUMAN_APPROVAL", "action": "SEND_FOLLOWUP"}))?,
            )],
            "gate_or_execute",
            PutWritesOptions::new(),
        )
        .await?;

    let system = Arc::new(CaseSystem::default());
    let idem = Idempotent::new(
        Arc::clone(&saver),
        IdempotentConfig::default()
            .poll_interval(Duration::from_millis(5))
            .lease_ttl(Duration::from_secs(5)),
    );

    // A retried resume: the first attempt fails to send.
    let failed = resume(idem.clone(), gate.clone(), Arc::clone(&system), true).await;
    check!(failed.is_err(), "the failing attempt must fail");
    check!(
        system.emails().is_empty(),
        "a failed send must not count as sent"
    );

    // Raced resumes.
    let racers: Vec<_> = (0..8)
        .map(|_| {
            tokio::spawn(resume(
                idem.clone(),
                gate.clone(),
                Arc::clone(&system),
                false,
            ))
        })
        .collect();
    let mut job_ids = Vec::new();
    for racer in racers {
        let job = within(60, "a resume", racer)
            .await?
            .map_err(|e| ScenarioError::Failed(format!("a resume panicked: {e}")))??;
        job_ids.push(job);
    }
    let emails = system.emails();
    check!(
        emails.len() == 1,
        "{} emails were sent: {emails:?}",
        emails.len()
    );
    check!(
        job_ids.iter().all(|j| Some(j) == emails.first()),
        "every resume must report the one job id: {job_ids:?}"
    );
    check!(
        system.proposal_count() == 1 && system.upserts.load(Ordering::SeqCst) == 9,
        "the proposal must be upserted by every run ({}) into one row ({})",
        system.upserts.load(Ordering::SeqCst),
        system.proposal_count()
    );
    let overlap = system.max_active_runs.load(Ordering::SeqCst);
    check!(overlap == 1, "{overlap} runs of the case overlapped");
    check!(idem.locked_threads() == 0, "the lock map kept an entry");
    let replay = idem
        .once_for_task(&gate, "execute_action", "send_email", |_| async {
            Err::<String, _>(SmtpTimeout)
        })
        .await
        .map_err(|e| ScenarioError::Failed(e.to_string()))?;
    check!(
        replay.origin == Origin::Replayed,
        "the email key must be recorded"
    );
    if caps.compare_and_set {
        let children = saver
            .list_all(ListOptions::thread(&thread))
            .await?
            .into_iter()
            .filter(|t| {
                t.parent_config
                    .as_ref()
                    .and_then(|p| p.checkpoint_id.as_ref())
                    == gate.checkpoint_id.as_ref()
            })
            .count();
        check!(children == 1, "the gate has {children} committed children");
    }

    if caps.leases {
        cross_process(&saver, &thread, &idem).await?;
    }
    Ok(())
}

/// Two processes (two wrappers, each with its own lock map) on one case: the second waits
/// for the first's lease; a holder whose lease expired and was taken over is fenced.
async fn cross_process(
    saver: &Arc<dyn Saver>,
    thread: &str,
    process_a: &Idempotent<Arc<dyn Saver>>,
) -> ScenarioResult {
    let process_b = Idempotent::new(
        Arc::clone(saver),
        IdempotentConfig::default()
            .poll_interval(Duration::from_millis(5))
            .lease_ttl(Duration::from_secs(5)),
    );
    let a = process_a.lock_thread(thread).await?;
    let b_acquired = Arc::new(AtomicBool::new(false));
    let waiting = {
        let b_acquired = Arc::clone(&b_acquired);
        let process_b = process_b.clone();
        let thread = thread.to_owned();
        tokio::spawn(async move {
            let guard = process_b.lock_thread(&thread).await;
            b_acquired.store(true, Ordering::SeqCst);
            guard
        })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    check!(
        !b_acquired.load(Ordering::SeqCst),
        "process B ran while process A held the case"
    );
    let a_token = a.fence();
    a.release().await;
    let b = within(10, "process B's lock", waiting)
        .await?
        .map_err(|e| ScenarioError::Failed(format!("process B panicked: {e}")))??;
    check!(
        b.fence() > a_token,
        "B's fencing token {:?} must exceed A's {a_token:?}",
        b.fence()
    );
    // A paused past its lease and comes back with its old token: refused, nothing stored.
    let head = saver
        .get_tuple(&CheckpointConfig::new(thread))
        .await?
        .ok_or_else(|| ScenarioError::Failed("the case has no checkpoint".into()))?;
    let (stale, versions) = step(
        Some(&head.checkpoint),
        vec![(
            "case",
            TypedValue::msgpack(&json!({"status": "STALE WRITE"}))?,
        )],
    );
    let refused = saver
        .put(
            &head.config,
            stale,
            CheckpointMetadata::for_step(Source::Loop, 9),
            versions,
            PutOptions::new().fence(a_token.unwrap_or_default()),
        )
        .await;
    check!(
        matches!(refused, Err(Error::StaleFence { .. })),
        "a write with a superseded token must be refused: {refused:?}"
    );
    // B's writes through its wrapper carry its token and are stored.
    let (fresh, versions) = step(
        Some(&head.checkpoint),
        vec![("case", TypedValue::msgpack(&json!({"status": "CLOSED"}))?)],
    );
    process_b
        .put(
            &head.config,
            fresh,
            CheckpointMetadata::for_step(Source::Loop, 9),
            versions,
            PutOptions::new(),
        )
        .await?;
    b.release().await;
    check!(
        process_a.locked_threads() == 0 && process_b.locked_threads() == 0,
        "a lock map kept an entry"
    );
    Ok(())
}
