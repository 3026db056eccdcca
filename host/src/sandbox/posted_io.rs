//! Where the I/O a run posts (a guest's sync, through the `vfs-async` imports) runs: on the
//! driving caller's thread, inside `block_in_place` on its tokio worker, or on the store's I/O
//! lane on the shared worker threads ([`crate::embed::io_lane`]).

use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::task::Poll;

use crate::embed::io_lane::{IoLane, PostedIo};

/// Where a lone caller that drives the instance runs the I/O its run posts.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunIo {
    /// On the caller's thread, which is there to block.
    Here,
    /// On the caller's tokio worker, inside `block_in_place` (which moves the worker's other
    /// tasks elsewhere meanwhile).
    InPlace,
    /// On the I/O lane: a current-thread runtime cannot block its only worker.
    OnIoLane,
}

impl RunIo {
    /// A thread outside tokio blocks where it is; inside tokio, the runtime's flavour decides.
    pub(crate) fn for_this_caller() -> RunIo {
        match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
            Ok(tokio::runtime::RuntimeFlavor::MultiThread) => RunIo::InPlace,
            Ok(_) => RunIo::OnIoLane,
            Err(_) => RunIo::Here,
        }
    }
}

/// Runs posted I/O on this tokio worker, inside `block_in_place`. Where tokio refuses that
/// (a `LocalSet`, say, which `RunIo::for_this_caller` cannot tell apart) it panics before
/// running anything: the work then goes to the I/O lane instead.
pub(crate) fn run_in_place(posted: PostedIo, io: &IoLane) {
    let mut posted = Some(posted);
    let refused = catch_unwind(AssertUnwindSafe(|| {
        tokio::task::block_in_place(|| posted.take().map(PostedIo::run_here))
    }))
    .is_err();
    if let (true, Some(posted)) = (refused, posted) {
        io.send(posted);
    }
}

/// Polls `run` to its end on this thread, running the I/O it posts here after every poll (in
/// order: work already on the lane first): how a log is instantiated and opened, on the
/// opening caller's thread, before any other caller can drive the instance. Not on a worker
/// thread: a turn must not wait for the lane, whose turn could be queued behind it.
pub(crate) fn block_on_running_io<F: Future>(run: F, io: &IoLane) -> F::Output {
    let mut run = std::pin::pin!(run);
    futures::executor::block_on(std::future::poll_fn(|cx| {
        loop {
            let polled = run.as_mut().poll(cx);
            if polled.is_ready() {
                return polled;
            }
            match io.take_posted_in_order() {
                // Its answers wake this future: poll again at once.
                Some(posted) => posted.run_here(),
                // Nothing posted, or sent behind the lane's work: the wake comes from there.
                None => return Poll::Pending,
            }
        }
    }))
}
