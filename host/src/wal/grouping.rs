//! The sandboxed WAL's grouping policy, apart from the store it drives: which queued durable
//! commits travel as one guest call ([`gather_durable_commits`], a pure function), and how long
//! a run collects a group's answers before sending them ([`AnswerBurst`], a pure state
//! machine). Each has deterministic unit tests here or in `super::tests`. The hold that lets
//! the threads a group answered come back before the run goes on is the sandbox's
//! (`crate::sandbox::departures`). The guest's group commit (`stele::wal::group_commit`) then
//! groups what these calls stage; these rules only decide how callers reach it.

use std::ops::Range;

use stele::wal::LogSeq;

use super::request::{Request, WalReply};
use crate::embed::bindings::engine_async::exports::stele::log::wal as wit;

/// How long a run collects the answers of one group before it sends any. The calls a group
/// completes finish about one per turn of the store: the run takes turns while they bring
/// answers, at most one per call that was in flight when the first answer came (no timer),
/// then sends them together. Callers answered in one burst come back together and stage into
/// one group; answers sent between guest turns came back staggered, and the first caller back
/// led a group of one.
#[derive(Debug)]
pub(super) struct AnswerBurst {
    turns_max: usize,
    turns_taken: usize,
    collected: usize,
}

impl AnswerBurst {
    /// A burst that starts with one answer, `in_flight` calls still running.
    pub(super) fn begin(in_flight: usize) -> AnswerBurst {
        AnswerBurst {
            turns_max: in_flight,
            turns_taken: 0,
            collected: 1,
        }
    }

    /// With `collected` answers in hand: take another turn of the store? No once a turn brought
    /// none, or once every call that was in flight had its turn.
    pub(super) fn another_turn(&mut self, collected: usize) -> bool {
        let quiet = self.turns_taken > 0 && collected == self.collected;
        self.collected = collected;
        if quiet || self.turns_taken == self.turns_max {
            return false;
        }
        self.turns_taken += 1;
        true
    }
}

/// What one guest call serves: one request, or the durable commits of several callers.
pub(super) enum Call {
    One(Request),
    DurableBatches(DurableBatches),
}

/// Durable commits of several callers that reached the instance together, for one
/// `commit-batches-durable` call. Each caller's batch keeps its own seqs and its own answer;
/// what the gathering saves is a guest task per caller (about 16 µs of the async ABI's CPU
/// each, on the group's critical path).
pub(super) struct DurableBatches {
    pub(super) batches: Vec<Vec<wit::CommitRecord>>,
    pub(super) replies: Vec<WalReply<Range<LogSeq>>>,
    pub(super) encoded_bytes: usize,
}

/// Groups the non-empty durable commits among `requests` into calls of at most one group's
/// worth of records (more would be split across groups anyway, and each call's lifted copy in
/// the guest's memory stays bounded by the group bound); the other requests are started as
/// they are, in their order. An empty batch stays a call of its own: alone, it is answered at
/// once, without waiting for anyone's group.
pub(super) fn gather_durable_commits(
    requests: impl Iterator<Item = Request>,
    group_bytes_max: usize,
) -> Vec<Call> {
    let mut calls = Vec::new();
    // Where in `calls` the durable commits still taking batches are.
    let mut gathering: Option<usize> = None;
    for request in requests {
        let (records, bytes, reply) = match request {
            Request::CommitManyDurable {
                records,
                encoded_bytes,
                reply,
            } if !records.is_empty() => (records, encoded_bytes, reply),
            other => {
                calls.push(Call::One(other));
                continue;
            }
        };
        if let Some(Call::DurableBatches(open)) = gathering.map(|at| &mut calls[at])
            && open.encoded_bytes + bytes <= group_bytes_max
        {
            open.batches.push(records);
            open.replies.push(reply);
            open.encoded_bytes += bytes;
            continue;
        }
        gathering = Some(calls.len());
        calls.push(Call::DurableBatches(DurableBatches {
            batches: vec![records],
            replies: vec![reply],
            encoded_bytes: bytes,
        }));
    }
    // A gathering of one is an ordinary commit.
    calls
        .into_iter()
        .map(|call| match call {
            Call::DurableBatches(mut one) if one.replies.len() == 1 => {
                Call::One(Request::CommitManyDurable {
                    records: one.batches.pop().expect("one batch per reply"),
                    encoded_bytes: one.encoded_bytes,
                    reply: one.replies.pop().expect("one reply"),
                })
            }
            call => call,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_ends_at_the_first_quiet_turn() {
        let mut burst = AnswerBurst::begin(5);
        assert!(burst.another_turn(1), "the first turn is always taken");
        assert!(burst.another_turn(3), "it brought two");
        assert!(!burst.another_turn(3), "it brought none");
    }

    #[test]
    fn a_burst_takes_at_most_one_turn_per_call_in_flight() {
        let mut burst = AnswerBurst::begin(2);
        assert!(burst.another_turn(1));
        assert!(burst.another_turn(2));
        assert!(
            !burst.another_turn(3),
            "two calls were in flight: two turns"
        );
        assert!(
            !AnswerBurst::begin(0).another_turn(1),
            "nothing else in flight"
        );
    }
}
