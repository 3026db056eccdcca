//! The sandboxed driver's tests: grouping (pure) and a WAL session over FaultFs.

use std::ops::Range;
use std::sync::Arc;

use stele::vfs::{MemVfs, Vfs};
use stele::wal::record::encoded_len;
use stele::wal::{DurabilityPolicy, LogSeq, WalOptions, WalWriteError};
use tokio::sync::{mpsc, oneshot};

use super::convert::plain::wit_options;
use super::convert::with_async::from_wit_range;
use super::error::WalError;
use super::grouping::{Call, gather_durable_commits};
use super::request::Request;
use super::session::{WalSession, answer, answer_batches, open_session};
use crate::embed::bindings::engine_async::exports::stele::log::wal as wit;
use crate::embed::io_lane::IoLane;
use crate::fs::{FaultFs, FaultRule, InjectedError, OpKind};
use crate::sandbox::SandboxError;
use crate::sandbox::instance::Reply;
use crate::sandbox::posted_io::block_on_running_io;
use crate::sandbox::runtime::{Runtime, SandboxLimits};

fn records(payload_bytes: &[usize]) -> Vec<wit::CommitRecord> {
    payload_bytes
        .iter()
        .enumerate()
        .map(|(i, &len)| wit::CommitRecord {
            op: 1,
            payload: vec![i as u8; len],
        })
        .collect()
}

fn durable(records: Vec<wit::CommitRecord>) -> Request {
    Request::CommitManyDurable {
        encoded_bytes: records.iter().map(|r| encoded_len(r.payload.len())).sum(),
        records,
        reply: Reply::to_task(oneshot::channel().0),
    }
}

fn stats() -> Request {
    Request::Stats {
        reply: Reply::to_task(oneshot::channel().0),
    }
}

/// What each call holds: `None` for a request other than a durable commit, else the
/// number of records of each batch it holds.
fn shape(calls: &[Call]) -> Vec<Option<Vec<usize>>> {
    calls
        .iter()
        .map(|call| match call {
            Call::One(Request::CommitManyDurable { records, .. }) => Some(vec![records.len()]),
            Call::One(_) => None,
            Call::DurableBatches(b) => Some(b.batches.iter().map(Vec::len).collect()),
        })
        .collect()
}

/// Durable commits that arrive together become one call, up to one group's bytes; an
/// empty one, a lone one and every other request stay calls of their own, in order.
#[test]
fn durable_commits_that_arrive_together_share_a_call() {
    let group = 2 * encoded_len(100);
    let calls = gather_durable_commits(
        [
            durable(records(&[100])),
            stats(),
            durable(records(&[])),
            durable(records(&[100])),
            durable(records(&[1])),
        ]
        .into_iter(),
        group,
    );
    assert_eq!(
        shape(&calls),
        vec![Some(vec![1, 1]), None, Some(vec![0]), Some(vec![1])],
        "the third commit would take the first call past one group"
    );
    assert!(matches!(calls[0], Call::DurableBatches(_)));
    assert!(matches!(calls[3], Call::One(_)), "a gathering of one");
}

/// A component that answers fewer outcomes than it was given batches: every caller gets
/// the same typed error (which batch an outcome belongs to is unknown), and the answer says
/// the instance is broken, which ends the session (see `WalSession::serve_queued`).
#[test]
fn a_miscounted_batch_answer_fails_every_caller_and_breaks_the_instance() {
    let (replies, answers): (Vec<_>, Vec<_>) = (0..3)
        .map(|_| {
            let (sender, answer) = oneshot::channel();
            (Reply::to_task(sender), answer)
        })
        .unzip();
    let one_outcome = vec![Ok(wit::SeqRange { start: 0, end: 1 })];
    let sent = answer_batches(replies, Ok(one_outcome));
    assert_eq!(sent.calls, 3);
    let Some(SandboxError::BrokenContract(why)) = sent.broken.clone() else {
        panic!("a miscount must break the instance, got {:?}", sent.broken);
    };
    assert_eq!(why, "the component answered 1 outcomes for 3 batches");
    for mut answer in answers {
        let got = answer.try_recv().expect("every caller is answered");
        assert_eq!(
            got,
            Err(WalError::Sandbox(SandboxError::BrokenContract(why.clone())))
        );
    }
}

/// A session on `fault` with the log `g` created under `options`.
fn session(fault: &FaultFs, options: WalOptions) -> (Box<WalSession>, IoLane) {
    let runtime = Runtime::get().unwrap();
    let mut store = runtime
        .store_for_async(Arc::new(fault.clone()), SandboxLimits::default())
        .unwrap();
    let io = store.data().stele.io_lane().cloned().unwrap();
    let bindings = block_on_running_io(runtime.instantiate_async_in(&mut store), &io).unwrap();
    let (_requests, queue) = mpsc::unbounded_channel();
    let (session, _) =
        open_session(store, bindings, &io, "g".into(), options, true, queue).unwrap();
    (session, io)
}

fn commit_batches(
    session: &mut WalSession,
    io: &IoLane,
    batches: Vec<Vec<wit::CommitRecord>>,
) -> Vec<Result<Range<LogSeq>, WalError>> {
    let WalSession {
        store,
        bindings,
        writer,
        ..
    } = session;
    let writer = *writer;
    let outcomes = block_on_running_io(
        store.run_concurrent(async |acc| {
            let api = bindings.stele_log_wal_async().writer();
            api.call_commit_batches_durable(acc, writer, batches).await
        }),
        io,
    );
    let outcomes = outcomes.unwrap().unwrap();
    outcomes
        .into_iter()
        .map(|outcome| answer(Ok(outcome), from_wit_range))
        .collect()
}

