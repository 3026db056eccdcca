//! [`Baton`]: a value that one guest task holds at a time. The async build's writers (a
//! journal, a push log) are `&mut` state, and the host may call one writer concurrently; a
//! second call waits for the first to hand the writer back, instead of being refused or
//! interleaved with it. The component is single-threaded, so this is a cell and a waker list,
//! not a lock.

use std::cell::{Cell, RefCell};
use std::future::poll_fn;
use std::ops::{Deref, DerefMut};
use std::task::{Poll, Waker};

pub struct Baton<T> {
    value: Cell<Option<T>>,
    /// Tasks waiting for the value. All are woken when it comes back, so that a waiter whose
    /// call was dropped cannot strand the others; the first to run takes it.
    waiting: RefCell<Vec<Waker>>,
}

/// The value, held by one task; handed back (and the waiters woken) on drop.
pub struct Held<'a, T> {
    baton: &'a Baton<T>,
    value: Option<T>,
}

impl<T> Baton<T> {
    pub fn new(value: T) -> Self {
        Baton {
            value: Cell::new(Some(value)),
            waiting: RefCell::default(),
        }
    }

    /// Waits until no other task holds the value, and holds it.
    pub async fn take(&self) -> Held<'_, T> {
        let value = poll_fn(|cx| match self.value.take() {
            Some(value) => Poll::Ready(value),
            None => {
                self.waiting.borrow_mut().push(cx.waker().clone());
                Poll::Pending
            }
        })
        .await;
        Held {
            baton: self,
            value: Some(value),
        }
    }
}

impl<T> Deref for Held<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value.as_ref().expect("held until dropped")
    }
}

impl<T> DerefMut for Held<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value.as_mut().expect("held until dropped")
    }
}

impl<T> Drop for Held<'_, T> {
    fn drop(&mut self) {
        self.baton.value.set(self.value.take());
        for waker in self.baton.waiting.take() {
            waker.wake();
        }
    }
}
