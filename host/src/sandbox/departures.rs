//! [`Departures`]: a run waits for the threads it answered before it goes on, so that they
//! come back together and stage into one group. Generic: any session's blocked callers count.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use super::poison::lock;

/// Answers sent to blocked threads and not yet taken. While there are any, no run is polled
/// (see [`HeldForDepartures`]); the calls those threads make next are started together once
/// the last is back, and join the group the calls already waiting are in.
///
/// Why: a group's callers are answered together, but each has to wake to take its answer, and
/// the first back would otherwise lead a group of itself and whoever had staged. The native
/// thread driver waits the same way (`GroupCommit::departing_waiters`). Starting each call as
/// it arrives does not do: a leader's gathering round resumes before the new call stages in
/// the same turn, ends quiet, and the group splits (2.7 records per fsync at N=4, against 3.5
/// holding everything). Only threads count: a thread always wakes on its answer, where a task
/// may be kept unpolled by its owner.
#[derive(Default)]
pub(super) struct Departures {
    untaken: AtomicUsize,
    /// The last driver held back, woken once every answer is taken.
    held: Mutex<Option<Waker>>,
}

impl Departures {
    pub(super) fn answered(&self) {
        self.untaken.fetch_add(1, Ordering::SeqCst);
    }

    pub(super) fn left(&self) {
        if self.untaken.fetch_sub(1, Ordering::SeqCst) == 1
            && let Some(held) = lock(&self.held).take()
        {
            held.wake();
        }
    }

    fn poll_all_left(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.untaken.load(Ordering::SeqCst) == 0 {
            return Poll::Ready(());
        }
        *lock(&self.held) = Some(cx.waker().clone());
        // `left` may have found no waker to wake just before it was stored.
        if self.untaken.load(Ordering::SeqCst) == 0 {
            lock(&self.held).take();
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

/// A run that is not polled while threads have answers to take: see [`Departures`].
pub(super) struct HeldForDepartures<F> {
    pub(super) departures: Arc<Departures>,
    pub(super) run: F,
}

impl<F: Future + Unpin> Future for HeldForDepartures<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        std::task::ready!(self.departures.poll_all_left(cx));
        Pin::new(&mut self.run).poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::task::Wake;

    use super::*;

    struct CountWakes(AtomicUsize);

    impl Wake for CountWakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_run_is_held_until_every_answered_thread_has_left_and_the_last_wakes_it() {
        let departures = Departures::default();
        let wakes = Arc::new(CountWakes(AtomicUsize::new(0)));
        let waker = Waker::from(wakes.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(
            departures.poll_all_left(&mut cx).is_ready(),
            "nobody answered"
        );
        departures.answered();
        departures.answered();
        assert!(departures.poll_all_left(&mut cx).is_pending());
        departures.left();
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            0,
            "one answer is still untaken"
        );
        departures.left();
        assert_eq!(
            wakes.0.load(Ordering::SeqCst),
            1,
            "the last to leave wakes the run"
        );
        assert!(departures.poll_all_left(&mut cx).is_ready());
    }
}
