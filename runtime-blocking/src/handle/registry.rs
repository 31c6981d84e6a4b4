//! The process's registry of open operations, shared by every thread and task: the core's
//! [`Registry`] behind a lock, holding [`OpHandle`]s. The lock is never held across a
//! gateway call or a callback.

use super::op::{OpHandle, RegistryCell, lock};
use connop_core::operation::{OpId, Text};
use connop_core::registry::{Registry, RegistryKey};
use std::sync::{Arc, MutexGuard};

/// One open operation per (profile, session key), shared across threads.
#[derive(Clone)]
pub struct SharedRegistry {
    profile: Text,
    inner: RegistryCell,
}

impl SharedRegistry {
    /// An empty registry for a profile (the process's `CONNOP_HOME`).
    pub fn new(profile: impl Into<Text>) -> Self {
        SharedRegistry {
            profile: profile.into(),
            inner: Arc::default(),
        }
    }

    /// An empty registry that keeps settled operations readable by [`get`](Self::get) after
    /// their entries closed: each session's latest, for the `capacity` sessions whose
    /// operations settled most recently (see `Registry::keeping_settled`).
    pub fn keeping_settled(profile: impl Into<Text>, capacity: usize) -> Self {
        SharedRegistry {
            profile: profile.into(),
            inner: Arc::new(std::sync::Mutex::new(Registry::keeping_settled(capacity))),
        }
    }

    /// The same entries seen from another profile: its sessions, and operations registered
    /// under it (a host serving several profiles in one process).
    pub fn for_profile(&self, profile: impl Into<Text>) -> Self {
        SharedRegistry {
            profile: profile.into(),
            inner: self.inner.clone(),
        }
    }

    /// The profile.
    pub fn profile(&self) -> &Text {
        &self.profile
    }

    /// The key a session's operation registers under.
    pub fn key(&self, session_key: &str) -> RegistryKey {
        RegistryKey::new(self.profile.clone(), session_key)
    }

    /// The cell operations register themselves in.
    pub(crate) fn cell(&self) -> &RegistryCell {
        &self.inner
    }

    fn lock(&self) -> MutexGuard<'_, Registry<OpHandle>> {
        lock(&self.inner)
    }

    /// Registers an operation; refuses with the open one's id.
    pub fn open(&self, key: &RegistryKey, handle: OpHandle) -> Result<(), OpId> {
        // Operations the registry retired are let go outside its lock.
        let (answer, _retired) = self.lock().open_retiring(key.clone(), handle);
        answer
    }

    /// The unsettled operation of a session.
    pub fn current(&self, session_key: &str) -> Option<OpHandle> {
        self.lock().current(&self.key(session_key)).cloned()
    }

    /// A session's operation by id: open, or settled and still kept (see
    /// [`keeping_settled`](Self::keeping_settled)).
    pub fn get(&self, session_key: &str, op_id: OpId) -> Option<OpHandle> {
        self.lock().get(&self.key(session_key), op_id).cloned()
    }

    /// Removes the entry if it is still that operation.
    pub fn close(&self, key: &RegistryKey, op_id: OpId) {
        let closed = self.lock().close(key, op_id);
        drop(closed);
    }

    /// Forgets every entry (a test's fresh start); the operations go on unregistered.
    pub fn clear(&self) {
        let cleared = self.lock().clear();
        drop(cleared);
    }

    /// How many entries there are.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

impl std::fmt::Debug for SharedRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRegistry")
            .field("profile", &self.profile)
            .field("entries", &self.len())
            .finish()
    }
}
