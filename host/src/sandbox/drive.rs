//! [`Drive`]: one caller's wait for its answer, driving the instance's run whenever it can
//! take it (see [`super::store_driver`] for who drives when).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll, Waker};

use tokio::sync::oneshot;

use super::departures::Departures;
use super::instance::{DriverId, Run, Served, Shared};
use super::posted_io::{RunIo, run_in_place};
use super::wakes::{PollAgain, RUNNING_OWN_IO};
use crate::embed::io_lane::PostedIo;

/// One caller's wait for its answer, driving the instance's run whenever it can take it.
pub(super) struct Drive<'a, S: Served, T> {
    pub(super) shared: &'a Shared<S>,
    pub(super) run: Option<Run<S>>,
    pub(super) answer: oneshot::Receiver<Result<T, S::Error>>,
    /// Set for a blocked thread until it has taken its answer.
    pub(super) departures: Option<Arc<Departures>>,
    pub(super) run_io: RunIo,
    /// The call is answered only after a sync: its caller may as well run syncs.
    pub(super) awaits_sync: bool,
    pub(super) poll_again: Arc<PollAgain>,
    pub(super) id: DriverId,
}

impl<S: Served, T> Drive<'_, S, T> {
    /// Leaves the run, with whatever is still in flight in it, to the dispatcher.
    fn hand_off(&mut self) {
        if let Some(run) = self.run.take() {
            self.shared.park(run, self.id);
            self.shared.wake_dispatcher();
        }
    }

    fn answered(
        &mut self,
        answer: Result<Result<T, S::Error>, oneshot::error::RecvError>,
    ) -> Result<T, S::Error> {
        // Counted only once sent: a reply dropped unsent (the instance stopped) was not.
        if let (Some(departures), Ok(_)) = (self.departures.take(), &answer) {
            departures.left();
        }
        answer.unwrap_or_else(|_| Err(self.shared.stopped_error().into()))
    }
}

impl<S: Served, T> Future for Drive<'_, S, T> {
    type Output = Result<T, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        this.poll_again.begin(cx.waker());
        let waker = Waker::from(this.poll_again.clone());
        let mut inner = Context::from_waker(&waker);
        for _ in 0..POLLS_PER_WAKE_MAX {
            if let Poll::Ready(answer) = this.poll_once(&mut inner) {
                this.poll_again.finish();
                return Poll::Ready(answer);
            }
            if !this.poll_again.end_pass() {
                // Not woken during the pass: a later wake goes to the executor.
                return Poll::Pending;
            }
            if !tokio::task::coop::has_budget_remaining() {
                break;
            }
        }
        // Woken, but out of passes or of tokio's budget: the executor polls again.
        this.poll_again.finish();
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// How many times one poll of a [`Drive`] polls again because the run woke it meanwhile. The
/// bound lets a run that keeps waking itself (a task out of tokio's budget, whose every poll
/// wakes it at once) end the poll, so the executor runs its other tasks.
const POLLS_PER_WAKE_MAX: usize = 64;

impl<S: Served, T> Drive<'_, S, T> {
    /// One pass: takes the run if nobody else holds it, drives it until it needs something to
    /// happen, parks it, then looks at the answer.
    fn poll_once(&mut self, cx: &mut Context<'_>) -> Poll<Result<T, S::Error>> {
        if self.run.is_none() {
            self.run = self.shared.take_run();
        }
        let mut repolls = 0;
        while let Some(run) = self.run.as_mut() {
            if let Poll::Ready((session, outcome)) = run.as_mut().poll(cx) {
                self.run = None;
                self.shared.finish(session, outcome);
                // A call sent as the run was ending found the instance driven, and left it to
                // this driver: pass it on.
                if self.shared.calls_outstanding.load(Ordering::SeqCst) > 0 {
                    self.shared.wake_dispatcher();
                }
                break;
            }
            if let Poll::Ready(answer) = Pin::new(&mut self.answer).poll(cx) {
                // This caller is done; it does not go on serving the others.
                self.hand_off();
                return Poll::Ready(self.answered(answer));
            }
            if repolls < POLLS_PER_WAKE_MAX && self.poll_again.take_woken() {
                // The run woke during this pass (a call arrived that found it driven, say):
                // poll again before anything blocks, so that nothing waits on this driver.
                repolls += 1;
                continue;
            }
            let run = self.run.take().expect("the loop holds a run");
            let Some(posted) = self.posted_io_to_run_here() else {
                // Parked, not held, while this caller waits: the run's wakes come here, but a
                // caller that arrives meanwhile starts its call at once, and the driver of a
                // sync that ends takes the run straight back.
                self.shared.park(run, self.id);
                if self.shared.io.has_posted() {
                    // A sync this caller is not to run: the dispatcher runs it.
                    self.shared.wake_dispatcher();
                }
                break;
            };
            // Run the posted I/O (the leader's sync) here, with the run parked meanwhile: a call
            // that arrives during the sync takes the run and stages into the next group, and
            // the run's wakes go to the dispatcher (see `BUSY`).
            self.shared.park(run, self.id);
            if self.poll_again.busy() {
                self.shared.wake_dispatcher();
            }
            RUNNING_OWN_IO.set(true);
            match self.run_io {
                RunIo::InPlace => run_in_place(posted, &self.shared.io),
                RunIo::Here | RunIo::OnIoLane => posted.run_here(),
            }
            RUNNING_OWN_IO.set(false);
            self.poll_again.done_busy();
            self.run = self.shared.reclaim();
        }
        Pin::new(&mut self.answer)
            .poll(cx)
            .map(|answer| self.answered(answer))
    }

    /// The I/O the run just posted, if this driver is to run it: a lone caller runs its own
    /// sync (no wake-up at all), and a thread whose call awaits a sync runs any (it would only
    /// wait otherwise, and handing the sync over costs a wake-up on the group's path). Other
    /// callers leave it to the dispatcher: a call that does not await a sync (`stats`, a
    /// non-durable commit) must not wait for one, and a tokio task would block its worker. A
    /// current-thread runtime's task sends the I/O to the I/O lane.
    fn posted_io_to_run_here(&self) -> Option<PostedIo> {
        match self.run_io {
            RunIo::OnIoLane => {
                self.shared.io.send_posted();
                None
            }
            RunIo::Here if self.awaits_sync || self.shared.alone() => {
                self.shared.io.take_posted_in_order()
            }
            RunIo::InPlace if self.shared.alone() => self.shared.io.take_posted_in_order(),
            RunIo::Here | RunIo::InPlace => None,
        }
    }
}

impl<S: Served, T> Drop for Drive<'_, S, T> {
    /// A caller that leaves (answered, or its future dropped mid-run) hands the run to the
    /// dispatcher if the run's wakes would otherwise come to it: the calls in the run, its own
    /// included, still complete (see the module doc).
    fn drop(&mut self) {
        if let Some(departures) = self.departures.take() {
            self.answer.close();
            if self.answer.try_recv().is_ok() {
                departures.left();
            }
        }
        if self.run.is_some() {
            self.hand_off();
        } else if self.shared.parked_by(self.id) {
            self.shared.wake_dispatcher();
        }
    }
}
