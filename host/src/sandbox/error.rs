//! [`SandboxError`]: what only a sandboxed handle can fail with, and [`StickyFailure`], the
//! rule that an instance's first trap refuses every later call.

/// What only sandboxed mode can fail with.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// The embedded component failed to compile or link.
    #[error("loading the Stele component failed: {0}")]
    Load(String),
    /// Creating an instance failed (a store limit, say).
    #[error("instantiating the Stele component failed: {0}")]
    Instantiate(String),
    /// The guest trapped. Its state is unknown, so this instance refuses every later call; the
    /// host and other instances are unaffected.
    #[error("the Stele component trapped; this instance is unusable: {0}")]
    Trapped(String),
    /// The component broke its interface's contract in a way wasmtime cannot see (it answered
    /// a different number of outcomes than it was given batches, say): it is not Stele's
    /// engine, or it is broken. Its state is unknown, so the instance refuses every later call.
    #[error("the Stele component broke its interface's contract; this instance is unusable: {0}")]
    BrokenContract(String),
    /// Host code serving the call panicked (a blocking call on tokio's pool, a thread serving
    /// the instance). Nothing says the guest is at fault; the call's outcome is unknown.
    #[error("the host code serving a Stele call panicked: {0}")]
    Panicked(String),
    /// The guest tried to grow its memory past [`super::runtime::SandboxLimits::memory_bytes_max`].
    /// The call did not complete, and the instance refuses every later call.
    #[error(
        "the Stele component asked for {requested_bytes} bytes of memory, past its limit of \
         {limit_bytes}; this instance is unusable"
    )]
    MemoryLimit {
        /// The instance's limit.
        limit_bytes: usize,
        /// The size the guest asked its memory to grow to.
        requested_bytes: usize,
    },
    /// [`super::runtime::Runtime::init_with_engine`] came after the process's runtime was made.
    #[error("the Stele runtime is already initialized; init_with_engine must come first")]
    AlreadyInitialized,
    /// The guest ran past [`super::runtime::SandboxLimits::busy_deadline`] without returning to the
    /// host, and was interrupted. The instance refuses every later call.
    #[error(
        "the Stele component ran past its busy deadline of {deadline:?} and was interrupted; \
         this instance is unusable"
    )]
    Interrupted {
        /// The instance's busy deadline.
        deadline: std::time::Duration,
    },
    /// The engine reported a failure that this version of the WIT contract has no case of its
    /// own for (`other` in `wal-error`, `journal-error` or `push-log-error`: a condition a
    /// newer engine added), with its message. The call failed; the instance is unaffected and
    /// serves later calls.
    #[error("the Stele engine reported a failure this host has no case for: {0}")]
    EngineOther(String),
}

/// The first failure that leaves an instance's state unknown (a trap, a limit, a broken
/// contract), kept: every later call on the instance is refused with the same error, while the
/// host and other instances go on. One rule for every sandboxed facet: the plain WAL and push
/// log ([`PlainInstance`]), the journal, and the async WAL's store driver.
#[derive(Debug, Default)]
pub(crate) struct StickyFailure(Option<SandboxError>);

impl StickyFailure {
    /// The kept failure, if any.
    pub(crate) fn failure(&self) -> Option<&SandboxError> {
        self.0.as_ref()
    }

    /// Keeps `error` unless an earlier failure is kept already.
    pub(crate) fn record(&mut self, error: SandboxError) {
        self.0.get_or_insert(error);
    }

    /// Runs `call` unless a failure is kept (then refuses with it); keeps the failure `call`
    /// returns.
    pub(crate) fn run<T>(
        &mut self,
        call: impl FnOnce() -> Result<T, SandboxError>,
    ) -> Result<T, SandboxError> {
        if let Some(error) = &self.0 {
            return Err(error.clone());
        }
        call().inspect_err(|error| self.record(error.clone()))
    }
}
