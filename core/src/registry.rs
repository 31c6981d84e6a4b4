//! The registry of open operations (docs/contract.md#registry): one open operation per (profile,
//! session key).
//!
//! Plain data; a runtime wraps it in a lock and stores its own operation handles in it. The
//! rules (refuse while an unsettled one is there, replace a settled leftover, a late close
//! never evicts a newer operation, which settled operations stay readable) live here once.

use crate::operation::{OpId, Text};
use std::collections::{HashMap, VecDeque};

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
    settled: Settled<H>,
    /// Kept operations a newer settle evicted, handed back by
    /// [`take_retired`](Registry::take_retired): letting one go frees all it held, which is
    /// not work for the caller whose input settled the newer one (a card answer waits on it).
    retired: Vec<H>,
}

impl<H> Default for Registry<H> {
    fn default() -> Self {
        Registry {
            entries: HashMap::new(),
            settled: Settled::default(),
            retired: Vec::new(),
        }
    }
}

/// Operations whose entries closed when they settled, kept for [`Registry::get`]: the latest
/// of each key, and at most `capacity` of them, the one settled longest ago forgotten first.
#[derive(Debug)]
struct Settled<H> {
    capacity: usize,
    /// Each key's kept operation, with the number it was kept under.
    by_key: HashMap<RegistryKey, (u64, H)>,
    /// Keys in the order their operations were kept; a number no longer `by_key`'s is stale.
    order: VecDeque<(u64, RegistryKey)>,
    next: u64,
}

impl<H> Default for Settled<H> {
    fn default() -> Self {
        Settled {
            capacity: 0,
            by_key: HashMap::new(),
            order: VecDeque::new(),
            next: 0,
        }
    }
}

impl<H> Settled<H> {
    /// Keeps `handle` as `key`'s; returns what that forgot (the key's older one, or the
    /// oldest of all past capacity), or `handle` itself when nothing is kept.
    fn keep(&mut self, key: RegistryKey, handle: H) -> Vec<H> {
        if self.capacity == 0 {
            return vec![handle];
        }
        let number = self.next;
        self.next += 1;
        let mut forgotten: Vec<H> = self
            .by_key
            .insert(key.clone(), (number, handle))
            .map(|(_, older)| older)
            .into_iter()
            .collect();
        self.order.push_back((number, key));
        while self.by_key.len() > self.capacity {
            let Some((number, key)) = self.order.pop_front() else {
                break;
            };
            if self
                .by_key
                .get(&key)
                .is_some_and(|(kept, _)| *kept == number)
            {
                forgotten.extend(self.by_key.remove(&key).map(|(_, handle)| handle));
            }
        }
        // Stale numbers are dropped as they come to the front; bound them too.
        if self.order.len() > 2 * self.capacity.max(1) {
            let by_key = &self.by_key;
            self.order
                .retain(|(number, key)| by_key.get(key).is_some_and(|(kept, _)| kept == number));
        }
        forgotten
    }
}

