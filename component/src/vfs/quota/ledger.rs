//! The disk ledger: how many bytes one tenant's files hold and may hold, as plain data. It
//! performs no I/O; `stele_host::fs::QuotaVfs` asks it before every call that could grow a file and
//! tells it what each call did.
//!
//! A file's **charge** is the larger of its length and the longest live reservation on its
//! path. The ledger keeps the sum of the charges, `used`, at or below `limit` by refusing, before
//! anything is written, every growth and every reservation that would pass it. Shrinking, removal
//! and released reservations never fail. Lengths are logical (`set_len` on a sparse file counts
//! in full): preallocated space is space the tenant holds.

use std::collections::HashMap;

use super::QuotaExceeded;

/// Identifies one live reservation, for [`DiskLedger::release`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ReservationId(u64);

#[derive(Debug, Default)]
struct FileCharge {
    len: u64,
    /// Live reservations on this path: (id, the length reserved).
    reservations: Vec<(ReservationId, u64)>,
}

impl FileCharge {
    fn charge(&self) -> u64 {
        self.charge_at(self.len)
    }

    /// The charge the file would have at length `len`, its reservations unchanged.
    fn charge_at(&self, len: u64) -> u64 {
        self.reservations
            .iter()
            .map(|&(_, reserved)| reserved)
            .fold(len, u64::max)
    }

    fn is_idle(&self) -> bool {
        self.len == 0 && self.reservations.is_empty()
    }
}

/// The bytes one tenant's files are charged against its `limit`. See the module doc.
#[derive(Debug)]
pub struct DiskLedger {
    limit: u64,
    used: u64,
    files: HashMap<String, FileCharge>,
    next_id: u64,
}

impl DiskLedger {
    /// An empty ledger with room for `limit` bytes.
    pub fn new(limit: u64) -> Self {
        DiskLedger {
            limit,
            used: 0,
            files: HashMap::new(),
            next_id: 0,
        }
    }

    /// The bound.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Moves the bound. Lowering it below `used` refuses every growth until enough is freed;
    /// nothing already there is taken away.
    pub fn set_limit(&mut self, limit: u64) {
        self.limit = limit;
    }

    /// Bytes charged now: every file's length or live reservation, whichever is larger.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// The length the ledger holds for `path` (0 for a file it does not know).
    pub fn len(&self, path: &str) -> u64 {
        self.files.get(path).map_or(0, |file| file.len)
    }

    /// Takes note of a file found on disk, charged whatever its length, even past the limit: the
    /// bytes are there already. Used when the ledger is built, and for a file opened that it
    /// did not know.
    pub fn adopt(&mut self, path: &str, len: u64) {
        self.apply(path, |file| file.len = len);
    }

    /// Asks to make `path` `len` bytes long (a write past its end, or a `set_len`). A shrink is
    /// always granted; a growth only if the charge it adds fits under the limit.
    ///
    /// # Errors
    /// [`QuotaExceeded`] when it does not fit; the ledger is unchanged.
    pub fn set_len(&mut self, path: &str, len: u64) -> Result<(), QuotaExceeded> {
        let file = self.files.get(path);
        let before = file.map_or(0, FileCharge::charge);
        self.check(before, Self::charge_with_len(file, len))?;
        self.apply(path, |file| file.len = len);
        Ok(())
    }

    /// Grows `path` to at least `end` bytes (a write whose last byte is at `end - 1`). Shorter
    /// ends change nothing.
    ///
    /// # Errors
    /// As [`Self::set_len`].
    pub fn extend_to(&mut self, path: &str, end: u64) -> Result<(), QuotaExceeded> {
        if end <= self.len(path) {
            return Ok(());
        }
        self.set_len(path, end)
    }

    /// Reserves room for `path` to become `len` bytes long, charged from now until
    /// [`Self::release`]: the file may then grow to `len` with no further check.
    ///
    /// # Errors
    /// [`QuotaExceeded`] when the charge it adds does not fit; nothing is reserved.
    pub fn reserve(&mut self, path: &str, len: u64) -> Result<ReservationId, QuotaExceeded> {
        let file = self.files.get(path);
        let before = file.map_or(0, FileCharge::charge);
        self.check(before, before.max(len))?;
        let id = ReservationId(self.next_id);
        self.next_id += 1;
        self.apply(path, |file| file.reservations.push((id, len)));
        Ok(id)
    }

    /// Ends reservation `id` on `path`; the file stays charged for its length.
    pub fn release(&mut self, path: &str, id: ReservationId) {
        self.apply(path, |file| {
            file.reservations.retain(|&(held, _)| held != id)
        });
    }

