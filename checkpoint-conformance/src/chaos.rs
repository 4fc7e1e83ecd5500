//! Network chaos beyond kill -9: a TCP proxy between a saver and its server that closes,
//! resets, stalls and refuses connections while writers run, and the checks that follow.
//!
//! ```ignore
//! use checkpoint_conformance::chaos::{self, ChaosProxy};
//!
//! #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
//! async fn survives_network_chaos() {
//!     let proxy = ChaosProxy::start("127.0.0.1:5432").await.unwrap();
//!     let url = format!("postgres://postgres@127.0.0.1:{}/test", proxy.port());
//!     let saver = Arc::new(MySaver::connect(&url).await.unwrap());
//!     let report = chaos::run(&proxy, saver, Duration::from_secs(8), 42).await.unwrap();
//!     eprintln!("{report}");
//! }
//! ```
//!
//! [`run`] drives the writers of the crash test ([`crash::THREADS`],
//! compare-and-set puts of three values naming their step, then a `put_writes`), re-reading
//! the head after every failed call, while faults are injected at random moments
//! (reproducible from the seed). Then it checks, on the same saver, never rebuilt:
//!
//! * every error the writers saw was typed and transient ([`Error::is_transient`]), or a
//!   compare-and-set [`Error::Conflict`] (a put whose answer was lost may have committed);
//! * no call hung: each answered within [`CALL_TIMEOUT`], stalls included;
//! * the saver recovers by itself: once the faults stop, reads succeed (16 in a row) within
//!   [`RECOVERY_TIMEOUT`] (its pool heals);
//! * every acknowledged put and `put_writes` is stored, every stored checkpoint is whole
//!   (an unacknowledged call is all there or absent), and each thread is one unbroken chain
//!   ([`crash::verify`]).
//!
//! [`outages_are_ridden_out`] runs the same writers through outages, first directly and then
//! through a [`RetryLayer`]: calls must fail without it and none may fail with it.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use checkpoint_core::{
    CheckpointConfig, CheckpointMetadata, CheckpointTuple, Error, ListOptions, PutOptions,
    RetryLayer, Saver, SaverExt,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{broadcast, watch};
use tower_layer::Layer;

use crate::crash::{self, THREADS};

/// The longest a single call may take, a stall included.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the saver has to answer again once the faults stop.
pub const RECOVERY_TIMEOUT: Duration = Duration::from_secs(20);
/// Successful reads in a row that count as recovered (more than any test pool's size).
const RECOVERY_READS: usize = 16;
/// The longest the final check of the store may take.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(120);

/// How open connections are ended by [`ChaosProxy::cut`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// An orderly close (FIN) in both directions.
    Close,
    /// A reset (RST): what a crashed peer or a firewall dropping state looks like.
    Reset,
}

/// A TCP proxy on 127.0.0.1 in front of one server, with faults on demand.
#[derive(Debug)]
pub struct ChaosProxy {
    port: u16,
    cut: broadcast::Sender<Cut>,
    stalled: watch::Sender<bool>,
    refusing: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ChaosProxy {
    fn drop(&mut self) {
        self.task.abort();
        let _ = self.cut.send(Cut::Close);
    }
}

impl ChaosProxy {
    /// Listens on a free port of 127.0.0.1 and forwards every connection to `upstream`
    /// (`host:port`).
    pub async fn start(upstream: &str) -> io::Result<Self> {
        let upstream: SocketAddr = tokio::net::lookup_host(upstream)
            .await?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no upstream address"))?;
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (cut, _) = broadcast::channel(16);
        let (stalled, _) = watch::channel(false);
        let refusing = Arc::new(AtomicBool::new(false));
        let accepted = Arc::new(AtomicU64::new(0));
        let task = tokio::spawn(accept_loop(
            listener,
            upstream,
            cut.clone(),
            stalled.clone(),
            Arc::clone(&refusing),
            Arc::clone(&accepted),
        ));
        Ok(Self {
            port,
            cut,
            stalled,
            refusing,
            accepted,
            task,
        })
    }

    /// The port savers connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Ends every open connection (new ones are accepted as before).
    pub fn cut(&self, how: Cut) {
        let _ = self.cut.send(how);
    }