/// The payload sizes of the log `g` as a power loss now would leave it: only what was
/// synced.
fn payload_lens_after_power_loss(fault: &FaultFs) -> Vec<usize> {
    let power_lost: Arc<dyn Vfs> =
        Arc::new(fault.crash(crate::fs::CrashPlan::KeepPrefix { ops: 0 }));
    let (recovered, _) = crate::read_wal(power_lost, "g", crate::Mode::Native).unwrap();
    recovered.iter().map(|r| r.payload.len()).collect()
}

fn seqs(range: Range<u64>) -> Result<Range<LogSeq>, WalError> {
    Ok(LogSeq(range.start)..LogSeq(range.end))
}

/// Each batch of a gathered call is staged on its own, as its own call would be: one the
/// retention bound refuses stages nothing and takes no seqs, the batches around it are
/// durable, and an empty one gets its place.
#[test]
fn gathered_batches_keep_their_own_outcomes() {
    let fault = FaultFs::new();
    let options = WalOptions::single_file(DurabilityPolicy::FullSync)
        .with_retained_bytes_max(encoded_len(400) + encoded_len(300) + 2 * encoded_len(50));
    let (mut session, io) = session(&fault, options);
    let outcomes = commit_batches(
        &mut session,
        &io,
        vec![
            records(&[400]),
            records(&[600]),
            records(&[300]),
            records(&[]),
            records(&[50, 50]),
        ],
    );
    assert_eq!(outcomes[0], seqs(0..1));
    assert!(
        matches!(
            outcomes[1],
            Err(WalError::Write(WalWriteError::RetentionFull { .. }))
        ),
        "{:?}",
        outcomes[1]
    );
    assert_eq!(outcomes[2..], [seqs(1..2), seqs(2..2), seqs(2..4)]);
    drop(session);
    assert_eq!(
        payload_lens_after_power_loss(&fault),
        [400, 300, 50, 50],
        "what was acknowledged, and only that"
    );
}

/// Gathered batches can span two groups: when the second group's sync fails, the batch of
/// the first (durable) is acknowledged and the later one fails; the writer is poisoned.
#[test]
fn a_failed_group_fails_only_the_batches_in_it() {
    let fault = FaultFs::new();
    let options = WalOptions::single_file(DurabilityPolicy::FullSync)
        .with_group_bytes_max(Some(encoded_len(200) + 10));
    let (mut session, io) = session(&fault, options);
    fault.inject(FaultRule {
        op: OpKind::Sync,
        nth: fault.count(OpKind::Sync) + 2,
        error: InjectedError::Io,
    });
    let outcomes = commit_batches(&mut session, &io, vec![records(&[200]), records(&[200])]);
    assert_eq!(outcomes[0], seqs(0..1), "its group's sync returned");
    assert!(
        matches!(
            outcomes[1],
            Err(WalError::Write(WalWriteError::Failed { .. }))
        ),
        "{:?}",
        outcomes[1]
    );
    let later = commit_batches(&mut session, &io, vec![records(&[1])]);
    assert!(
        matches!(
            later[0],
            Err(WalError::Write(WalWriteError::Poisoned { .. }))
        ),
        "{:?}",
        later[0]
    );
    drop(session);
    assert_eq!(
        payload_lens_after_power_loss(&fault),
        [200],
        "the acknowledged record survives"
    );
}

/// The host's handle to a guest resource, used after the host dropped it: the call fails
/// with an error (no guest code runs, nothing panics), and the host goes on instantiating.
#[test]
fn a_dropped_writer_handle_is_an_error() {
    let runtime = Runtime::get().unwrap();
    let vfs: Arc<dyn Vfs> = Arc::new(MemVfs::new());
    let (mut store, bindings) = runtime
        .instantiate(vfs.clone(), SandboxLimits::default())
        .unwrap();
    let api = bindings.stele_log_wal().writer();
    let options = wit_options(WalOptions::single_file(DurabilityPolicy::FullSync));
    let writer = api
        .call_create(&mut store, "a.wal", options)
        .unwrap()
        .unwrap();
    assert_eq!(
        api.call_commit_durable(&mut store, writer, 1, b"x")
            .unwrap()
            .unwrap(),
        0
    );
    writer.resource_drop(&mut store).unwrap();

    let err = api
        .call_commit_durable(&mut store, writer, 1, b"y")
        .unwrap_err();
    assert!(format!("{err:#}").contains("unknown handle"), "{err:#}");
    assert!(writer.resource_drop(&mut store).is_err(), "a second drop");

    let (mut store, bindings) = runtime.instantiate(vfs, SandboxLimits::default()).unwrap();
    let api = bindings.stele_log_wal().writer();
    let (writer, recovery) = api
        .call_open(&mut store, "a.wal", options)
        .unwrap()
        .unwrap();
    assert_eq!(recovery.records, 1, "only the record made before the drop");
    assert_eq!(
        api.call_commit_durable(&mut store, writer, 1, b"z")
            .unwrap()
            .unwrap(),
        1
    );
}
