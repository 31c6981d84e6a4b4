//! The registry of open operations (SPEC §4): one open operation per (profile, session key).
//!
//! Plain data; a runtime wraps it in a lock and stores its own operation handles in it. The
//! rules (refuse while an unsettled one is there, replace a settled leftover, a late close
//! never evicts a newer operation) live here once.

use crate::operation::{OpId, Text};
use std::collections::HashMap;

/// Why a host's registration of an operation was refused: the session's open one.
pub fn already_open_text(session_key: &str, open: OpId) -> String {
    format!("session '{session_key}' already has operation {open} open")
}

/// What the registry needs to know of a stored handle.
pub trait RegistryEntry {
    /// The operation's id.
    fn op_id(&self) -> OpId;
    /// Whether the operation has settled.
    fn is_settled(&self) -> bool;
}

/// Where an operation registers: the process's profile (`CONNOP_HOME`) and the gateway's
/// session key (not the agent's session id, which rotates).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RegistryKey {
    /// The profile.
    pub profile: Text,
    /// The gateway's key for the conversation.
    pub session_key: Text,
}

impl RegistryKey {
    /// A key.
    pub fn new(profile: impl Into<Text>, session_key: impl Into<Text>) -> Self {
        RegistryKey {
            profile: profile.into(),
            session_key: session_key.into(),
        }
    }
}

/// One open operation per key.
#[derive(Debug)]
pub struct Registry<H> {
    entries: HashMap<RegistryKey, H>,
}

impl<H> Default for Registry<H> {
    fn default() -> Self {
        Registry {
            entries: HashMap::new(),
        }
    }
}

impl<H: RegistryEntry> Registry<H> {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `handle` under `key`. Refuses with the open operation's id while an unsettled
    /// one is there; a settled leftover is replaced.
    pub fn open(&mut self, key: RegistryKey, handle: H) -> Result<(), OpId> {
        if let Some(existing) = self.entries.get(&key) {
            if !existing.is_settled() {
                return Err(existing.op_id());
            }
        }
        self.entries.insert(key, handle);
        Ok(())
    }

    /// Forgets every entry (a test's fresh start).
    pub fn clear(&mut self) -> Vec<H> {
        self.entries.drain().map(|(_, h)| h).collect()
    }

    /// The unsettled operation under `key`, if any.
    #[must_use]
    pub fn current(&self, key: &RegistryKey) -> Option<&H> {
        self.entries.get(key).filter(|h| !h.is_settled())
    }

    /// The operation under `key` with that id, settled or not.
    #[must_use]
    pub fn get(&self, key: &RegistryKey, op_id: OpId) -> Option<&H> {
        self.entries.get(key).filter(|h| h.op_id() == op_id)
    }

    /// Removes the entry under `key` only if it is the operation `op_id`, and returns it. A
    /// late close never evicts a newer operation.
    pub fn close(&mut self, key: &RegistryKey, op_id: OpId) -> Option<H> {
        if self.entries.get(key).is_some_and(|h| h.op_id() == op_id) {
            self.entries.remove(key)
        } else {
            None
        }
    }

    /// How many entries there are (settled leftovers included).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Copy)]
    struct Entry(OpId, bool);
    impl RegistryEntry for Entry {
        fn op_id(&self) -> OpId {
            self.0
        }
        fn is_settled(&self) -> bool {
            self.1
        }
    }

    fn id(n: u8) -> OpId {
        OpId::from_entropy([n; 6])
    }

    #[test]
    fn one_open_operation_per_key_and_late_closes_are_harmless() {
        let mut reg = Registry::new();
        let key = RegistryKey::new("/home/a", "s1");
        reg.open(key.clone(), Entry(id(1), false)).unwrap();
        assert_eq!(reg.open(key.clone(), Entry(id(2), false)), Err(id(1)));
        // Another profile or session key is another slot.
        reg.open(RegistryKey::new("/home/b", "s1"), Entry(id(3), false))
            .unwrap();
        reg.open(RegistryKey::new("/home/a", "s2"), Entry(id(4), false))
            .unwrap();
        assert_eq!(reg.current(&key).map(|e| e.0), Some(id(1)));
        assert!(reg.get(&key, id(2)).is_none());
        // A settled leftover is replaced, and a late close of it does not evict the new one.
        reg.open(key.clone(), Entry(id(1), true)).unwrap_err();
        reg.entries.insert(key.clone(), Entry(id(1), true));
        assert!(reg.current(&key).is_none());
        assert!(reg.get(&key, id(1)).is_some());
        reg.open(key.clone(), Entry(id(5), false)).unwrap();
        assert!(reg.close(&key, id(1)).is_none());
        assert_eq!(reg.current(&key).map(|e| e.0), Some(id(5)));
        assert!(reg.close(&key, id(5)).is_some());
        assert!(reg.current(&key).is_none());
        assert_eq!(reg.len(), 2);
    }
}