    /// Stops (`true`) or resumes (`false`) the bytes of every connection, in both
    /// directions; connections stay open.
    pub fn stall(&self, on: bool) {
        self.stalled.send_replace(on);
    }

    /// Resets (`true`) every new connection at once, or accepts them again (`false`).
    pub fn refuse(&self, on: bool) {
        self.refusing.store(on, Ordering::SeqCst);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    cut: broadcast::Sender<Cut>,
    stalled: watch::Sender<bool>,
    refusing: Arc<AtomicBool>,
    accepted: Arc<AtomicU64>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Out of descriptors, say: do not spin.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        if refusing.load(Ordering::SeqCst) {
            let _ = client.set_zero_linger();
            drop(client);
            continue;
        }
        accepted.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(serve(
            client,
            upstream,
            cut.subscribe(),
            stalled.subscribe(),
        ));
    }
}

/// Forwards one connection until either side closes it or a cut ends it.
async fn serve(
    client: TcpStream,
    upstream: SocketAddr,
    mut cut: broadcast::Receiver<Cut>,
    stalled: watch::Receiver<bool>,
) {
    let Ok(server) = TcpStream::connect(upstream).await else {
        let _ = client.set_zero_linger();
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let how = tokio::select! {
        () = async {
            tokio::join!(
                pump(&mut client_read, &mut server_write, stalled.clone()),
                pump(&mut server_read, &mut client_write, stalled),
            );
        } => None,
        how = cut.recv() => Some(how.unwrap_or(Cut::Close)),
    };
    if how == Some(Cut::Reset) {
        // Dropping a write half would send a FIN first (a reader would see an orderly end):
        // reunite the halves so the streams are dropped whole, with zero linger: an RST.
        for (read, write) in [(client_read, client_write), (server_read, server_write)] {
            if let Ok(stream) = read.reunite(write) {
                let _ = stream.set_zero_linger();
                drop(stream);
            }
        }
    }
}

/// Copies bytes from `from` to `to`, holding them while the proxy is stalled.
async fn pump(
    from: &mut OwnedReadHalf,
    to: &mut OwnedWriteHalf,
    mut stalled: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if stalled.wait_for(|s| !*s).await.is_err() {
            break;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

/// What a chaos run did and saw.
#[derive(Clone, Debug, Default)]
pub struct ChaosReport {
    /// Acknowledged puts.
    pub puts: usize,
    /// Acknowledged `put_writes` calls.
    pub writes: usize,
    /// Calls that failed with a transient error.
    pub transient_errors: usize,
    /// Those errors by message (with their sources), for diagnosis.
    pub errors_by_message: std::collections::BTreeMap<String, usize>,
    /// Compare-and-set conflicts (a put whose answer was lost had committed).
    pub conflicts: usize,
    /// Faults injected: closes, resets, stalls, refusals.
    pub faults: [usize; 4],
    /// Server restarts ([`run_with_restarts`]).
    pub restarts: usize,
    /// Connections the proxy accepted (the pool reconnecting).
    pub connections: u64,
    /// From the end of the faults to the first successful read.
    pub recovery: Duration,
}

impl fmt::Display for ChaosReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [closes, resets, stalls, refusals] = self.faults;
        write!(
            f,
            "{} puts and {} put_writes acknowledged; {} transient errors, {} conflicts; \
             faults: {closes} closes, {resets} resets, {stalls} stalls, {refusals} refusals, \
             {} restarts; {} connections; recovered in {:?}",
            self.puts,
            self.writes,
            self.transient_errors,
            self.conflicts,
            self.restarts,
            self.connections,
            self.recovery
        )?;
        for (message, n) in &self.errors_by_message {
            write!(f, "\n  {n} x {message}")?;
        }
        Ok(())
    }
}

/// What the writers record.
#[derive(Default)]
struct Ledger {
    puts: Vec<(String, String)>,
    writes: Vec<(String, String)>,
    transient: usize,
    by_message: std::collections::BTreeMap<String, usize>,
    conflicts: usize,
}

/// Runs [`crash::THREADS`]' writers through `saver` (connected through `proxy`) for
/// `duration` while faults are injected, then checks what the module documentation says.
/// `saver` must be empty for those threads.
pub async fn run(
    proxy: &ChaosProxy,
    saver: Arc<dyn Saver>,
    duration: Duration,
    seed: u64,
) -> Result<ChaosReport, String> {
    let mut faults = [0usize; 4];
    let started = Instant::now();
    let report = drive(saver, seed, async |state: &mut u64| {
        if started.elapsed() >= duration {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(100 + next(state) % 300)).await;
        let fault = usize::try_from(next(state) % 4).unwrap_or(0);
        faults[fault] += 1;
        match fault {
            0 => proxy.cut(Cut::Close),
            1 => proxy.cut(Cut::Reset),
            2 => {
                proxy.stall(true);
                tokio::time::sleep(Duration::from_millis(200 + next(state) % 800)).await;
                proxy.stall(false);
            }
            _ => {
                proxy.refuse(true);
                proxy.cut(Cut::Reset);
                tokio::time::sleep(Duration::from_millis(200 + next(state) % 500)).await;
                proxy.refuse(false);
            }
        }
        Ok(true)
    })
    .await;
    proxy.stall(false);
    proxy.refuse(false);
    let mut report = report?;
    report.faults = faults;
    report.connections = proxy.accepted();
    Ok(report)
}

/// Like [`run`], with server restarts for faults: `restarts` times, about 1.5 s apart,
/// `restart` stops the server the saver talks to and starts it again (on the same data, at
/// the same address), returning once it is started; the writers then run 1.5 s more.
pub async fn run_with_restarts<F, Fut>(
    saver: Arc<dyn Saver>,
    restarts: usize,
    seed: u64,
    mut restart: F,
) -> Result<ChaosReport, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut done = 0;
    let mut report = drive(saver, seed, async |state: &mut u64| {
        tokio::time::sleep(Duration::from_millis(1_000 + next(state) % 500)).await;
        if done == restarts {
            return Ok(false);
        }
        restart().await?;
        done += 1;
        Ok(true)
    })
    .await?;
    report.restarts = done;
    Ok(report)
}

/// How long each outage of [`outages_are_ridden_out`] lasts.
pub const OUTAGE: Duration = Duration::from_secs(2);
/// How many outages [`outages_are_ridden_out`] injects into each run.
const OUTAGES: usize = 3;

/// Checks that [`RetryLayer`]'s default policy rides out outages that fail calls: the
/// writers of [`run`] go through `saver` while the server becomes unreachable through
/// `proxy` three times, for [`OUTAGE`] each (every open connection reset, every new
/// one refused), 0.5–1 s apart. First directly: calls must fail (transient errors),
/// or the outages test nothing. Then, with the threads deleted, through a
/// `RetryLayer::new()` around the same saver, on the same schedule: no call may fail, not
/// even with a compare-and-set conflict (a put whose answer was lost, retried while it is
/// still the head, succeeds again). Both runs end with [`run`]'s checks (recovery, every
/// acknowledged call stored, whole checkpoints, unbroken chains). Last, listings read
/// through an outage (a thread of 300 checkpoints; the global listing with a copy of that
/// thread, every id a tie, with a limit) must fail on the plain saver and, through the
/// layer, resume: every checkpoint once, in order. Returns both runs' reports.
pub async fn outages_are_ridden_out(
    proxy: &ChaosProxy,
    saver: Arc<dyn Saver>,
    seed: u64,
) -> Result<(ChaosReport, ChaosReport), String> {
    let plain = run_outages(proxy, Arc::clone(&saver), seed).await?;
    if plain.transient_errors == 0 {
        return Err(format!(
            "the outages failed no call, so they test no retry: {plain}"
        ));
    }
    for thread in THREADS {
        saver
            .delete_thread(thread)
            .await
            .map_err(|e| format!("deleting {thread} between the runs: {}", e.chain()))?;
    }
    let retrying: Arc<dyn Saver> = Arc::new(RetryLayer::new().layer(Arc::clone(&saver)));
    let retried = run_outages(proxy, Arc::clone(&retrying), seed).await?;
    if retried.transient_errors > 0 || retried.conflicts > 0 {
        return Err(format!(
            "through a RetryLayer, calls failed during the outages: {retried}"
        ));
    }
    listings_resume(proxy, &*saver, &*retrying).await?;
    Ok((plain, retried))
}

/// Checkpoints of the thread [`listings_resume`] lists: several pages on every backend.
const LISTED: usize = 300;

/// Listings read 10 checkpoints at a time, with an outage after the first ten: through
/// `plain` each must fail (an item is an error), through `retrying` each must yield what
/// the uncut listing yields, in order, each checkpoint once. The listings: a thread of
/// [`LISTED`] checkpoints, and (where `copy_thread` is offered) the global listing with a
/// copy of that thread beside it, whose every id is a tie of two threads, with a limit.
async fn listings_resume(
    proxy: &ChaosProxy,
    plain: &dyn Saver,
    retrying: &dyn Saver,
) -> Result<(), String> {
    use futures::{StreamExt, TryStreamExt};
    const THREAD: &str = "listed-through-outages";
    crate::fixtures::put_chain(plain, THREAD, "", LISTED, "listing")
        .await
        .map_err(|e| format!("writing the listed thread: {}", e.chain()))?;
    let mut listings = vec![ListOptions::thread(THREAD)];
    if plain.capabilities().copy_thread {
        plain
            .copy_thread(THREAD, "listed-through-outages-copy")
            .await
            .map_err(|e| format!("copying the listed thread: {}", e.chain()))?;
        listings.push(ListOptions::new().limit(LISTED + LISTED / 2));
    }
    for options in listings {
        let whole: Vec<(String, String)> = plain
            .list_all(options.clone())
            .await
            .map_err(|e| format!("listing without an outage: {}", e.chain()))?
            .into_iter()
            .map(|t| (t.checkpoint.id, t.config.thread_id))
            .collect();
        if whole.len() < LISTED {
            return Err(format!("{} checkpoints listed of {LISTED}", whole.len()));
        }
        for (saver, through) in [(plain, "plain"), (retrying, "RetryLayer")] {
            let listed = saver
                .list(options.clone())
                .map_ok(|t| (t.checkpoint.id, t.config.thread_id))
                .boxed();
            let what = format!("a listing ({options:?})");
            let (listed, failed) = read_through_an_outage(proxy, listed, &what).await?;
            judge_cut_listing(through, &what, &listed, failed, &whole)?;
        }
    }
    Ok(())
}

/// Checks a listing cut by an outage (see [`read_through_an_outage`]): read `through` a
/// plain saver it must have failed with a transient error; through a `RetryLayer` it must
/// have yielded `whole`, what the uncut listing yields, in order.
fn judge_cut_listing<T: PartialEq>(
    through: &str,
    what: &str,
    listed: &[T],
    failed: Option<Error>,
    whole: &[T],
) -> Result<(), String> {
    match (through, failed) {
        ("plain", Some(e)) if e.is_transient() => Ok(()),
        ("plain", Some(e)) => Err(format!(
            "{what} cut by an outage failed with a non-transient error: {e:?}"
        )),
        ("plain", None) => Err(format!(
            "{what} cut by an outage yielded {} of {} without an error: the outage tests \
             nothing",
            listed.len(),
            whole.len()
        )),
        (_, Some(e)) => Err(format!(
            "through a RetryLayer, {what} cut by an outage failed after {} items: {}",
            listed.len(),
            e.chain()
        )),
        (_, None) if listed != whole => Err(format!(
            "through a RetryLayer, {what} cut by an outage yielded {} items, not the {} of \
             the uncut listing in order",
            listed.len(),
            whole.len()
        )),
        (_, None) => Ok(()),
    }
}

/// Checks that `list_threads` resumes through a `RetryLayer` around `saver` after an
/// outage, as [`outages_are_ridden_out`] checks `list`: `threads` threads are written (a
/// checkpoint each; more than a page of the backend's thread listing, so that the outage
/// comes while a page is fetched), and their listing, cut by an outage after ten ids,
/// must fail through `saver` itself and yield every id once, in order, through the layer.
pub async fn thread_listings_resume(
    proxy: &ChaosProxy,
    saver: Arc<dyn Saver>,
    threads: usize,
) -> Result<(), String> {
    use futures::TryStreamExt;
    for n in 0..threads {
        let thread = format!("listed-thread-{n:06}");
        crate::fixtures::put_chain(&*saver, &thread, "", 1, "listing")
            .await
            .map_err(|e| format!("writing {thread}: {}", e.chain()))?;
    }
    let whole: Vec<String> = saver
        .list_threads()
        .try_collect()
        .await
        .map_err(|e| format!("listing the threads without an outage: {}", e.chain()))?;
    if whole.len() < threads {
        return Err(format!("{} threads listed of {threads}", whole.len()));
    }
    let retrying: Arc<dyn Saver> = Arc::new(RetryLayer::new().layer(Arc::clone(&saver)));
    for (saver, through) in [(&saver, "plain"), (&retrying, "RetryLayer")] {
        let what = "the listing of the threads";
        let (listed, failed) = read_through_an_outage(proxy, saver.list_threads(), what).await?;
        judge_cut_listing(through, what, &listed, failed, &whole)?;
    }
    Ok(())
}

/// Reads a listing (`what`): ten items, then the rest while the server is away for
/// [`OUTAGE`] (the stream reads its next page during the outage). Returns the items read
/// and the error that ended it, if one did.
async fn read_through_an_outage<T>(
    proxy: &ChaosProxy,
    mut listed: futures::stream::BoxStream<'static, Result<T, Error>>,
    what: &str,
) -> Result<(Vec<T>, Option<Error>), String> {
    use futures::StreamExt;
    let mut items = Vec::new();
    let mut failed = None;
    for (until, cut) in [(10, false), (usize::MAX, true)] {
        if cut {
            proxy.refuse(true);
            proxy.cut(Cut::Reset);
        }
        let read = async {
            while items.len() < until && failed.is_none() {
                match tokio::time::timeout(CALL_TIMEOUT, listed.next()).await {
                    Ok(Some(Ok(item))) => items.push(item),
                    Ok(Some(Err(e))) => failed = Some(e),
                    Ok(None) => break,
                    Err(_) => return Err(format!("{what} hung")),
                }
            }
            Ok(())
        };
        let back = async {
            if cut {
                tokio::time::sleep(OUTAGE).await;
                proxy.refuse(false);
            }
        };
        let (read, ()) = tokio::join!(read, back);
        read?;
    }
    Ok((items, failed))
}

/// [`drive`] with [`OUTAGES`] outages of [`OUTAGE`].
async fn run_outages(
    proxy: &ChaosProxy,
    saver: Arc<dyn Saver>,
    seed: u64,
) -> Result<ChaosReport, String> {
    let mut done = 0;
    let connections = proxy.accepted();
    let report = drive(saver, seed, async |state: &mut u64| {
        tokio::time::sleep(Duration::from_millis(500 + next(state) % 500)).await;
        if done == OUTAGES {
            return Ok(false);
        }
        proxy.refuse(true);
        proxy.cut(Cut::Reset);
        tokio::time::sleep(OUTAGE).await;
        proxy.refuse(false);
        done += 1;
        Ok(true)
    })
    .await;
    proxy.refuse(false);
    let mut report = report?;
    report.faults[3] = done;
    report.connections = proxy.accepted() - connections;
    Ok(report)
}

/// Checks that a server restart costs no call an error once the server is back: twice,
/// with `connections` connections open (as many reads at once) and then idle for no time
/// (warm, for savers that keep them) and for 600 ms, `restart` stops the server and starts
/// it again, returning once it accepts connections; then a read of the latest checkpoint,
/// a compare-and-set put, its `put_writes`, a list of the thread, a delta history and
/// `connections` reads at once must all succeed. Then, for each other call the saver
/// offers (thread TTLs and the sweep, leases, the idempotency ledger, `copy_thread`,
/// `delete_thread`, `list_threads`), a restart with `connections` connections idle in the
/// pool for 600 ms (where nothing tests them before their next use), and that call first: it
/// alone meets a dead connection, and must succeed too. A saver learns that
/// its pooled connections died only by using them: this holds when it retries a call that
/// may run twice on another connection, and checks the others, once it finds one dead.
pub async fn calls_succeed_after_restarts<F, Fut>(
    saver: &dyn Saver,
    connections: usize,
    mut restart: F,
) -> Result<(), String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    const THREAD: &str = "restart-calls";
    let latest = CheckpointConfig::new(THREAD);
    crate::fixtures::put_child(saver, &latest)
        .await
        .map_err(|e| format!("the first put failed: {e}"))?;
    for idle in [Duration::ZERO, Duration::from_millis(600)] {
        let reads = futures::future::join_all((0..connections).map(|_| saver.get_tuple(&latest)));
        for read in reads.await {
            read.map_err(|e| format!("a read before the restart failed: {e}"))?;
        }
        tokio::time::sleep(idle).await;
        restart().await?;
        let mut errors: Vec<String> = Vec::new();
        let mut note = |call: &str, r: checkpoint_core::Result<()>| {
            if let Err(e) = r {
                errors.push(format!("{call}: {}", e.chain()));
            }
        };
        match saver.get_tuple(&latest).await {
            Ok(Some(head)) => {
                let (checkpoint, versions) = crate::fixtures::step(
                    Some(&head.checkpoint),
                    &[("a", Some(crate::fixtures::val(serde_json::json!(2))))],
                );
                let put = saver
                    .put(
                        &head.config,
                        checkpoint,
                        CheckpointMetadata::new(),
                        versions,
                        PutOptions::compare_and_set(),
                    )
                    .await;
                match put {
                    Ok(child) => note(
                        "put_writes",
                        crate::fixtures::put_two_writes(saver, &child, "task").await,
                    ),
                    Err(e) => note("put", Err(e)),
                }
            }
            Ok(None) => note("get_tuple", Err(Error::invalid("the thread was not found"))),
            Err(e) => note("get_tuple", Err(e)),
        }
        let list = saver.list_all(ListOptions::thread(THREAD)).await;
        note("list", list.map(|_| ()));
        let history = saver
            .delta_channel_history(&latest, &["a".to_owned()])
            .await;
        note("delta_channel_history", history.map(|_| ()));
        let reads = futures::future::join_all((0..connections).map(|_| saver.get_tuple(&latest)));
        for read in reads.await {
            note("concurrent get_tuple", read.map(|_| ()));
        }
        if !errors.is_empty() {
            return Err(format!(
                "after a restart with connections idle for {idle:?}, calls failed:\n{}",
                errors.join("\n")
            ));
        }
    }
    let caps = saver.capabilities();
    let firsts = [
        ("set_thread_ttl", caps.ttl),
        ("thread_ttl", caps.ttl),
        ("sweep_expired", caps.ttl),
        ("acquire_lease", caps.leases),
        ("renew_lease", caps.leases),
        ("claim", caps.ledger),
        ("complete_claim", caps.ledger),
        ("copy_thread", caps.copy_thread),
        ("delete_thread", true),
        ("list_threads", true),
    ];
    let lease = if caps.leases {
        match saver
            .acquire_lease(THREAD, "chaos", Duration::from_secs(600))
            .await
        {
            Ok(Some(lease)) => Some(lease),
            other => return Err(format!("acquire_lease before the restarts: {other:?}")),
        }
    } else {
        None
    };
    let claimed = if caps.ledger {
        match saver.claim("restart-calls", Duration::from_secs(600)).await {
            Ok(checkpoint_core::Claim::Acquired { token }) => Some(token),
            other => return Err(format!("claim before the restarts: {other:?}")),
        }
    } else {
        None
    };
    for (call, offered) in firsts {
        if !offered {
            continue;
        }
        let reads = futures::future::join_all((0..connections).map(|_| saver.get_tuple(&latest)));
        for read in reads.await {
            read.map_err(|e| format!("a read before the restart failed: {e}"))?;
        }
        tokio::time::sleep(Duration::from_millis(600)).await;
        restart().await?;
        let ttl = checkpoint_core::ThreadTtl::Expire(Duration::from_secs(3600));
        let result: checkpoint_core::Result<()> = match (call, &lease, claimed) {
            ("set_thread_ttl", ..) => saver.set_thread_ttl(THREAD, ttl).await,
            ("thread_ttl", ..) => saver.thread_ttl(THREAD).await.map(drop),
            ("sweep_expired", ..) => saver.sweep_expired(10).await.map(drop),
            ("acquire_lease", ..) => saver
                .acquire_lease(THREAD, "chaos", Duration::from_secs(600))
                .await
                .map(drop),
            ("renew_lease", Some(lease), _) => saver
                .renew_lease(lease, Duration::from_secs(600))
                .await
                .map(drop),
            ("claim", ..) => saver
                .claim("restart-calls-2", Duration::from_secs(600))
                .await
                .map(drop),
            ("complete_claim", _, Some(token)) => {
                saver
                    .complete_claim("restart-calls", token, checkpoint_core::TypedValue::null())
                    .await
            }
            ("copy_thread", ..) => saver.copy_thread(THREAD, "restart-calls-copy").await,
            ("delete_thread", ..) => saver.delete_thread("restart-calls-none").await,
            ("list_threads", ..) => {
                use futures::TryStreamExt;
                saver.list_threads().try_collect::<Vec<_>>().await.map(drop)
            }
            _ => return Err(format!("no {call} to call: the lease or claim is missing")),
        };
        result.map_err(|e| {
            format!(
                "{call}, the first call after a restart, failed: {}",
                e.chain()
            )
        })?;
    }
    Ok(())
}

