//! [`Mode`]: where a handle's engine runs. Every facet's handle takes one.

/// Where the engine runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The engine is called directly, in this process's address space.
    Native,
    /// The engine runs inside the component (the async-ABI build), in its own wasmtime store,
    /// with no file access but the `stele:log/vfs` imports. For the WAL, the journal and the
    /// push log alike, one instance per handle serves every thread and task concurrently (so
    /// durable commits share syncs as they do natively), and its first trap or broken
    /// contract refuses every later call.
    Sandboxed,
    /// The engine runs inside the plain WASI 0.2 build of the component: what a host without
    /// the async ABI runs. Calls on one instance are serialized; each durable commit syncs on
    /// its own.
    SandboxedPlain,
}

impl Mode {
    /// Every mode, for running one check in each.
    pub const ALL: [Mode; 3] = [Mode::Native, Mode::Sandboxed, Mode::SandboxedPlain];

    /// The mode's name in tables and on the command line: `native`, `sandboxed`,
    /// `sandboxed-plain`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Native => "native",
            Mode::Sandboxed => "sandboxed",
            Mode::SandboxedPlain => "sandboxed-plain",
        }
    }
}
