//! The terminal card of `connop connect` (being written).