    /// The file at `path` was removed: its length is no longer charged (its reservations are,
    /// until released).
    pub fn remove(&mut self, path: &str) {
        self.apply(path, |file| file.len = 0);
    }

    /// Asks to rename `from` over `to`: `to` then has `from`'s length and whatever `to` held is
    /// freed. Reservations stay with their paths (a reservation names the path it was asked
    /// for, and is released by it). So a rename can add to `used` only when `from` is still
    /// reserved, which an engine avoids by releasing a staged file's reservation once the file
    /// is written, before its rename; one that would pass the limit is refused.
    ///
    /// # Errors
    /// [`QuotaExceeded`]; the ledger is unchanged.
    pub fn rename(&mut self, from: &str, to: &str) -> Result<(), QuotaExceeded> {
        self.rename_allowed(from, to)?;
        if from == to {
            return Ok(());
        }
        let moved_len = self.len(from);
        self.apply(from, |file| file.len = 0);
        self.apply(to, |file| file.len = moved_len);
        Ok(())
    }

    /// Whether [`Self::rename`] would be granted, changing nothing.
    ///
    /// # Errors
    /// As [`Self::rename`].
    pub fn rename_allowed(&self, from: &str, to: &str) -> Result<(), QuotaExceeded> {
        if from == to {
            return Ok(());
        }
        let from_file = self.files.get(from);
        let to_file = self.files.get(to);
        let moved_len = from_file.map_or(0, |file| file.len);
        let before =
            from_file.map_or(0, FileCharge::charge) + to_file.map_or(0, FileCharge::charge);
        let after = Self::charge_with_len(from_file, 0) + Self::charge_with_len(to_file, moved_len);
        self.check(before, after)
    }

    fn charge_with_len(file: Option<&FileCharge>, len: u64) -> u64 {
        file.map_or(len, |file| file.charge_at(len))
    }

    /// Refuses a change of one file's charge from `before` to `after` that would pass the
    /// limit. A change that does not add (`after <= before`) is never refused, even when `used`
    /// is already past the limit (adopted files).
    fn check(&self, before: u64, after: u64) -> Result<(), QuotaExceeded> {
        if after <= before {
            return Ok(());
        }
        let requested = after - before;
        if self.used.saturating_add(requested) > self.limit {
            return Err(QuotaExceeded {
                limit: self.limit,
                used: self.used,
                requested,
            });
        }
        Ok(())
    }

