//! Leases: which live process owns a session (SPEC §9.3) (being written).