impl<H: RegistryEntry> Registry<H> {
    /// An empty registry that forgets an operation when its entry closes.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty registry that keeps operations readable by [`get`](Self::get) after they
    /// settled and their entries closed ([`close_settled`](Self::close_settled)): each key's
    /// latest, for the `capacity` keys whose operations settled most recently.
    pub fn keeping_settled(capacity: usize) -> Self {
        let mut registry = Self::default();
        registry.settled.capacity = capacity;
        registry
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

    /// Forgets every entry, and every settled operation kept (a test's fresh start).
    pub fn clear(&mut self) -> Vec<H> {
        let kept = self.settled.by_key.drain().map(|(_, (_, h))| h);
        self.settled.order.clear();
        let retired = std::mem::take(&mut self.retired);
        self.entries
            .drain()
            .map(|(_, h)| h)
            .chain(kept)
            .chain(retired)
            .collect()
    }

    /// The kept operations that newer settles evicted since the last call, for the caller to
    /// drop outside its lock.
    pub fn take_retired(&mut self) -> Vec<H> {
        std::mem::take(&mut self.retired)
    }

    /// [`open`](Self::open), handing back the retired operations too
    /// ([`take_retired`](Self::take_retired)): an operation's start is off the path of any
    /// settle, so that is where they are let go.
    pub fn open_retiring(&mut self, key: RegistryKey, handle: H) -> (Result<(), OpId>, Vec<H>) {
        (self.open(key, handle), self.take_retired())
    }

    /// The unsettled operation under `key`, if any.
    #[must_use]
    pub fn current(&self, key: &RegistryKey) -> Option<&H> {
        self.entries.get(key).filter(|h| !h.is_settled())
    }

    /// The operation under `key` with that id, settled or not: its entry, or the settled one
    /// a [`keeping_settled`](Self::keeping_settled) registry still keeps.
    #[must_use]
    pub fn get(&self, key: &RegistryKey, op_id: OpId) -> Option<&H> {
        self.entries
            .get(key)
            .filter(|h| h.op_id() == op_id)
            .or_else(|| {
                let (_, kept) = self.settled.by_key.get(key)?;
                (kept.op_id() == op_id).then_some(kept)
            })
    }

    /// Removes the entry under `key` only if it is the operation `op_id`, and returns it. A
    /// late close never evicts a newer operation. A kept settled operation with that id is
    /// forgotten too.
    pub fn close(&mut self, key: &RegistryKey, op_id: OpId) -> Option<H> {
        if self.entries.get(key).is_some_and(|h| h.op_id() == op_id) {
            return self.entries.remove(key);
        }
        if self
            .settled
            .by_key
            .get(key)
            .is_some_and(|(_, kept)| kept.op_id() == op_id)
        {
            return self.settled.by_key.remove(key).map(|(_, kept)| kept);
        }
        None
    }

    /// Closes the entry of an operation that settled, as [`close`](Self::close) does; a
    /// [`keeping_settled`](Self::keeping_settled) registry keeps it for [`get`](Self::get).
    /// Returns the handles no longer held (for the caller to drop outside its lock). The
    /// older operations keeping this one evicts are retired instead
    /// ([`take_retired`](Self::take_retired)), at most `capacity` of them: past that they are
    /// returned here too.
    pub fn close_settled(&mut self, key: &RegistryKey, op_id: OpId) -> Vec<H> {
        if self.entries.get(key).is_none_or(|h| h.op_id() != op_id) {
            return Vec::new();
        }
        let Some(handle) = self.entries.remove(key) else {
            return Vec::new();
        };
        if self.settled.capacity == 0 {
            return vec![handle];
        }
        let evicted = self.settled.keep(key.clone(), handle);
        self.retired.extend(evicted);
        if self.retired.len() > self.settled.capacity {
            return std::mem::take(&mut self.retired);
        }
        Vec::new()
    }

    /// How many entries there are (settled leftovers included; kept settled operations,
    /// whose entries closed, are not).
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

    #[test]
    fn a_registry_that_forgets_keeps_nothing_past_the_close() {
        let mut reg = Registry::new();
        let key = RegistryKey::new("/home/a", "s1");
        reg.open(key.clone(), Entry(id(1), false)).unwrap();
        reg.entries.insert(key.clone(), Entry(id(1), true));
        let dropped = reg.close_settled(&key, id(1));
        assert_eq!(dropped.len(), 1, "handed back to drop");
        assert!(reg.get(&key, id(1)).is_none());
    }

    #[test]
    fn settled_operations_stay_readable_until_their_session_settles_another_or_capacity() {
        let mut reg = Registry::keeping_settled(2);
        let (a, b, c) = (
            RegistryKey::new("/h", "a"),
            RegistryKey::new("/h", "b"),
            RegistryKey::new("/h", "c"),
        );
        reg.open(a.clone(), Entry(id(1), true)).unwrap();
        assert!(reg.close_settled(&a, id(1)).is_empty(), "kept");
        assert!(reg.get(&a, id(1)).is_some(), "readable once closed");
        assert!(reg.current(&a).is_none());
        assert_eq!(reg.len(), 0);
        // A late close of another id changes nothing; a new operation of the session is
        // open beside the kept one.
        assert!(reg.close_settled(&a, id(9)).is_empty());
        reg.open(a.clone(), Entry(id(2), false)).unwrap();
        assert!(reg.get(&a, id(1)).is_some() && reg.get(&a, id(2)).is_some());
        // The session's next settled operation replaces its older one, which is retired:
        // not handed back by the settle, but to whoever asks next (a runtime, at an open).
        reg.entries.insert(a.clone(), Entry(id(2), true));
        assert!(reg.close_settled(&a, id(2)).is_empty());
        assert!(reg.get(&a, id(1)).is_none() && reg.get(&a, id(2)).is_some());
        let retired = reg.take_retired();
        assert_eq!(retired.iter().map(|e| e.0).collect::<Vec<_>>(), [id(1)]);
        assert!(reg.take_retired().is_empty(), "handed back once");
        // Past capacity the one settled longest ago goes.
        reg.open(b.clone(), Entry(id(3), true)).unwrap();
        assert!(reg.close_settled(&b, id(3)).is_empty());
        reg.open(c.clone(), Entry(id(4), true)).unwrap();
        assert!(reg.close_settled(&c, id(4)).is_empty());
        assert_eq!(
            reg.take_retired().iter().map(|e| e.0).collect::<Vec<_>>(),
            [id(2)]
        );
        assert!(reg.get(&a, id(2)).is_none());
        assert!(reg.get(&b, id(3)).is_some() && reg.get(&c, id(4)).is_some());
        // An explicit close forgets a kept one; the queue of stale numbers stays bounded.
        assert_eq!(reg.close(&b, id(3)).map(|e| e.0), Some(id(3)));
        assert!(reg.get(&b, id(3)).is_none());
        // Retired ones no one asks for are handed back by a settle past capacity: at most
        // `capacity` wait.
        let mut handed_back = 0;
        for n in 10..100u8 {
            reg.open(c.clone(), Entry(id(n), true)).unwrap();
            handed_back += reg.close_settled(&c, id(n)).len();
            assert!(reg.retired.len() <= 2, "{}", reg.retired.len());
        }
        assert_eq!(
            handed_back + reg.take_retired().len(),
            90,
            "each evicted one once"
        );
        assert!(reg.settled.order.len() <= 4, "{}", reg.settled.order.len());
        assert_eq!(reg.get(&c, id(99)).map(|e| e.0), Some(id(99)));
        // A registry that keeps nothing hands the settled one back at once, retiring none.
        let mut plain = Registry::new();
        plain.open(a.clone(), Entry(id(1), true)).unwrap();
        assert_eq!(plain.close_settled(&a, id(1)).len(), 1);
        assert!(plain.take_retired().is_empty());
    }
}
