//! A session's guest calls: each request starts as a guest task of its own, and its answer is
//! sent when the task finishes. [`serve_each`] is the loop for a session with no grouping
//! policy (the journal, the push log); the WAL's session runs its own loop over the same
//! [`Task`]s, adding the grouping of durable commits ([`super::grouping`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::mpsc;
use wasmtime::component::Accessor;

use super::error::SandboxError;
use super::instance::Reply;
use super::runtime::GuestState;

/// A started guest call. It resolves to its answer, which the session sends.
pub(crate) type Task<'a> = Pin<Box<dyn Future<Output = Answer> + Send + 'a>>;

/// A finished guest call's answers, not yet sent to their callers. Sending them says what they
/// answered.
pub(crate) type Answer = Box<dyn FnOnce() -> Sent + Send>;

/// What sending one guest call's answers did.
pub(crate) struct Sent {
    /// How many calls they answered.
    pub(crate) calls: usize,
    /// The component broke the interface's contract in a way wasmtime cannot see (it is not
    /// Stele's guest, or it is broken). Its state is then unknown, so the instance stops: the
    /// session ends with this error, and every later call gets it.
    pub(crate) broken: Option<SandboxError>,
}

impl Sent {
    /// What every answer to one call says, unless it is [`Sent::broken`].
    pub(crate) const ONE: Sent = Sent {
        calls: 1,
        broken: None,
    };
}

/// The answer that sends `result` to one caller.
pub(crate) fn answer_with<T: Send + 'static, E: Send + 'static>(
    reply: Reply<T, E>,
    result: Result<T, E>,
) -> Answer {
    Box::new(move || {
        reply.send(result);
        Sent::ONE
    })
}

/// How a session turns one request into a guest call.
pub(crate) trait GuestCalls: Sync {
    type Request;
    /// Starts `request` as a guest task.
    fn start<'a>(&'a self, acc: &'a Accessor<GuestState>, request: Self::Request) -> Task<'a>;
}

/// Serves `queue` inside a run: starts every request as it arrives, each as a concurrent guest
/// task (a call that waits on a sync leaves the instance to the others), and sends each answer
/// as its task finishes, until nothing is queued or in flight. `Err` when the component broke
/// its contract ([`Sent::broken`]).
pub(crate) async fn serve_each<C: GuestCalls>(
    acc: &Accessor<GuestState>,
    calls: &C,
    queue: &mut mpsc::UnboundedReceiver<C::Request>,
    calls_outstanding: &AtomicUsize,
) -> Result<(), SandboxError> {
    let mut in_flight: FuturesUnordered<Task<'_>> = FuturesUnordered::new();
    loop {
        let request = if in_flight.is_empty() {
            match queue.try_recv() {
                Ok(request) => request,
                // Nothing queued, nothing in flight: give the instance back.
                Err(_) => return Ok(()),
            }
        } else {
            tokio::select! {
                biased;
                Some(send) = in_flight.next() => {
                    let sent = send();
                    calls_outstanding.fetch_sub(sent.calls, Ordering::SeqCst);
                    match sent.broken {
                        Some(error) => return Err(error),
                        None => continue,
                    }
                }
                Some(request) = queue.recv() => request,
            }
        };
        acc.with(|mut access| access.data_mut().touch());
        in_flight.push(calls.start(acc, request));
    }
}