    /// Changes the entry for `path` and keeps `used` equal to the sum of the charges.
    fn apply(&mut self, path: &str, change: impl FnOnce(&mut FileCharge)) {
        let file = match self.files.get_mut(path) {
            Some(file) => file,
            None => self.files.entry(path.to_owned()).or_default(),
        };
        let before = file.charge();
        change(file);
        let after = file.charge();
        let idle = file.is_idle();
        self.used = self.used - before + after;
        if idle {
            self.files.remove(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The sum of the charges, computed from scratch.
    fn charged(ledger: &DiskLedger) -> u64 {
        ledger.files.values().map(FileCharge::charge).sum()
    }

    #[test]
    fn growth_past_the_limit_is_refused_with_the_numbers_and_changes_nothing() {
        let mut ledger = DiskLedger::new(100);
        ledger.set_len("a", 60).unwrap();
        assert_eq!(
            ledger.extend_to("a", 120),
            Err(QuotaExceeded {
                limit: 100,
                used: 60,
                requested: 60
            })
        );
        assert_eq!((ledger.used(), ledger.len("a")), (60, 60));
        ledger.extend_to("b", 40).unwrap();
        assert_eq!(ledger.used(), 100);
        ledger.set_len("a", 10).unwrap();
        assert_eq!(ledger.used(), 50, "a shrink frees at once");
    }

    #[test]
    fn a_reservation_holds_room_that_its_file_then_grows_into_for_free() {
        let mut ledger = DiskLedger::new(100);
        let held = ledger.reserve("seg", 64).unwrap();
        assert_eq!(ledger.used(), 64);
        assert!(ledger.set_len("other", 40).is_err(), "the room is held");
        ledger.set_len("seg", 64).unwrap();
        assert_eq!(ledger.used(), 64, "growth into a reservation adds nothing");
        ledger.release("seg", held);
        assert_eq!(ledger.used(), 64, "the file keeps its length");
        let unused = ledger.reserve("next", 30).unwrap();
        ledger.release("next", unused);
        assert_eq!(ledger.used(), 64, "an unused reservation frees everything");
    }

    #[test]
    fn a_rename_frees_the_replaced_file_and_is_refused_from_a_reserved_name() {
        let mut ledger = DiskLedger::new(100);
        ledger.set_len("j", 60).unwrap();
        let room = ledger.reserve("j.compacting", 30).unwrap();
        ledger.set_len("j.compacting", 30).unwrap();
        assert_eq!(ledger.used(), 90);
        // Still reserved: the rename would leave 30 reserved behind and 30 in `j`, 90 -> 60.
        ledger.rename("j.compacting", "j").unwrap();
        assert_eq!(ledger.used(), 60);
        ledger.release("j.compacting", room);
        assert_eq!((ledger.used(), ledger.len("j")), (30, 30));

        let mut ledger = DiskLedger::new(64);
        ledger.reserve("staging", 32).unwrap();
        ledger.set_len("staging", 32).unwrap();
        ledger.set_len("x", 32).unwrap();
        assert!(
            ledger.rename("staging", "fresh").is_err(),
            "32 reserved behind and 32 moved would make 96"
        );
        assert_eq!(ledger.used(), 64);
    }

    #[test]
    fn adopted_files_count_even_past_the_limit_and_only_shrinking_is_granted() {
        let mut ledger = DiskLedger::new(10);
        ledger.adopt("old", 50);
        assert_eq!(ledger.used(), 50);
        assert!(ledger.extend_to("new", 1).is_err());
        ledger.set_len("old", 45).unwrap();
        ledger.remove("old");
        assert_eq!(ledger.used(), 0);
        ledger.extend_to("new", 10).unwrap();
    }

    #[derive(Clone, Debug)]
    enum Op {
        SetLen(usize, u64),
        Extend(usize, u64),
        Reserve(usize, u64),
        Release(usize),
        Rename(usize, usize),
        Remove(usize),
        Limit(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..4usize, 0..400u64).prop_map(|(f, n)| Op::SetLen(f, n)),
            (0..4usize, 0..400u64).prop_map(|(f, n)| Op::Extend(f, n)),
            (0..4usize, 0..400u64).prop_map(|(f, n)| Op::Reserve(f, n)),
            (0..8usize).prop_map(Op::Release),
            (0..4usize, 0..4usize).prop_map(|(a, b)| Op::Rename(a, b)),
            (0..4usize).prop_map(Op::Remove),
            (0..600u64).prop_map(Op::Limit),
        ]
    }

    proptest! {
        /// Whatever the calls, `used` is the sum of the charges; a call that adds charge never
        /// takes `used` past the limit; and a refused call changes nothing.
        #[test]
        fn used_is_the_sum_of_charges_and_never_passes_the_limit_by_a_granted_call(
            limit in 0..600u64,
            ops in proptest::collection::vec(op(), 1..80),
        ) {
            let names = ["a", "b", "c", "d"];
            let mut ledger = DiskLedger::new(limit);
            let mut held: Vec<(&str, ReservationId)> = Vec::new();
            for op in ops {
                let used_before = ledger.used();
                let lens_before: Vec<u64> = names.iter().map(|n| ledger.len(n)).collect();
                let outcome = match op {
                    Op::SetLen(f, n) => ledger.set_len(names[f], n),
                    Op::Extend(f, n) => ledger.extend_to(names[f], n),
                    Op::Reserve(f, n) => ledger.reserve(names[f], n).map(|id| held.push((names[f], id))),
                    Op::Release(i) => {
                        if i < held.len() {
                            let (name, id) = held.remove(i);
                            ledger.release(name, id);
                        }
                        Ok(())
                    }
                    Op::Rename(a, b) => ledger.rename(names[a], names[b]),
                    Op::Remove(f) => {
                        ledger.remove(names[f]);
                        Ok(())
                    }
                    Op::Limit(n) => {
                        ledger.set_limit(n);
                        Ok(())
                    }
                };
                prop_assert_eq!(ledger.used(), charged(&ledger));
                match outcome {
                    Ok(()) => prop_assert!(
                        ledger.used() <= used_before || ledger.used() <= ledger.limit(),
                        "a granted call took used from {} to {} past {}",
                        used_before, ledger.used(), ledger.limit()
                    ),
                    Err(refusal) => {
                        prop_assert_eq!(ledger.used(), used_before);
                        let lens: Vec<u64> = names.iter().map(|n| ledger.len(n)).collect();
                        prop_assert_eq!(lens, lens_before);
                        prop_assert!(refusal.used + refusal.requested > refusal.limit);
                    }
                }
            }
        }
    }
}