/// Runs the writers while `inject` injects one fault per call, until it answers `false`;
/// then stops them and checks recovery and the store.
async fn drive(
    saver: Arc<dyn Saver>,
    seed: u64,
    mut inject: impl AsyncFnMut(&mut u64) -> Result<bool, String>,
) -> Result<ChaosReport, String> {
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = THREADS
        .into_iter()
        .map(|thread| {
            let saver = Arc::clone(&saver);
            let stop = Arc::clone(&stop);
            tokio::spawn(async move { write_until(&*saver, thread, &stop).await })
        })
        .collect();

    let mut state = seed;
    let injected = loop {
        match inject(&mut state).await {
            Ok(true) => {}
            Ok(false) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    let faults_ended = Instant::now();
    stop.store(true, Ordering::SeqCst);

    let mut ledger = Ledger::default();
    for writer in writers {
        let mine = writer
            .await
            .map_err(|e| format!("a writer panicked: {e}"))??;
        ledger.puts.extend(mine.puts);
        ledger.writes.extend(mine.writes);
        ledger.transient += mine.transient;
        for (message, n) in mine.by_message {
            *ledger.by_message.entry(message).or_default() += n;
        }
        ledger.conflicts += mine.conflicts;
    }
    injected?;

    // The same saver, never rebuilt, must answer again: RECOVERY_READS reads in a row, so
    // every pooled connection a fault killed has failed once and been replaced.
    let mut in_a_row = 0;
    while in_a_row < RECOVERY_READS {
        match call(saver.get_tuple(&CheckpointConfig::new(THREADS[0]))).await {
            Ok(_) => in_a_row += 1,
            Err(CallError::Failed(e))
                if faults_ended.elapsed() < RECOVERY_TIMEOUT && e.is_transient() =>
            {
                in_a_row = 0;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(CallError::Failed(e)) => {
                return Err(format!(
                    "the saver did not recover within {RECOVERY_TIMEOUT:?} of the last fault: {e}"
                ));
            }
            Err(CallError::Hung) => {
                return Err(format!("a read after the faults hung for {CALL_TIMEOUT:?}"));
            }
        }
    }
    let report = ChaosReport {
        puts: ledger.puts.len(),
        writes: ledger.writes.len(),
        transient_errors: ledger.transient,
        errors_by_message: std::mem::take(&mut ledger.by_message),
        conflicts: ledger.conflicts,
        recovery: faults_ended.elapsed(),
        ..ChaosReport::default()
    };
    tokio::time::timeout(
        VERIFY_TIMEOUT,
        crash::verify(&*saver, &ledger.puts, &ledger.writes, None),
    )
    .await
    .map_err(|_| format!("verifying the store took more than {VERIFY_TIMEOUT:?}"))??;
    if report.puts == 0 {
        return Err(format!(
            "no put was acknowledged during the run: nothing was tested ({report})"
        ));
    }
    Ok(report)
}

/// One writer: puts and writes on `thread` until `stop`, from the head as stored.
async fn write_until(saver: &dyn Saver, thread: &str, stop: &AtomicBool) -> Result<Ledger, String> {
    let mut ledger = Ledger::default();
    while !stop.load(Ordering::SeqCst) {
        // The head as stored: after a failure, a put whose answer was lost may be it.
        let head: Option<CheckpointTuple> =
            match call(saver.get_tuple(&CheckpointConfig::new(thread))).await {
                Ok(h) => h,
                Err(e) => {
                    record(&mut ledger, &e, false)?;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
            };
        let (config, step) = match call(crash::put_step(saver, thread, head.as_ref())).await {
            Ok(put) => put,
            // A conflict: a put whose answer was lost committed; the next round reads it.
            Err(e) => {
                record(&mut ledger, &e, true)?;
                continue;
            }
        };
        let id = config.checkpoint_id.clone().unwrap_or_default();
        ledger.puts.push((thread.to_owned(), id.clone()));
        match call(crash::writes_step(saver, &config, step)).await {
            Ok(()) => ledger.writes.push((thread.to_owned(), id)),
            Err(e) => record(&mut ledger, &e, false)?,
        }
    }
    Ok(ledger)
}

/// `fut`, or an error when it takes longer than [`CALL_TIMEOUT`].
async fn call<T>(
    fut: impl std::future::Future<Output = checkpoint_core::Result<T>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(CallError::Failed(e)),
        Err(_) => Err(CallError::Hung),
    }
}

enum CallError {
    Failed(Error),
    Hung,
}

/// Counts an error the contract allows under network faults (a compare-and-set conflict
/// only from a put), or fails the run.
fn record(ledger: &mut Ledger, e: &CallError, put: bool) -> Result<(), String> {
    match e {
        CallError::Hung => Err(format!("a call did not answer within {CALL_TIMEOUT:?}")),
        CallError::Failed(Error::Conflict { .. }) if put => {
            ledger.conflicts += 1;
            Ok(())
        }
        CallError::Failed(e) if e.is_transient() => {
            ledger.transient += 1;
            *ledger.by_message.entry(chain(e)).or_default() += 1;
            Ok(())
        }
        CallError::Failed(e) => Err(format!(
            "a network fault surfaced as a non-transient error: {e} ({e:?})"
        )),
    }
}

/// An error's message followed by its sources'.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// SplitMix64: the fault schedule, reproducible from the seed.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny echo server behind the proxy: bytes flow, a stall holds them, a reset ends
    /// the connection, a refusal resets new connections.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_proxy_forwards_stalls_cuts_and_refuses() {
        let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let echo_addr = echo.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = echo.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        let proxy = ChaosProxy::start(&echo_addr.to_string()).await.unwrap();
        let mut c = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        let mut buf = [0u8; 5];
        c.write_all(b"hello").await.unwrap();
        c.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"hello");

        proxy.stall(true);
        c.write_all(b"again").await.unwrap();
        let held = tokio::time::timeout(Duration::from_millis(300), c.read_exact(&mut buf)).await;
        assert!(held.is_err(), "a stall holds the bytes");
        proxy.stall(false);
        c.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"again");

        proxy.cut(Cut::Reset);
        let mut rest = Vec::new();
        let ended = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut rest))
            .await
            .expect("a cut ends the connection");
        assert_eq!(
            ended.map_err(|e| e.kind()),
            Err(io::ErrorKind::ConnectionReset),
            "a reset cut resets, it does not close"
        );

        let mut closed = TcpStream::connect(("127.0.0.1", proxy.port()))
            .await
            .unwrap();
        closed.write_all(b"x").await.unwrap();
        closed.read_exact(&mut buf[..1]).await.unwrap();
        proxy.cut(Cut::Close);
        let ended = tokio::time::timeout(Duration::from_secs(5), closed.read_to_end(&mut rest))
            .await
            .expect("a cut ends the connection");
        assert_eq!(ended.unwrap(), 0, "a close cut is an orderly end");

        proxy.refuse(true);
        // The reset may already end the connect, or the first read.
        if let Ok(mut refused) = TcpStream::connect(("127.0.0.1", proxy.port())).await {
            let mut one = [0u8; 1];
            let r = tokio::time::timeout(Duration::from_secs(5), refused.read(&mut one))
                .await
                .expect("a refused connection ends at once");
            assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
        }
        proxy.refuse(false);
        assert_eq!(proxy.accepted(), 2);
    }
}
