//! [`JournalEngine`]: what a [`super::Journal`] asks of the engine, wherever the engine runs.
//! There is one implementation per [`Mode`]: the engine's [`JournalFile`] itself (here), the
//! async instance ([`AsyncJournal`], `super::session`) and the plain instance
//! ([`PlainJournal`]). [`open_engine`] picks one when the journal opens, the only match on the
//! mode a journal handle makes.
//!
//! Every call is a blocking one: [`stele::journal::Writer`] moves the engine to tokio's
//! blocking pool for each call, in every mode.

use std::sync::Arc;

use stele::journal::JournalFile;
use stele::vfs::{ReadyIo, Vfs};
use wasmtime::Store;
use wasmtime::component::ResourceAny;

use super::convert::plain::from_wit_journal_error;
use super::error::JournalError;
use super::session::{self, AsyncJournal, JournalRequest};
use crate::Mode;
use crate::embed::bindings::{self, exports::stele::log::journal as wit};
use crate::sandbox::PlainInstance;
use crate::sandbox::runtime::{GuestState, Runtime, SandboxLimits, trap_error};

/// What a journal handle asks of the engine. An append reaches it checked
/// ([`stele::journal::check_append`]), so a sandboxed engine is never handed one larger than a
/// frame.
pub(crate) trait JournalEngine: Send + 'static {
    fn append(&mut self, frames: &[u8]) -> Result<(), JournalError>;
    fn compact(&mut self, snapshot: &[u8]) -> Result<(), JournalError>;
    fn clean_end(&mut self) -> Result<u64, JournalError>;
}

/// Opens (or creates) the journal at `path` where `mode` says; `limits` bound a sandboxed
/// instance.
pub(crate) fn open_engine(
    vfs: Arc<dyn Vfs>,
    path: &str,
    mode: Mode,
    limits: SandboxLimits,
) -> Result<Box<dyn JournalEngine>, JournalError> {
    Ok(match mode {
        Mode::Native => Box::new(JournalFile::open_blocking(vfs, path)?),
        Mode::Sandboxed => Box::new(session::start(vfs, path, limits)?),
        Mode::SandboxedPlain => Box::new(PlainJournal::open(vfs, path, limits)?),
    })
}

impl JournalEngine for JournalFile<ReadyIo> {
    fn append(&mut self, frames: &[u8]) -> Result<(), JournalError> {
        Ok(self.append_blocking(frames)?)
    }
    fn compact(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        Ok(self.compact_blocking(snapshot)?)
    }
    fn clean_end(&mut self) -> Result<u64, JournalError> {
        Ok(JournalFile::clean_end(self))
    }
}

/// The async instance: each call is a request its store driver serves; the blocking thread
/// that makes it drives the instance (and its sync) itself when the call is alone.
impl JournalEngine for AsyncJournal {
    fn append(&mut self, frames: &[u8]) -> Result<(), JournalError> {
        self.request_blocking(|reply| JournalRequest::Append {
            frames: frames.to_vec(),
            reply,
        })
    }
    fn compact(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        self.request_blocking(|reply| JournalRequest::Compact {
            snapshot: snapshot.to_vec(),
            reply,
        })
    }
    fn clean_end(&mut self) -> Result<u64, JournalError> {
        self.request_blocking(|reply| JournalRequest::CleanEnd { reply })
    }
}

/// A journal writer in a plain instance of its own; the first trap is sticky
/// ([`PlainInstance::call`]).
pub(crate) struct PlainJournal(PlainInstance);

impl PlainJournal {
    fn open(vfs: Arc<dyn Vfs>, path: &str, limits: SandboxLimits) -> Result<Self, JournalError> {
        let (mut store, engine) = Runtime::get()?.instantiate(vfs, limits)?;
        let writer = engine
            .stele_log_journal()
            .writer()
            .call_open(&mut store, path)
            .map_err(trap_error)?
            .map_err(from_wit_journal_error)?;
        Ok(PlainJournal(PlainInstance::new(store, engine, writer)))
    }

    /// One call on the instance's writer.
    fn call<R>(
        &mut self,
        call: impl FnOnce(
            &mut Store<GuestState>,
            &wit::GuestWriter<'_>,
            ResourceAny,
        ) -> wasmtime::Result<Result<R, wit::JournalError>>,
    ) -> Result<R, JournalError> {
        let answer = self
            .0
            .call(|store, engine: &bindings::SteleEngine, writer| {
                call(store, &engine.stele_log_journal().writer(), writer)
            })?;
        answer.map_err(from_wit_journal_error)
    }
}

impl JournalEngine for PlainJournal {
    fn append(&mut self, frames: &[u8]) -> Result<(), JournalError> {
        self.call(|store, api, writer| api.call_append(store, writer, frames))
    }
    fn compact(&mut self, snapshot: &[u8]) -> Result<(), JournalError> {
        self.call(|store, api, writer| api.call_compact(store, writer, snapshot))
    }
    fn clean_end(&mut self) -> Result<u64, JournalError> {
        self.call(|store, api, writer| api.call_clean_end(store, writer).map(Ok))
    }
}
