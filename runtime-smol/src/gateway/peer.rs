//! `connop peer dm` (SPEC §9.4) (being written).
